#!/usr/bin/env python3
"""Fan-out tail latency from a measured single-shard latency distribution.

A search fanned out over N shards answers when the slowest shard has
answered, so its latency is the maximum of N draws. With shards that are
independent, the maximum's CDF is F(t)^N, and its quantile q is the single
shard's quantile q^(1/N). This script reads the percentiles an
`eddy-loadtest query --json` report measured for one phase (p50, p90, p99,
p99.9, max; from the HDR histogram), interpolates the single-shard quantile
function between them (linear in latency against -log10(1 - q), which is how
latency tails look on a log-percentile plot), and prints the p50 / p90 / p99
of the slowest of N shards, plus a fixed per-fan-out overhead (the router's
merge and the extra network hop, `--overhead-ms`).

It also draws the same by Monte Carlo (inverse-transform sampling from the
interpolated distribution) as a check on the arithmetic.

What it does not know: correlation between shards (shared load, GC pauses,
a noisy neighbour on the same host make tails move together, which the
independent model overstates or understates depending on the cause), and any
quantile beyond the measured maximum (the maximum is held as the 1 - 1/count
quantile and latencies beyond it are clamped to it).

Usage:
  python3 loadtest/scripts/fanout_tail.py --report report.json [--phase 0]
      [--shards 1,2,4,8,16,32] [--overhead-ms 0.2] [--samples 200000]
"""

import argparse
import json
import math
import random
import sys


def quantile_points(latency):
    """(x, ms) points of the measured quantile function, x = -log10(1 - q)."""
    count = max(int(latency.get("count", 0)), 2)
    points = [
        (0.5, latency["p50_ms"]),
        (0.9, latency["p90_ms"]),
        (0.99, latency["p99_ms"]),
        (0.999, latency["p999_ms"]),
    ]
    q_max = 1.0 - 1.0 / count
    points = [(q, ms) for q, ms in points if q < q_max]
    points.append((q_max, latency["max_ms"]))
    out = []
    for q, ms in points:
        x = -math.log10(1.0 - q)
        # Percentiles are monotone; keep them so against rounding.
        ms = max(ms, out[-1][1]) if out else ms
        out.append((x, ms))
    return out


def quantile(points, q):
    """The interpolated single-shard latency at quantile q (q >= 0.5)."""
    if q >= 1.0:
        return points[-1][1]
    x = -math.log10(1.0 - q)
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def slowest_of(points, shards, q):
    """Quantile q of the slowest of `shards` independent shards."""
    return quantile(points, q ** (1.0 / shards))


def monte_carlo(points, shards, samples, rng):
    """p50 / p90 / p99 of the slowest of `shards` by sampling."""
    draws = []
    for _ in range(samples):
        # A single shard's draw at u < 0.5 is below its median and never
        # the slowest that matters for the upper quantiles; clamp there.
        slowest = max(quantile(points, max(rng.random(), 0.5)) for _ in range(shards))
        draws.append(slowest)
    draws.sort()
    pick = lambda q: draws[min(int(q * len(draws)), len(draws) - 1)]
    return pick(0.5), pick(0.9), pick(0.99)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", required=True, help="eddy-loadtest query --json output")
    ap.add_argument("--phase", type=int, default=0, help="index of the phase to use")
    ap.add_argument("--shards", default="1,2,4,8,16,32")
    ap.add_argument("--overhead-ms", type=float, default=0.0,
                    help="fixed cost a fan-out adds (router merge, one more hop)")
    ap.add_argument("--samples", type=int, default=20000, help="Monte Carlo draws per N")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    with open(args.report) as f:
        report = json.load(f)
    phases = report.get("phases", [])
    if not 0 <= args.phase < len(phases):
        sys.exit(f"the report has {len(phases)} phases; --phase {args.phase} is not one")
    phase = phases[args.phase]
    latency = phase.get("service") or phase.get("latency")
    if not latency:
        sys.exit("that phase has no latency figures")
    which = "service time (send -> answer)" if phase.get("service") else "latency"
    points = quantile_points(latency)
    rng = random.Random(args.seed)

    print(f"single shard: {phase.get('api')} {phase.get('mode')} {json.dumps(phase.get('load'))}, "
          f"{latency['count']} answers, {which}")
    print(f"  p50 {latency['p50_ms']:.3f}  p90 {latency['p90_ms']:.3f}  p99 {latency['p99_ms']:.3f}  "
          f"p99.9 {latency['p999_ms']:.3f}  max {latency['max_ms']:.3f} ms")
    print(f"slowest of N independent shards (+ {args.overhead_ms} ms per fan-out when N > 1):")
    print(f"{'N':>4} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9}   {'Monte Carlo p50/p90/p99':>28}")
    for n in (int(s) for s in args.shards.split(",")):
        extra = args.overhead_ms if n > 1 else 0.0
        p50, p90, p99 = (slowest_of(points, n, q) + extra for q in (0.5, 0.9, 0.99))
        m50, m90, m99 = (v + extra for v in monte_carlo(points, n, args.samples, rng))
        print(f"{n:>4} {p50:>9.3f} {p90:>9.3f} {p99:>9.3f}   {m50:>9.3f} {m90:>8.3f} {m99:>9.3f}")


if __name__ == "__main__":
    main()
