#!/usr/bin/env bash
# Cold starts of eddy-query on a settled collection, alternated between
# builds: the demo's services on a dataset (published, sealed, indexed and
# merged), then ROUNDS times for each build in turn a second eddy-query on
# the demo's store and broker, timed from its start to `/readyz` answering
# 200 and to its first search answered, then stopped. The store's files
# are in the page cache (the demo's eddy-query serves them), so this times
# eddy-query's own start-up and load, not a disk.
#
# Usage: loadtest/scripts/cold_start.sh [LABEL]
# Environment: DATASET (../shared/datasets/debian-minilm), BINS (the
# directories holding the eddy-query builds to alternate, space separated;
# default target/release), ROUNDS (5), OUT (/tmp/eddy-cold-start-LABEL);
# any EDDY_* variable of eddy-query reaches the timed ones (e.g.
# EDDY_SEGMENT_RESIDENCY=mapped).
# Needs: cargo build --release -p eddy-loadtest -p eddy-ingest -p eddy-query
set -euo pipefail

label=${1:-run}
dataset=${DATASET:-../shared/datasets/debian-minilm}
bins=${BINS:-target/release}
rounds=${ROUNDS:-5}
out=${OUT:-/tmp/eddy-cold-start-$label}
mkdir -p "$out"

# shellcheck source=loadtest/scripts/demo_services.sh
source "$(dirname "${BASH_SOURCE[0]}")/demo_services.sh"
start_demo "$out" "target/release/eddy-loadtest" "$dataset"
store=$(grep "^  store" "$out/demo.log" | awk '{print $2}')
# The collection as the demo's eddy-query declares it.
spec=$(tr '\0' '\n' < "/proc/$(pgrep -x eddy-query | head -1)/cmdline" | grep -A1 -x -- --collection | tail -1)
# Until the collection has settled (tail sealed, every segment indexed).
for _ in $(seq 1 300); do
    settled=$(curl -s "http://$http/v1/collections/demo" | python3 -c '
import json, sys
s = json.load(sys.stdin)["status"]
print(int(s["segments"] > 0 and s["indexed_segments"] == s["segments"] and s["tail_rows"] == 0))')
    [ "$settled" = 1 ] && break
    sleep 2
done
echo "== $label: store $store ($(du -sh "$store" | cut -f1))"
# shellcheck disable=SC2086
python3 - "$store" "$kafka" "$spec" "$rounds" "$out" $bins <<'PY'
import http.client, json, os, socket, subprocess, sys, time

store, kafka, spec, rounds, out = sys.argv[1:6]
rounds = int(rounds)
bins = sys.argv[6:]

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def status(port, method="GET", path="/readyz", body=None):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request(method, path, body=body, headers={"content-type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status
    except OSError:
        return None

query = json.dumps({"vector": [0.05] * 384, "k": 10})
times = {b: [] for b in bins}
for r in range(rounds):
    for b in bins:
        port, flight = free_port(), free_port()
        log = open(os.path.join(out, f"query-{r}-{os.path.basename(b.rstrip('/'))}.log"), "w")
        started = time.monotonic()
        p = subprocess.Popen([os.path.join(b, "eddy-query"), "--store", store, "--brokers", kafka,
                              "--collection", spec, "--http-addr", f"127.0.0.1:{port}",
                              "--flight-addr", f"127.0.0.1:{flight}", "--log-format", "text"],
                             stdout=log, stderr=log)
        while status(port) != 200:
            if p.poll() is not None:
                sys.exit(f"eddy-query ({b}) exited: see {log.name}")
            time.sleep(0.001)
        ready = time.monotonic() - started
        code = status(port, "POST", "/v1/collections/demo/search", query)
        first = time.monotonic() - started
        p.terminate()
        p.wait()
        times[b].append((ready, first))
        print(f"round {r} {b}: ready {ready * 1000:.0f} ms, first search {first * 1000:.0f} ms (HTTP {code})", flush=True)
for b, t in times.items():
    ready = sorted(x[0] for x in t)
    print(f"{b}: ready median {ready[len(ready) // 2] * 1000:.0f} ms (min {ready[0] * 1000:.0f}, max {ready[-1] * 1000:.0f})")
PY
