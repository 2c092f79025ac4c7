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
