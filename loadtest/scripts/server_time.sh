#!/usr/bin/env bash
# Server-side time of one search against the client's: the demo's
# services on a dataset, settled (one segment, its graph built), then one
# Python client (http.client, one connection) sends every query twice per
# `ef` and reads eddy-query's `took_ms` from the second pass. `took_ms`
# runs from the handler's start (the JSON body already parsed) to the
# answer built (before it is serialised); the client's wall time holds
# all of it. Compare `took_ms` with the engine in process
# (`eddy-bench --modes sq8 --rescore 0`, one thread, same `ef`).
#
# Usage: loadtest/scripts/server_time.sh
# Environment: DATASET (default ../shared/datasets/debian-minilm), EFS
# ("16 64"), OUT (/tmp/eddy-server-time), BIN_DIR (target/release).
# Needs: cargo build --release -p eddy-loadtest -p eddy-ingest -p eddy-query
set -euo pipefail

dataset=${DATASET:-../shared/datasets/debian-minilm}
out=${OUT:-/tmp/eddy-server-time}
bin=${BIN_DIR:-target/release}/eddy-loadtest
mkdir -p "$out"

# shellcheck source=loadtest/scripts/demo_services.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_services.sh"
start_demo "$out" "$bin" "$dataset"
wait_settled

python3 - "$http" "$dataset" ${EFS:-16 64} <<'PY'
import http.client
import json
import struct
import sys
import time

host, dataset, efs = sys.argv[1], sys.argv[2], [int(e) for e in sys.argv[3:]]
with open(f"{dataset}/queries-public.fvecs", "rb") as f:
    data = f.read()
dim = struct.unpack("<i", data[:4])[0]
step = 4 + 4 * dim
queries = [list(struct.unpack(f"<{dim}f", data[i * step + 4:(i + 1) * step]))
           for i in range(len(data) // step)]
name, port = host.split(":")
conn = http.client.HTTPConnection(name, int(port))


def pct(values, q):
    return sorted(values)[min(len(values) - 1, int(len(values) * q))] * 1e3


for ef in efs:
    took, wall = [], []
    for second_pass in (False, True):
        for q in queries:
            # The whole beam rescored in f32, as eddy-bench --rescore 0 walks.
            body = json.dumps({"vector": q, "k": 10, "ef": ef, "oversampling": max(ef, 10) / 10})
            t0 = time.perf_counter()
            conn.request("POST", "/v1/collections/demo/search", body,
                         {"content-type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            if second_pass:
                wall.append((time.perf_counter() - t0) * 1e3)
                took.append(answer["took_ms"])
    print(f"ef {ef}: took_ms p50 {pct(took, 0.5):.0f} us, p90 {pct(took, 0.9):.0f} us; "
          f"client wall p50 {pct(wall, 0.5):.0f} us, p90 {pct(wall, 0.9):.0f} us ({len(took)} queries)")
PY
