#!/usr/bin/env bash
# Queries after bulk tombstones, with merges off: the demo's services on a
# dataset (EDDY_MERGE_MIN_SEGMENTS=0, so no merge drops deleted rows), then
# the first DELETED ids upserted once more and deleted (a pass of upserts,
# a pass of tombstones, flat out), then 4 closed-loop HTTP workers
# read-only at ef 16 for 20 s. Graph segments are left mostly or wholly
# deleted, as they are between bulk deletes and their compaction. Recall
# is against the dataset's ground truth of every row, so it is low after
# the deletes and only compares runs.
#
# Usage: loadtest/scripts/bulk_deletes.sh [LABEL]
# Environment: DATASET (../shared/datasets/debian-minilm), DELETED (55000),
# BIN_DIR (target/release: eddy-loadtest, eddy-ingest and eddy-query; a
# copy of another build for an A/B), OUT (/tmp/eddy-bulk-deletes-LABEL).
# Needs: cargo build --release -p eddy-loadtest -p eddy-ingest -p eddy-query
set -uo pipefail

label=${1:-run}
dataset=${DATASET:-../shared/datasets/debian-minilm}
deleted=${DELETED:-55000}
bin=${BIN_DIR:-target/release}
out=${OUT:-/tmp/eddy-bulk-deletes-$label}
mkdir -p "$out"

# shellcheck source=loadtest/scripts/demo_services.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_services.sh"
EDDY_MERGE_MIN_SEGMENTS=0 start_demo "$out" "$bin/eddy-loadtest" "$dataset"
# Prints "segments N with a graph M tail T points P".
status() {
    curl -s "http://$http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print("segments", s["segments"], "with a graph", s["indexed_segments"], "tail", s["tail_rows"], "points", s["points"])'
}
echo "== $label"
echo "before: $(status)"
"$bin/eddy-loadtest" produce --brokers "$kafka" --topic demo --dataset "$dataset" \
    --format protobuf --no-header --passes 2 --limit "$deleted" --delete-every 1 --rate 0 \
    > "$out/produce.log" 2>&1
# Until the tail is sealed and every segment has its graph.
for _ in $(seq 1 300); do
    # shellcheck disable=SC2046
    set -- $(status)
    [ "$6" = "$2" ] && [ "$8" = 0 ] && break
    sleep 2
done
echo "after:  $(status)"
"$bin/eddy-loadtest" query --http "$http" --flight "$flight" --collection demo --dataset "$dataset" \
    --workers 4 --ef 16 --duration 20 2>&1 | grep -E "^http"
