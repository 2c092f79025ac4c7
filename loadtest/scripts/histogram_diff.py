#!/usr/bin/env python3
"""Quantiles of eddy-query's own histograms over a phase of a measurement.

Reads two scrapes of eddy-query's /metrics (before and after the phase)
and prints, per histogram series that moved, the count and the bucket
bounds its p50, p90 and p99 fall under: the handler's time
(`eddy_query_latency_seconds`) and the tail's write lock
(`eddy_query_tail_lock_seconds`, phase wait or hold). Bounds, not
interpolated values: a bucket says "at most".

Usage: histogram_diff.py BEFORE.txt AFTER.txt
"""

import re
import sys

NAMES = ("eddy_query_latency_seconds_bucket", "eddy_query_tail_lock_seconds_bucket")
LINE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')


def load(path):
    """Bucket counts keyed by (metric, labels without le, upper bound)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m or m.group(1) not in NAMES:
                continue
            labels = m.group(2)
            le = re.search(r'le="([^"]+)"', labels).group(1)
            series = re.sub(r',?le="[^"]+"', "", labels)
            bound = float("inf") if le == "+Inf" else float(le)
            out[(m.group(1), series, bound)] = float(m.group(3))
    return out


def main():
    before, after = load(sys.argv[1]), load(sys.argv[2])
    series = {}
    for (name, labels, bound), count in after.items():
        moved = count - before.get((name, labels, bound), 0.0)
        series.setdefault((name, labels), []).append((bound, moved))
    for (name, labels), buckets in sorted(series.items()):
        buckets.sort()
        total = buckets[-1][1]
        if total <= 0:
            continue

        def bound_ms(q, buckets=buckets, total=total):
            b = next(b for b, c in buckets if c >= q * total)
            return "inf" if b == float("inf") else f"{b * 1e3:g}"

        short = name.removeprefix("eddy_query_").removesuffix("_bucket")
        print(f"  {short} {{{labels}}}: n {int(total)}, p50 <= {bound_ms(0.5)} ms, "
              f"p90 <= {bound_ms(0.9)} ms, p99 <= {bound_ms(0.99)} ms")


if __name__ == "__main__":
    main()
