"""DoExchange throughput of two eddy-query builds on one store, side by side.

Starts eddy-query from `--a-bin` and from `--b-bin` (say, before and after a
change) on the same store, plaintext, then streams the same query batches
through pyarrow's DoExchange against each, alternating A/B/A/B, and prints
queries/s per run and the ratio of the medians (B / A).

    python3 loadtest/scripts/flight_binary_ab.py \
        --a-bin /tmp/eddy-query-before --b-bin target/release/eddy-query \
        --store STORE --collection demo

STORE is any eddy store with sealed segments (the demo's: `eddy-loadtest
demo` prints its logs directory; the store is `store/` in it). No broker is
needed: searches run on the sealed segments.
"""
import argparse
import statistics
import time
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

from flight_security_overhead import client, exchange, start, wait_serving


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a-bin", required=True)
    ap.add_argument("--b-bin", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--collection", default="demo")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()

    procs, clients = [], {}
    try:
        for name, binary in (("A", args.a_bin), ("B", args.b_bin)):
            proc, port = start(SimpleNamespace(query_bin=binary, store=args.store,
                                               threads=args.threads), None)
            procs.append(proc)
            clients[name] = client(port, None)
        time.sleep(0.5)
        info = wait_serving(*clients["A"], args.collection)
        wait_serving(*clients["B"], args.collection)
        dim = int(__import__("json").loads(info.app_metadata)["dimension"])
        rng = np.random.default_rng(1)
        schema = pa.schema([("vector", pa.list_(pa.float32(), dim))])
        batches = []
        for _ in range(args.batches):
            q = rng.standard_normal((args.batch, dim)).astype(np.float32)
            arr = pa.FixedSizeListArray.from_arrays(pa.array(q.reshape(-1), pa.float32()), dim)
            batches.append(pa.record_batch([arr], schema=schema))
        for name in ("A", "B"):
            exchange(*clients[name], args.collection, batches[:4], args.k)
        runs = {"A": [], "B": []}
        for r in range(args.rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            for name in order:
                qps = exchange(*clients[name], args.collection, batches, args.k)
                runs[name].append(qps)
                print(f"round {r} {name} {qps:9.0f} q/s", flush=True)
        a, b = statistics.median(runs["A"]), statistics.median(runs["B"])
        print(f"median A {a:.0f} q/s, B {b:.0f} q/s, ratio B/A {b / a:.3f} "
              f"(spread A {min(runs['A']):.0f}-{max(runs['A']):.0f}, "
              f"B {min(runs['B']):.0f}-{max(runs['B']):.0f})")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
