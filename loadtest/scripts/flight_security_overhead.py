"""DoExchange throughput with TLS and an API key against plaintext, side by side.

Starts two eddy-query processes on the same store (one plaintext, one with
--tls-cert/--tls-key and a read key; a throwaway self-signed certificate is
made with `openssl`), then streams the same query batches through pyarrow's
DoExchange against each, alternating A/B/A/B, and prints queries/s per run
and the ratio of the medians.

    python3 loadtest/scripts/flight_security_overhead.py \
        --query-bin target/release/eddy-query --store STORE --collection demo

STORE is any eddy store with sealed segments (the demo's, say:
`scripts/demo.sh` prints where it keeps it). No broker is needed: searches
run on the sealed segments.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

KEY = "bench-read-key-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, tls_dir):
    http, grpc = free_port(), free_port()
    cmd = [args.query_bin, "--store", args.store, "--brokers", "127.0.0.1:1",
           "--http-addr", f"127.0.0.1:{http}", "--flight-addr", f"127.0.0.1:{grpc}",
           "--search-threads", str(args.threads)]
    if tls_dir:
        cmd += ["--tls-cert", os.path.join(tls_dir, "cert.pem"),
                "--tls-key", os.path.join(tls_dir, "key.pem"), "--read-api-keys", KEY]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, grpc


def client(port, tls_dir):
    if tls_dir:
        root = open(os.path.join(tls_dir, "cert.pem"), "rb").read()
        c = flight.FlightClient(f"grpc+tls://localhost:{port}", tls_root_certs=root)
        opts = flight.FlightCallOptions(headers=[c.authenticate_basic_token(b"bench", KEY.encode())])
    else:
        c = flight.FlightClient(f"grpc://127.0.0.1:{port}")
        opts = flight.FlightCallOptions()
    return c, opts


def wait_serving(c, opts, collection, deadline=60):
    end = time.time() + deadline
    while time.time() < end:
        try:
            info = c.get_flight_info(flight.FlightDescriptor.for_path("collections", collection), opts)
            if info.total_records > 0:
                return info
        except flight.FlightError:
            pass
        time.sleep(0.2)
    sys.exit("eddy-query did not serve the collection")


def exchange(c, opts, collection, batches, k):
    cmd = flight.FlightDescriptor.for_command(f'{{"collection": "{collection}", "k": {k}}}')
    writer, reader = c.do_exchange(cmd, opts)
    writer.begin(batches[0].schema)
    started = time.perf_counter()
    rows = 0
    for b in batches:
        writer.write_batch(b)
        rows += reader.read_chunk().data.num_rows
    writer.done_writing()
    reader.read_all()
    writer.close()
    took = time.perf_counter() - started
    queries = sum(b.num_rows for b in batches)
    if rows != queries * k:
        sys.exit(f"{rows} result rows for {queries} queries x k={k}")
    return queries / took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--query-bin", default="target/release/eddy-query")
    ap.add_argument("--store", required=True)
    ap.add_argument("--collection", default="demo")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()

    tls_dir = tempfile.mkdtemp(prefix="eddy-tls-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", os.path.join(tls_dir, "key.pem"),
                    "-out", os.path.join(tls_dir, "cert.pem")],
                   check=True, capture_output=True)
    plain_proc, plain_port = start(args, None)
    tls_proc, tls_port = start(args, tls_dir)
    try:
        time.sleep(0.5)
        plain = client(plain_port, None)
        secured = client(tls_port, tls_dir)
        info = wait_serving(*plain, args.collection)
        wait_serving(*secured, args.collection)
        dim = int(__import__("json").loads(info.app_metadata)["dimension"])
        rng = np.random.default_rng(1)
        schema = pa.schema([("vector", pa.list_(pa.float32(), dim))])
        batches = []
        for _ in range(args.batches):
            q = rng.standard_normal((args.batch, dim)).astype(np.float32)
            arr = pa.FixedSizeListArray.from_arrays(pa.array(q.reshape(-1), pa.float32()), dim)
            batches.append(pa.record_batch([arr], schema=schema))
        # Warm both (segments paged in, connections up).
        exchange(*plain, args.collection, batches[:4], args.k)
        exchange(*secured, args.collection, batches[:4], args.k)
        runs = {"plaintext": [], "tls+key": []}
        for r in range(args.rounds):
            order = [("plaintext", plain), ("tls+key", secured)]
            if r % 2:
                order.reverse()
            for name, (c, opts) in order:
                qps = exchange(c, opts, args.collection, batches, args.k)
                runs[name].append(qps)
                print(f"round {r} {name:9} {qps:9.0f} q/s", flush=True)
        a, b = statistics.median(runs["plaintext"]), statistics.median(runs["tls+key"])
        print(f"median plaintext {a:.0f} q/s, tls+key {b:.0f} q/s, ratio {b / a:.3f} "
              f"(spread plaintext {min(runs['plaintext']):.0f}-{max(runs['plaintext']):.0f}, "
              f"tls+key {min(runs['tls+key']):.0f}-{max(runs['tls+key']):.0f})")
    finally:
        for p in (plain_proc, tls_proc):
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
