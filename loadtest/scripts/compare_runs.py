#!/usr/bin/env python3
"""Compare the summary ratios of two suite reports (report.md).

    python3 loadtest/scripts/compare_runs.py RUN_A/report.md RUN_B/report.md

Prints a Markdown table: every ratio both summaries give at the same
recall target, each run's per-round range, the change, and whether each
run's ratio lies inside the other's per-round range ("agrees"). Ends with
how many agree and the largest change, which is the noise band two runs
on this machine actually show.
"""

import re
import sys

CELL = re.compile(r"^(≥ )?([0-9.]+)× \(([0-9.]+)–([0-9.]+)\)$")


def ratios(path):
    """{(comparison, target): (bound, mean, lo, hi)} of a report's summary table."""
    out = {}
    targets = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("| comparison |"):
                targets = [c.strip().lstrip("@") for c in line.strip("|").split("|")[1:]]
                continue
            if targets is None:
                continue
            if not line.startswith("|"):
                if out:
                    break
                continue
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0].startswith("---"):
                continue
            for target, cell in zip(targets, cells[1:]):
                m = CELL.match(cell)
                if m:
                    bound = bool(m.group(1))
                    out[(cells[0], target)] = (
                        bound,
                        float(m.group(2)),
                        float(m.group(3)),
                        float(m.group(4)),
                    )
    return out


def show(r):
    bound, mean, lo, hi = r
    return f"{'≥ ' if bound else ''}{mean:.2f}× ({lo:.2f}–{hi:.2f})"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = ratios(sys.argv[1]), ratios(sys.argv[2])
    both = [k for k in a if k in b]
    if not both:
        sys.exit("no ratio appears in both summaries")
    print("| comparison | target | run A | run B | change | each inside the other's per-round range |")
    print("|---|---|---|---|---|---|")
    agree, changes = 0, []
    for key in both:
        ra, rb = a[key], b[key]
        change = rb[1] / ra[1] - 1.0
        changes.append((abs(change), key))
        inside = ra[2] <= rb[1] <= ra[3] and rb[2] <= ra[1] <= rb[3]
        agree += inside
        print(
            f"| {key[0]} | {key[1]} | {show(ra)} | {show(rb)} | {change:+.0%} | {'yes' if inside else 'no'} |"
        )
    worst = max(changes)
    print()
    print(
        f"{agree} of {len(both)} ratios agree (each inside the other's per-round range); "
        f"median change {sorted(c for c, _ in changes)[len(changes) // 2]:.0%}, "
        f"largest {worst[0]:.0%} ({worst[1][0]} @{worst[1][1]})."
    )


if __name__ == "__main__":
    main()
