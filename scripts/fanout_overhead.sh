#!/usr/bin/env bash
# What the Flight fan-out costs a search: the demo (bundled sample, or
# `--dataset DIR`) with its collection split into two shards over four
# partitions; its query node serves both shards ("whole"). Two more
# eddy-query processes join on the same broker and store: one serving
# shard 1, one serving shard 0 that fans out to it ("fan-out"). The load
# driver then measures both in turn, A/B/A/B, closed loop with one worker
# over HTTP: latency percentiles and recall against exact ground truth.
#
#   scripts/fanout_overhead.sh [--dataset DIR] [--seconds S] [--rounds N]
#                              [--out DIR]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

dataset=""
seconds="10"
rounds="2"
out="target/fanout"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dataset) dataset="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

echo "==> building eddy (release)" >&2
cargo build --release -q -p eddy-ingest -p eddy-query -p eddy-loadtest
mkdir -p "$out"
demo_log="$out/demo.log"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

demo_args=(demo --bin-dir target/release --partitions 4 --shards 2)
[[ -n "$dataset" ]] && demo_args+=(--dataset "$dataset")
target/release/eddy-loadtest "${demo_args[@]}" >"$demo_log" 2>&1 &
pids+=($!)
echo "==> waiting for the demo to serve (log: $demo_log)" >&2
for _ in $(seq 1 900); do
    grep -q '^serving' "$demo_log" && break
    kill -0 "${pids[0]}" 2>/dev/null || { echo "the demo stopped:" >&2; tail -20 "$demo_log" >&2; exit 1; }
    sleep 1
done
grep -q '^serving' "$demo_log" || { echo "the demo did not serve within 15 minutes" >&2; exit 1; }
whole_http=$(sed -n 's|^  HTTP *http://\([^/]*\)/.*|\1|p' "$demo_log")
brokers=$(sed -n 's|^  Kafka *\([^ ]*\) .*|\1|p' "$demo_log")
store=$(sed -n 's|^  store *\(.*\)|\1|p' "$demo_log")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
node() { # name shards http flight [extra...]
    local name=$1 shards=$2 http=$3 flight=$4
    shift 4
    target/release/eddy-query --brokers "$brokers" --store "$store" --shards "$shards" \
        --http-addr "127.0.0.1:$http" --flight-addr "127.0.0.1:$flight" "$@" \
        >"$out/$name.log" 2>&1 &
    pids+=($!)
}
h1=$(free_port); f1=$(free_port); h0=$(free_port); f0=$(free_port)
node shard1 1 "$h1" "$f1"
node shard0 0 "$h0" "$f0" --peers "http://127.0.0.1:$f1" --peer-refresh-ms 200
fanout_http="127.0.0.1:$h0"

echo "==> waiting for the fan-out node to answer whole searches" >&2
dim=$(python3 -c "import json,urllib.request; print(json.load(urllib.request.urlopen('http://$whole_http/v1/collections/demo'))['dimension'])")
body=$(python3 -c "import json; print(json.dumps({'vector':[1.0]*$dim,'k':1}))")
for _ in $(seq 1 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
        -d "$body" "http://$fanout_http/v1/collections/demo/search" || true)
    [[ "$code" == "200" ]] && break
    sleep 1
done
[[ "$code" == "200" ]] || { echo "the fan-out node never answered whole: $code" >&2; tail -5 "$out"/shard*.log >&2; exit 1; }

# Both setups must meet the same segments: wait until the collection is
# sealed, indexed and merged down to one segment per shard, then give the
# shard nodes a few polls to load that version.
echo "==> waiting for the collection to settle (one indexed segment per shard)" >&2
settled=0
for _ in $(seq 1 600); do
    settled=$(curl -s "http://$whole_http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print(int(0 < s["segments"] <= 2 and s["indexed_segments"] == s["segments"] and s["tail_rows"] == 0))' || echo 0)
    [[ "$settled" == 1 ]] && break
    sleep 1
done
[[ "$settled" == 1 ]] || echo "warning: the collection did not settle within 10 minutes" >&2
sleep 5
curl -s "http://$whole_http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print("==> settled: version", s["manifest_version"], "segments", s["segments"], "points", s["points"])' >&2

driver_args=(--collection demo --api http --workers 1 --duration "$seconds" --warmup 2)
[[ -n "$dataset" ]] && driver_args+=(--dataset "$dataset")
for round in $(seq 1 "$rounds"); do
    for setup in whole fanout; do
        if [[ $setup == whole ]]; then http=$whole_http; else http=$fanout_http; fi
        report="$out/$setup-$round.txt"
        target/release/eddy-loadtest query --http "$http" --flight 127.0.0.1:1 "${driver_args[@]}" \
            >"$report" 2>&1
        echo "==> round $round, $setup ($http):"
        grep -A1 '^api ' "$report" | head -2
    done
done
