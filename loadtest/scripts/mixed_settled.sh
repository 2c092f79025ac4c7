#!/usr/bin/env bash
# Mixed read/write against a settled collection: the demo's services on a
# dataset (published flat out, sealed and indexed), then 4 closed-loop HTTP
# workers read-only, with a writer upserting the base at a fixed rate in
# Arrow batches, and read-only again right after the writer stops. The
# collection's segments, graphs and tail are printed between phases and
# sampled every 2 s during the writer and the phase after it (into
# $OUT/status.log).
#
# The suite's mixed phases are 5 s each and follow one another, so their
# read-only reference is measured while ingest catches up; this measures
# against the collection as the demo leaves it.
#
# Usage: loadtest/scripts/mixed_settled.sh [LABEL]
# Environment: DATASET (default ../shared/datasets/debian-minilm), RATE
# (2000), BATCH (49), SECONDS_MIXED (60), EF (32), WORKERS (4), OUT
# (/tmp/eddy-mixed-LABEL), BIN_DIR (target/release: where eddy-loadtest,
# eddy-ingest and eddy-query are, e.g. a copy of another build for an
# A/B); any EDDY_* variable of eddy-ingest or eddy-query
# reaches them (e.g. EDDY_MERGE_DELETED_PCT=0 for an A/B). PERF=1 records
# eddy-query with `perf` (DWARF call graphs) during each phase into
# $OUT/perf-<phase>.data and prints the top functions by self time, so
# the read-only and mixed profiles can be set side by side.
# OPEN_FRACTIONS (e.g. "0.5 0.7 0.9") adds, after the writer's closed loop,
# open loops beside the writer at those fractions of its throughput, each
# for SECONDS_OPEN (20) s, latency from each request's scheduled send time.
# After the writer's closed loop it prints eddy-query's own histograms
# over that phase (the handler's time, the tail's write lock waited and
# held; loadtest/scripts/histogram_diff.py).
# Needs: cargo build --release -p eddy-loadtest -p eddy-ingest -p eddy-query
set -euo pipefail

label=${1:-run}
dataset=${DATASET:-../shared/datasets/debian-minilm}
rate=${RATE:-2000}
batch=${BATCH:-49}
mixed_s=${SECONDS_MIXED:-60}
ef=${EF:-32}
workers=${WORKERS:-4}
out=${OUT:-/tmp/eddy-mixed-$label}
bin=${BIN_DIR:-target/release}/eddy-loadtest
mkdir -p "$out"

# shellcheck source=loadtest/scripts/demo_services.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_services.sh"
start_demo "$out" "$bin" "$dataset"
status_url="http://$http/v1/collections/demo"

status() {
    curl -s "$status_url" | python3 -c '
import json, sys, time
s = json.load(sys.stdin)["status"]
print(time.strftime("%H:%M:%S"), "version", s["manifest_version"], "segments", s["segments"],
      "with a graph", s["indexed_segments"], "tail rows", s["tail_rows"], "points", s["points"])'
}
# CPU seconds each process has used so far (eddy-ingest, eddy-query, the
# broker, the load tool), to split a phase's two cores. The load tool runs
# as this script's child for one phase and has exited by the next sample,
# so it is counted from the CPU time of this shell's finished children
# (every `query` run, and the few small tools the script calls).
tick=$(getconf CLK_TCK)
cpu() {
    {
        for name in eddy-ingest eddy-query tansu; do
            pgrep -x "$name" | while read -r pid; do
                awk -v n="$name" -v t="$tick" '{printf "%s %.2f\n", n, ($14 + $15) / t}' "/proc/$pid/stat" 2>/dev/null
            done
        done
        awk -v t="$tick" '{printf "eddy-loadtest %.2f\n", ($16 + $17) / t}' "/proc/$$/stat"
    } | awk '{s[$1] += $2} END {for (n in s) printf "%s=%.2f ", n, s[n]; print ""}'
}
# Prints each process's CPU use between two `cpu` samples, in cores.
cpu_delta() {
    python3 -c '
import sys
a = dict(x.split("=") for x in sys.argv[1].split())
b = dict(x.split("=") for x in sys.argv[2].split())
s = float(sys.argv[3])
print("  cores used:", " ".join(f"{n} {(float(b[n]) - float(a.get(n, 0))) / s:.2f}" for n in sorted(b)))
' "$1" "$2" "$3"
}
# With PERF=1, records eddy-query for the next $1 seconds into
# $out/perf-$2.data, in the background (its pid in $perf_pid).
perf_pid=""
profile() {
    [ "${PERF:-0}" = 1 ] || return 0
    local qpid
    qpid=$(pgrep -x eddy-query | head -1)
    perf record -q -F 299 --call-graph dwarf,16384 -p "$qpid" -o "$out/perf-$2.data" \
        -- sleep "$1" > /dev/null 2>&1 &
    perf_pid=$!
}
# Waits for the recording and prints its top functions by self time.
profile_report() {
    [ -n "$perf_pid" ] || return 0
    wait "$perf_pid" || true
    perf_pid=""
    echo "  eddy-query, top functions by self time ($1):"
    { perf report -i "$out/perf-$1.data" --no-children --sort symbol -g none --stdio 2>/dev/null \
        | grep -E "^ +[0-9]" | head -25 | sed 's/ *$//; s/^/    /'; } || true
}
query() {
    "$bin" query --http "$http" --flight "$flight" --collection demo --dataset "$dataset" \
        --workers "$workers" --ef "$ef" "$@" 2>&1 | grep -E "^http|^background"
}

# A read-only reference measured while the idle merge builds is low.
echo "== $label"
wait_settled
status
echo "read-only:"
c0=$(cpu); t0=$SECONDS
profile 12 readonly
query --duration 15
c1=$(cpu); cpu_delta "$c0" "$c1" $((SECONDS - t0))
profile_report readonly
( end=$((SECONDS + mixed_s + 20)); while [ $SECONDS -lt $end ]; do status; sleep 2; done ) \
    > "$out/status.log" 2>&1 &
echo "with a writer at $rate events/s (batches of $batch):"
metrics_url=$(grep "  query metrics" "$out/demo.log" | grep -o "http://[^ ]*")
curl -s "$metrics_url" > "$out/metrics-before-writer.txt"
c0=$(cpu); t0=$SECONDS
profile $((mixed_s > 30 ? 30 : mixed_s - 3)) mixed
mixed=$(query --duration "$mixed_s" --brokers "$kafka" --format protobuf --no-header \
    --write-rate "$rate" --write-batch "$batch")
echo "$mixed"
c1=$(cpu); cpu_delta "$c0" "$c1" $((SECONDS - t0))
curl -s "$metrics_url" > "$out/metrics-after-writer.txt"
echo "  eddy-query's histograms over the writer's phase (bucket bounds):"
python3 "$(dirname "${BASH_SOURCE[0]}")/histogram_diff.py" \
    "$out/metrics-before-writer.txt" "$out/metrics-after-writer.txt"
profile_report mixed
status
saturation=$(echo "$mixed" | awk '/^http/ {print $9; exit}')
for fraction in ${OPEN_FRACTIONS:-}; do
    offered=$(python3 -c "print(max(1, round($saturation * $fraction)))")
    echo "open loop at $fraction of that ($offered q/s), beside the writer:"
    c0=$(cpu); t0=$SECONDS
    query --duration "${SECONDS_OPEN:-20}" --rate "$offered" --brokers "$kafka" --format protobuf \
        --no-header --write-rate "$rate" --write-batch "$batch"
    c1=$(cpu); cpu_delta "$c0" "$c1" $((SECONDS - t0))
done
echo "read-only right after:"
c0=$(cpu); t0=$SECONDS
query --duration 15
c1=$(cpu); cpu_delta "$c0" "$c1" $((SECONDS - t0))
status
logs=$(grep "^  logs" "$out/demo.log" | awk '{print $2}')
echo "merges published: $(grep -c "segments merged" "$logs/eddy-ingest.log" || true)"
