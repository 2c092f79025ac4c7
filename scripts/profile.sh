#!/usr/bin/env bash
# Profile the served path: starts the demo (the bundled sample, or
# `--dataset DIR`), waits until it serves, then records eddy-query with
# `perf` while `eddy-loadtest query` drives it in a closed loop, and writes
# a flame graph (SVG) with the driver's report beside it.
#
#   scripts/profile.sh [--dataset DIR] [--api http|do-get|do-exchange]
#                      [--ef N] [--workers N] [--seconds S] [--out DIR]
#
# Needs `perf` (linux-perf) and inferno (`cargo install --locked inferno`).
# Release builds carry line tables, and perf unwinds with DWARF, so frames
# are named without a frame-pointer rebuild. Compare two builds by running
# this once per build and reading the flame graphs side by side (or
# `inferno-diff-folded before.folded after.folded | inferno-flamegraph`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

dataset=""
api="http"
ef="64"
workers="1"
seconds="15"
out="target/profile"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dataset) dataset="$2"; shift 2 ;;
        --api) api="$2"; shift 2 ;;
        --ef) ef="$2"; shift 2 ;;
        --workers) workers="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

for tool in perf inferno-collapse-perf inferno-flamegraph; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "$tool not found (perf: apt-get install linux-perf; inferno: cargo install --locked inferno)" >&2
        exit 1
    }
done

echo "==> building eddy (release)" >&2
cargo build --release -q -p eddy-ingest -p eddy-query -p eddy-loadtest
mkdir -p "$out"
demo_log="$out/demo.log"

demo_args=(demo --bin-dir target/release)
[[ -n "$dataset" ]] && demo_args+=(--dataset "$dataset")
target/release/eddy-loadtest "${demo_args[@]}" >"$demo_log" 2>&1 &
demo_pid=$!
trap 'kill "$demo_pid" 2>/dev/null || true; wait "$demo_pid" 2>/dev/null || true' EXIT

echo "==> waiting for the demo to serve (log: $demo_log)" >&2
for _ in $(seq 1 900); do
    grep -q '^serving' "$demo_log" && break
    kill -0 "$demo_pid" 2>/dev/null || { echo "the demo stopped:" >&2; tail -20 "$demo_log" >&2; exit 1; }
    sleep 1
done
grep -q '^serving' "$demo_log" || { echo "the demo did not serve within 15 minutes" >&2; exit 1; }
http=$(sed -n 's|^  HTTP *http://\([^/]*\)/.*|\1|p' "$demo_log")
flight=$(sed -n 's|^  Arrow Flight *grpc://\(.*\)|\1|p' "$demo_log")
query_pid=$(pgrep -P "$demo_pid" -x eddy-query)
echo "==> eddy-query pid $query_pid, HTTP $http, Flight $flight" >&2

report="$out/report-$api-ef$ef.txt"
target/release/eddy-loadtest query --http "$http" --flight "$flight" --collection demo \
    --api "$api" --ef "$ef" --workers "$workers" --duration "$((seconds + 4))" --warmup 2 \
    >"$report" 2>&1 &
driver=$!
sleep 2
echo "==> perf record for ${seconds}s" >&2
perf record -q -F 499 --call-graph dwarf,16384 -p "$query_pid" -o "$out/perf.data" -- sleep "$seconds"
wait "$driver"

folded="$out/eddy-query-$api-ef$ef.folded"
svg="$out/eddy-query-$api-ef$ef.svg"
perf script -i "$out/perf.data" 2>/dev/null | inferno-collapse-perf >"$folded"
inferno-flamegraph --title "eddy-query: $api, ef $ef, $workers worker(s)" <"$folded" >"$svg"
cat "$report"
echo "flame graph: $svg (folded stacks: $folded)"
