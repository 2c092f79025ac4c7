#!/usr/bin/env bash
# Ingest soak: does memory stay bounded under sustained ingest?
#
# Starts the demo (broker, eddy-ingest, eddy-query, on the bundled sample),
# then republishes a dataset (default the full debian-minilm) as Arrow
# batches of 100 rows at RATE rows/s for SECS seconds, upserting the same
# ids pass after pass (so seals write delete bits and merges compact), and
# prints every 15 s the resident memory of eddy-ingest and eddy-query
# (eddy-query's split into heap and mapped files, beside the bytes of the
# segment and index files the newest manifest serves), the rows waiting for a graph, the segment count and the consumer lag; one
# minute after the writer stops it prints the idle figures and exits.
#
#   scripts/soak.sh [--dataset DIR] [--rate ROWS_PER_S] [--secs S]
#
# Needs the release binaries (cargo build --release -p eddy-loadtest
# -p eddy-ingest -p eddy-query) and Tansu, as scripts/demo.sh installs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

dataset="../shared/datasets/debian-minilm"
rate=5000
secs=600
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dataset) dataset="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --secs) secs="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
rows=$(( $(stat -c %s "$dataset/base.fvecs") / (4 * ($(od -An -t d4 -N4 "$dataset/base.fvecs") + 1)) ))

work=$(mktemp -d /tmp/eddy-soak-XXXX)
demo_pid=""
cleanup() {
    if [[ -n "$demo_pid" ]]; then
        pkill -TERM -P "$demo_pid" 2>/dev/null || true   # the broker and the services
        kill "$demo_pid" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
}
trap cleanup EXIT

target/release/eddy-loadtest demo --queries 100 > "$work/demo.log" 2>&1 &
demo_pid=$!
for _ in $(seq 120); do grep -q "ingest metrics" "$work/demo.log" && break; sleep 1; done
broker=$(grep -o "tansu ready bootstrap=[0-9.:]*" "$work/demo.log" | cut -d= -f2)
http=$(grep -o " http_addr=[0-9.:]*" "$work/demo.log" | head -1 | cut -d= -f2)
metrics=$(grep -o "ingest_metrics_addr=[0-9.:]*" "$work/demo.log" | head -1 | cut -d= -f2)
[[ -n "$broker" && -n "$http" && -n "$metrics" ]] || { echo "the demo did not start; log: $work/demo.log" >&2; exit 1; }

passes=$(( rate * secs / rows + 1 ))
timeout "$secs" target/release/eddy-loadtest produce --brokers "$broker" --topic demo \
    --dataset "$dataset" --format arrow --arrow-rows 100 --rate "$rate" --passes "$passes" \
    > "$work/produce.log" 2>&1 &

gauge() { grep "^$1{" <<<"$2" | awk '{s += $2} END {print s + 0}'; }
rss_mib() { ps -o rss= -C "$1" | awk '{s += $1} END {print int(s / 1024)}'; }
# Resident memory split as the kernel counts it: anonymous (the heap) and
# file-backed (mapped segment and index files, which the kernel reclaims
# under pressure), in MiB.
rss_split() {
    local pid
    pid=$(pgrep -x -n "$1" || true)
    [[ -n "$pid" ]] || { echo "- / -"; return; }
    awk '/^RssAnon/ {a = $2} /^RssFile/ {f = $2} END {printf "%d / %d", a / 1024, f / 1024}' "/proc/$pid/status"
}
# Bytes of the segment and index files the newest manifest serves (what
# eddy-query holds in memory with --segment-residency huge-pages), in MiB.
store=$(pgrep -a -x -n eddy-query | grep -o -- "--store [^ ]*" | cut -d' ' -f2)
served_mib() {
    python3 - "$store/collections/demo" <<'PY' 2>/dev/null || echo "-"
import glob, json, os, sys
d = sys.argv[1]
body = json.load(open(sorted(glob.glob(d + "/manifests/*.json"))[-1]))["body"]
total = 0
for s in body["segments"]:
    total += s["bytes"]
    if s.get("index"):
        total += os.path.getsize(os.path.join(d, "segments", s["index"]))
print(total >> 20)
PY
}
echo "rate $rate rows/s for $secs s ($dataset, $rows rows a pass); logs in $work"
echo "| t s | eddy-ingest RSS MiB | eddy-query RSS MiB | eddy-query anon / file MiB | served segments + indexes MiB | rows without a graph | segments | consumer lag |"
echo "|---|---|---|---|---|---|---|---|"
start=$(date +%s)
while true; do
    t=$(( $(date +%s) - start ))
    m=$(curl -s "http://$metrics/metrics" || true)
    echo "| $t | $(rss_mib eddy-ingest) | $(rss_mib eddy-query) | $(rss_split eddy-query) | $(served_mib) | $(gauge eddy_ingest_unindexed_rows "$m") | $(gauge eddy_ingest_segments "$m") | $(gauge eddy_ingest_consumer_lag "$m") |"
    (( t >= secs + 60 )) && break
    sleep 15
done
