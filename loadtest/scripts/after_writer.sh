#!/usr/bin/env bash
# How soon a collection is searched at its settled speed once a writer
# stops: the demo's services on a dataset (published flat out, sealed,
# indexed and merged into one segment), then a writer upserting the base
# at a fixed rate for WRITER_S seconds (one query worker beside it), then
# 4 closed-loop HTTP workers read-only in 5-s windows for AFTER_S seconds.
# Prints each window's queries/s, eddy-ingest's CPU seconds after the
# writer (seals, graphs, merges), and when the collection was first one
# indexed segment with an empty tail again (the status, every second, is
# in $OUT/status.log).
#
# Usage: loadtest/scripts/after_writer.sh [LABEL]
# Environment: DATASET (default ../shared/datasets/debian-minilm), RATE
# (2000), WRITER_S (30), AFTER_S (60), EF (16), OUT
# (/tmp/eddy-after-writer-LABEL), BIN_DIR (target/release: where
# eddy-loadtest, eddy-ingest and eddy-query are); any EDDY_* variable of
# eddy-ingest or eddy-query reaches them (e.g. EDDY_MERGE_IDLE_MS=30000
# for an A/B of the idle merge).
# Needs: cargo build --release -p eddy-loadtest -p eddy-ingest -p eddy-query
set -uo pipefail

label=${1:-run}
dataset=${DATASET:-../shared/datasets/debian-minilm}
rate=${RATE:-2000}
writer_s=${WRITER_S:-30}
after_s=${AFTER_S:-60}
ef=${EF:-16}
out=${OUT:-/tmp/eddy-after-writer-$label}
bin=${BIN_DIR:-target/release}/eddy-loadtest
mkdir -p "$out"

# shellcheck source=loadtest/scripts/demo_services.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_services.sh"
start_demo "$out" "$bin" "$dataset"
# Prints "SEGMENTS WITH_A_GRAPH TAIL_ROWS".
state() {
    curl -s "http://$http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print(s["segments"], s["indexed_segments"], s["tail_rows"])'
}
wait_settled
echo "== $label, settled: $(state) (segments, with a graph, tail rows)"

tick=$(getconf CLK_TCK)
ingest=$(pgrep -x eddy-ingest | head -1)
ingest_cpu() { awk -v t="$tick" '{print ($14 + $15) / t}' "/proc/$ingest/stat"; }
query() {
    "$bin" query --http "$http" --flight "$flight" --collection demo --dataset "$dataset" \
        --ef "$ef" "$@" 2>&1
}
query --workers 1 --duration "$writer_s" --brokers "$kafka" --format protobuf --no-header \
    --write-rate "$rate" --write-batch 49 | grep -E "^background"
t0=$SECONDS
c0=$(ingest_cpu)
( while [ $((SECONDS - t0)) -lt $((after_s + 10)) ]; do
    echo "$((SECONDS - t0)) s: $(state)"; sleep 1
done ) > "$out/status.log" &
sampler=$!
for w in $(seq 1 $((after_s / 5))); do
    qps=$(query --workers 4 --duration 5 | awk '/^http/ {print $9}')
    echo "$(((w - 1) * 5))-$((w * 5)) s after the writer: $qps q/s"
done
c1=$(ingest_cpu)
echo "eddy-ingest CPU seconds after the writer: $(python3 -c "print(round($c1 - $c0, 1))")"
wait "$sampler"
echo "one indexed segment, empty tail again at: $(grep -m1 ': 1 1 0$' "$out/status.log" || echo "not within the phase")"
