#!/usr/bin/env bash
# Queries while the tail re-upserts a whole collection: the demo's services
# on a dataset, sealed and indexed, then the first REUPSERT ids published
# once more (flat out, protobuf), held in the tail by a long seal age (and
# no seal once events stop), and 4 closed-loop HTTP workers read-only at
# ef 16 for 20 s. Every sealed row of a re-upserted id is shadowed by the
# tail until the next seal (a re-embedding job, a replay), so a graph whose
# ids were all re-upserted refuses every node a walk visits. Recall is
# against the dataset's ground truth (the re-upserted vectors are the
# same), so it compares runs.
#
# Usage: loadtest/scripts/reupserts.sh [LABEL]
# Environment: DATASET (../shared/datasets/debian-minilm), REUPSERT (every
# row of the dataset), SEAL_AGE_MS (120000: the seal that would end the
# measurement), BIN_DIR (target/release: eddy-loadtest, eddy-ingest and
# eddy-query; a copy of another build for an A/B), OUT
# (/tmp/eddy-reupserts-LABEL).
# Needs: cargo build --release -p eddy-loadtest -p eddy-ingest -p eddy-query
set -uo pipefail

label=${1:-run}
dataset=${DATASET:-../shared/datasets/debian-minilm}
bin=${BIN_DIR:-target/release}
out=${OUT:-/tmp/eddy-reupserts-$label}
mkdir -p "$out"
limit=()
[ -n "${REUPSERT:-}" ] && limit=(--limit "$REUPSERT")

# shellcheck source=loadtest/scripts/demo_services.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_services.sh"
EDDY_SEAL_ROWS=1000000 EDDY_SEAL_AGE_MS=${SEAL_AGE_MS:-120000} EDDY_SEAL_QUIET_MS=0 \
    start_demo "$out" "$bin/eddy-loadtest" "$dataset"
# Prints "segments N with a graph M tail T points P".
status() {
    curl -s "http://$http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print("segments", s["segments"], "with a graph", s["indexed_segments"], "tail", s["tail_rows"], "points", s["points"])'
}
# Waits until the tail is sealed and every segment has its graph.
settled() {
    for _ in $(seq 1 300); do
        # shellcheck disable=SC2046
        set -- $(status)
        [ "$2" -gt 0 ] && [ "$6" = "$2" ] && [ "$8" = 0 ] && return
        sleep 2
    done
}
echo "== $label"
settled
echo "before: $(status)"
"$bin/eddy-loadtest" produce --brokers "$kafka" --topic demo --dataset "$dataset" \
    --format protobuf --no-header --passes 1 "${limit[@]}" --rate 0 \
    > "$out/produce.log" 2>&1
sleep 2
echo "re-upserted: $(status)"
"$bin/eddy-loadtest" query --http "$http" --flight "$flight" --collection demo --dataset "$dataset" \
    --workers 4 --ef 16 --duration 20 2>&1 | grep -E "^http"
echo "after:  $(status)"
