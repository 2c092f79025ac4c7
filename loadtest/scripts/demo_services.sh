# Sourced by the measurement scripts beside it: starts the demo's services
# on a dataset and waits until they serve.
#
#   start_demo OUT_DIR EDDY_LOADTEST DATASET
#
# Leaves the demo running (stopped when the calling shell exits) and sets
# `demo` (its pid), `http` and `flight` (host:port of eddy-query's doors)
# and `kafka` (the broker). The demo publishes the dataset as protobuf
# events and declares that format, so writers may send events without a
# header. Variables of eddy-ingest and eddy-query (EDDY_*) in the
# environment reach them.
start_demo() {
    local out=$1 loadtest=$2 dataset=$3
    "$loadtest" demo --dataset "$dataset" --rate 0 --format protobuf --queries 100 \
        > "$out/demo.log" 2>&1 &
    demo=$!
    trap 'kill -INT $demo 2>/dev/null; wait $demo 2>/dev/null' EXIT
    for _ in $(seq 1 300); do
        grep -q "query metrics" "$out/demo.log" && break
        kill -0 "$demo" 2>/dev/null || { cat "$out/demo.log"; exit 1; }
        sleep 1
    done
    http=$(grep -o "http://127.0.0.1:[0-9]*/v1" "$out/demo.log" | head -1 | sed 's|http://||; s|/v1||')
    flight=$(grep -o "grpc://127.0.0.1:[0-9]*" "$out/demo.log" | head -1 | sed 's|grpc://||')
    kafka=$(grep "  Kafka " "$out/demo.log" | grep -o "127.0.0.1:[0-9]*")
}

# Waits until collection `demo` is one indexed segment with an empty tail
# (the demo returns once every segment has its graph; the idle merge,
# `--merge-idle-ms`, folds them after), or its manifest has not moved for
# 90 s (a collection above `--merge-max-rows` stays several segments), at
# most 5 minutes. Needs `http` (set by start_demo).
wait_settled() {
    local last="" same=0 line version segments indexed tail
    for _ in $(seq 1 150); do
        line=$(curl -s "http://$http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print(s["manifest_version"], s["segments"], s["indexed_segments"], s["tail_rows"])') || true
        read -r version segments indexed tail <<< "$line" || true
        [ "$segments" = 1 ] && [ "$indexed" = 1 ] && [ "$tail" = 0 ] && return 0
        if [ "$version" = "$last" ]; then same=$((same + 2)); else same=0; last=$version; fi
        [ "$same" -ge 90 ] && return 0
        sleep 2
    done
}
