#!/usr/bin/env python3
"""Served search side by side from one Python client: eddy (HTTP and Arrow
Flight DoExchange) against Milvus (embedded server, pymilvus) and Qdrant's
server (REST; a binary built from its source, `qdrant_server.py`), at matched
recall.

Series (`--engines`, default all):

- `eddy-http`: `POST /v1/collections/{c}/search` with `{"vector", "k": 10, "ef",
  "oversampling": max(ef, 10) / 10}` (every eddy series: the beam is
  max(ef, k), as Milvus's, all of it rescored in f32, as in process),
  one query per request over one keep-alive `requests.Session`, bodies by
  `requests`' own `json=` (the common way; its client side costs ~0.6 ms a
  request here, more than eddy's search).
- `eddy-http-lean`: the same requests over one keep-alive
  `http.client.HTTPConnection` (standard library), bodies encoded and answers
  decoded with `orjson` (numpy arrays natively): a client whose own cost is
  ~0.05 ms, so the series shows the server.
- `eddy-exchange`: pyarrow.flight `do_exchange`, command `{"collection", "k": 10,
  "ef", "oversampling"}`, one input batch of `--batch` queries (`vector: FixedSizeList<Float32,
  dim>`) per exchange, one exchange at a time.
- `milvus`: Milvus 2.3.5 (the `milvus` pip package's embedded server) with
  pymilvus: `search(data=[q], limit=10, param={"ef": ef})`, one query per call.
- `milvus-batch`: the same with `--batch` queries per call.
- `qdrant-http`, `qdrant-http-lean`, `qdrant-batch`: Qdrant's server over
  REST through the same two clients, and `--batch` searches per
  `search/batch` request (`qdrant_server.py`). Without `--qdrant-bin` (or
  `EDDY_QDRANT_BIN`) they are recorded unavailable, with the reason.

Both sides serve the same base (eddy: whatever `--collection` holds, checked
to hold exactly the dataset's rows, point id = base row; Milvus: the base
inserted here, INT64 id = base row) with HNSW M=16, ef_construction=100 (eddy
ingest's defaults, which the demo uses; Milvus: one shard, metric IP — the
vectors are unit length, eddy's cosine ranks the same). The Milvus index is
built once, before the rounds; its insert, index-build and load times are
reported. Before the rounds Milvus is also searched over the whole sweep until
its answers settle (Milvus 2.3.5's answers at an ef depend on the searches
before them; see `MilvusService.settle`).

Per series and ef of the sweep (`--ef`): one pass over the queries (warm-up;
its answers give the tie-aware recall@10 of `loadtest/bench/peers.py`), then
repeated passes for at least `--min-secs`, giving queries/s (queries, not
requests) and per-request latency p50/p99 (time.perf_counter around each
request). Each of `--rounds` rounds runs every series' whole sweep, the order
reversed every other round (A/B/B/A); per ef the summary is the mean recall,
the mean queries/s and the spread (max-min)/mean over rounds. Then each
series' queries/s at recall@10 0.90 / 0.95 / 0.99 is interpolated (log-linear
between bracketing ef, never extrapolated) and eddy's ratio to Milvus printed.

A series that cannot run (missing package, server that does not start, eddy
not reachable, collection not holding the dataset) is recorded under
`unavailable` with the reason and the rest go on; the exit status is non-zero
only for bad arguments or when nothing at all was measured.

    pip install numpy requests orjson pyarrow milvus==2.3.5 pymilvus
    eddy-loadtest demo --dataset ../shared/datasets/debian-minilm   # prints the HTTP / Flight addresses
    python3 loadtest/scripts/served_peers.py --dataset ../shared/datasets/debian-minilm \\
        --eddy-http 127.0.0.1:8080 --eddy-flight 127.0.0.1:50051 --collection demo \\
        --json-out served_peers.json
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from importlib import metadata

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import first, fvecs, ivecs, qps_at, recall10  # noqa: E402
from qdrant_server import QdrantSearch, QdrantService  # noqa: E402

K = 10


def oversampling(ef):
    """eddy rescores k x oversampling candidates of a quantized walk in f32
    and keeps its beam at least that wide (the server's default, 4, floors
    the beam at 40); max(ef, k) / k makes the beam max(ef, k), as Milvus's
    (it refuses ef < limit), and rescores all of it, as eddy's engine is
    measured in process."""
    return max(ef, K) / K

M, EF_CONSTRUCTION = 16, 100
ENGINES = ["eddy-http", "eddy-http-lean", "milvus", "qdrant-http", "qdrant-http-lean",
           "eddy-exchange", "milvus-batch", "qdrant-batch"]
QDRANT_SERIES = ("qdrant-http", "qdrant-http-lean", "qdrant-batch")
SINGLE_QUERY = ("eddy-http", "eddy-http-lean", "milvus", "qdrant-http", "qdrant-http-lean")
TARGETS = (0.90, 0.95, 0.99)
MILVUS_COLLECTION = "served_peers"
MILVUS_INSERT_ROWS = 10_000
TIMEOUT_S = 60
SETTLE_PASSES = 8


class Unavailable(Exception):
    """A series cannot run; the message is the reason recorded in the JSON."""


def engine_errors():
    """The exceptions a client library raises when its server misbehaves or is
    gone (anything else is a bug here and is not caught)."""
    errs = [OSError, ValueError, RuntimeError, TimeoutError, Unavailable]  # requests' errors are OSErrors
    try:
        import pyarrow as pa
        import pyarrow.flight as flight
        errs += [pa.ArrowException, flight.FlightError]
    except ImportError:
        pass
    try:
        from pymilvus import MilvusException
        errs.append(MilvusException)
    except ImportError:
        pass
    try:
        import grpc
        errs.append(grpc.RpcError)
    except ImportError:
        pass
    return tuple(errs)


def reason(err):
    text = " ".join(str(err).split())[:400]
    if isinstance(err, Unavailable):
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def id_rows(lists, n):
    """(n, K) int64 ids from per-query id lists, -1 where fewer than K came back."""
    out = np.full((n, K), -1, dtype=np.int64)
    for i, ids in enumerate(lists):
        ids = list(ids)[:K]
        out[i, :len(ids)] = ids
    return out


def chunks(queries, size):
    return [queries[i:i + size] for i in range(0, len(queries), size)]


# ---------------------------------------------------------------- eddy


class EddyHttp:
    """eddy-query's JSON search, one query per request, one keep-alive session."""
    name, engine, api = "eddy-http", "eddy", "http"

    def __init__(self, a, nbase, dim):
        self.a, self.nbase, self.dim = a, nbase, dim

    def open(self):
        if not self.a.eddy_http:
            raise Unavailable("no --eddy-http address given")
        import requests
        self.session = requests.Session()
        if self.a.api_key:
            self.session.headers["Authorization"] = f"Bearer {self.a.api_key}"
        self.check_collection(f"http://{self.a.eddy_http}/v1/collections/{self.a.collection}")

    def check_collection(self, base):
        """Sets the search URL under `base`; fails unless eddy answers and the
        collection holds exactly the dataset's base."""
        self.url = f"{base}/search"
        try:
            count = self._post(f"{base}/count", {})["count"]
        except OSError as err:
            raise Unavailable(f"eddy not reachable at {self.a.eddy_http}: {reason(err)}") from err
        if count != self.nbase:
            raise Unavailable(f"collection {self.a.collection!r} holds {count} points, "
                              f"the dataset's base {self.nbase}")

    @staticmethod
    def vector(q):
        return q.tolist()

    def _post(self, url, body):
        r = self.session.post(url, json=body, timeout=TIMEOUT_S)
        if r.status_code != 200:
            raise RuntimeError(f"POST {url}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()

    def requests(self, queries, ef):
        def one(q):
            def run():
                hits = self._post(self.url, {"vector": self.vector(q), "k": K, "ef": ef,
                                       "oversampling": oversampling(ef)})["result"]
                return id_rows([[h["id"] for h in hits]], 1)
            return run
        return [one(q) for q in queries]

    def close(self):
        self.session.close()


class EddyHttpLean(EddyHttp):
    """eddy-query's JSON search from a lean client: one keep-alive
    `http.client.HTTPConnection`, orjson for bodies and answers."""
    name = "eddy-http-lean"

    def open(self):
        import http.client
        import urllib.parse
        import orjson
        self.orjson = orjson
        host, _, port = self.a.eddy_http.rpartition(":") if self.a.eddy_http else ("", "", "")
        if not host:
            raise Unavailable("no --eddy-http address given")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
        self.headers = {"Content-Type": "application/json"}
        if self.a.api_key:
            self.headers["Authorization"] = f"Bearer {self.a.api_key}"
        self.check_collection(f"/v1/collections/{urllib.parse.quote(self.a.collection)}")

    def _post(self, url, body):
        self.conn.request("POST", url, self.orjson.dumps(body, option=self.orjson.OPT_SERIALIZE_NUMPY),
                          self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"POST {url}: HTTP {r.status}: {data[:300]!r}")
        return self.orjson.loads(data)

    @staticmethod
    def vector(q):
        return q  # orjson writes numpy arrays itself

    def close(self):
        self.conn.close()


class EddyExchange:
    """eddy-query's Flight DoExchange: one input batch of `--batch` queries per
    exchange, one exchange at a time."""
    name, engine, api = "eddy-exchange", "eddy", "flight-exchange"

    def __init__(self, a, nbase, dim):
        self.a, self.nbase, self.dim = a, nbase, dim

    def open(self):
        if not self.a.eddy_flight:
            raise Unavailable("no --eddy-flight address given")
        import pyarrow as pa
        import pyarrow.flight as flight
        self.pa, self.flight = pa, flight
        headers = [(b"authorization", f"Bearer {self.a.api_key}".encode())] if self.a.api_key else None
        self.opts = flight.FlightCallOptions(timeout=TIMEOUT_S, headers=headers)
        self.client = flight.FlightClient(f"grpc://{self.a.eddy_flight}")
        self.schema = pa.schema([pa.field("vector", pa.list_(pa.float32(), self.dim), nullable=False)])
        try:
            info = self.client.get_flight_info(
                flight.FlightDescriptor.for_path("collections", self.a.collection), self.opts)
        except flight.FlightError as err:
            raise Unavailable(f"eddy Flight not usable at {self.a.eddy_flight}: {reason(err)}") from err
        if info.total_records != self.nbase:
            raise Unavailable(f"collection {self.a.collection!r} holds {info.total_records} points "
                              f"(Flight), the dataset's base {self.nbase}")

    def requests(self, queries, ef):
        cmd = json.dumps({"collection": self.a.collection, "k": K, "ef": ef,
                          "oversampling": oversampling(ef)}).encode()
        descriptor = self.flight.FlightDescriptor.for_command(cmd)

        def one(chunk):
            def run():
                vectors = self.pa.FixedSizeListArray.from_arrays(
                    self.pa.array(chunk.reshape(-1), self.pa.float32()), self.dim)
                writer, reader = self.client.do_exchange(descriptor, self.opts)
                writer.begin(self.schema)
                writer.write_batch(self.pa.record_batch([vectors], schema=self.schema))
                writer.done_writing()
                table = reader.read_all()
                writer.close()
                out = np.full((len(chunk), K), -1, dtype=np.int64)
                qi = table.column("query_index").to_numpy()
                rank = table.column("rank").to_numpy()
                ids = table.column("id").to_numpy().astype(np.int64)
                keep = rank < K
                out[qi[keep], rank[keep]] = ids[keep]
                return out
            return run
        return [one(c) for c in chunks(queries, self.a.batch)]

    def close(self):
        self.client.close()


# ---------------------------------------------------------------- Milvus


class MilvusService:
    """The embedded Milvus server with the base inserted and indexed once."""

    def __init__(self, a):
        self.a = a
        self.server = None
        self.tmp = None
        self.collection = None
        self.setup = None

    def start(self, base):
        """Starts the server and builds the collection; returns the setup times."""
        from milvus import default_server
        from pymilvus import (Collection, CollectionSchema, DataType, FieldSchema,
                              PyMilvusDeprecationWarning, connections, utility)
        warnings.filterwarnings("ignore", category=PyMilvusDeprecationWarning)
        base_dir = self.a.milvus_dir
        if not base_dir:
            self.tmp = base_dir = tempfile.mkdtemp(prefix="served-peers-milvus-")
        self.server = default_server
        self.server.set_base_dir(base_dir)
        t = time.perf_counter()
        try:
            self.server.start()
        except (OSError, RuntimeError, TimeoutError) as err:
            raise Unavailable(f"Milvus server did not start: {reason(err)}; "
                              f"{self.log_tail(base_dir)}") from err
        print(f"milvus {version('milvus')} started in {time.perf_counter() - t:.1f} s on port "
              f"{self.server.listen_port} (data in {base_dir})", flush=True)
        connections.connect(host="127.0.0.1", port=self.server.listen_port, timeout=TIMEOUT_S)
        if utility.has_collection(MILVUS_COLLECTION):
            utility.drop_collection(MILVUS_COLLECTION)
        schema = CollectionSchema([
            FieldSchema("id", DataType.INT64, is_primary=True, auto_id=False),
            FieldSchema("vector", DataType.FLOAT_VECTOR, dim=base.shape[1]),
        ])
        # One shard (one graph per sealed segment, as eddy's one merged segment);
        # Eventually: searches never wait for newer writes (eddy's don't either).
        coll = Collection(MILVUS_COLLECTION, schema, shards_num=1, consistency_level="Eventually")

        t = time.perf_counter()
        ids = np.arange(len(base), dtype=np.int64)
        for i in range(0, len(base), MILVUS_INSERT_ROWS):
            coll.insert([ids[i:i + MILVUS_INSERT_ROWS].tolist(), base[i:i + MILVUS_INSERT_ROWS]])
        coll.flush()
        insert_s = time.perf_counter() - t
        if coll.num_entities != len(base):
            raise Unavailable(f"Milvus holds {coll.num_entities} rows after insert+flush, base {len(base)}")

        t = time.perf_counter()
        coll.create_index("vector", {"index_type": "HNSW", "metric_type": "IP",
                                     "params": {"M": M, "efConstruction": EF_CONSTRUCTION}})
        utility.wait_for_index_building_complete(MILVUS_COLLECTION)
        index_s = time.perf_counter() - t

        t = time.perf_counter()
        coll.load()
        load_s = time.perf_counter() - t
        segs = utility.get_query_segment_info(MILVUS_COLLECTION)
        print(f"milvus: insert+flush {insert_s:.1f} s, index {index_s:.1f} s, load {load_s:.1f} s; "
              f"{len(segs)} loaded segment(s): "
              + ", ".join(f"{s.num_rows} rows" for s in segs), flush=True)
        self.collection = coll
        self.setup = {"insert_s": round(insert_s, 3), "index_s": round(index_s, 3),
                      "load_s": round(load_s, 3)}
        return self.setup

    def settle(self, queries, efs, batch):
        """Searches every ef of the sweep, ascending, until two passes over the
        queries answer alike. Milvus 2.3.5's answers at a given ef depend on the
        searches before them (measured here: right after load, recall@10 at ef 10
        is ~0.89 and moves to ~0.92 once larger ef were searched, and the first
        passes differ from each other); after one such sweep they stay put, so
        every round measures the same state — the one of a server that has
        served a range of ef, which is also the one with Milvus's higher recall."""
        t = time.perf_counter()
        search = MilvusSearch(self, batch)
        unsettled = []
        for ef in sorted(efs):
            prev = None
            for _ in range(SETTLE_PASSES):
                ids = np.concatenate([r() for r in search.requests(queries, ef)])
                if prev is not None and np.array_equal(ids, prev):
                    break
                prev = ids
            else:
                unsettled.append(ef)
        el = time.perf_counter() - t
        print(f"milvus: settled in {el:.1f} s (batched passes over the queries at each ef until two agree)"
              + (f"; still changing after {SETTLE_PASSES} passes at ef {unsettled}" if unsettled else ""),
              flush=True)

    @staticmethod
    def log_tail(base_dir):
        path = os.path.join(base_dir, "logs", "milvus-stderr.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = [x.strip() for x in f.readlines() if x.strip()]
        except OSError:
            return "no server log"
        return f"log {path}: " + (lines[-1][:300] if lines else "empty")

    def stop(self):
        if self.server is not None:
            try:
                from pymilvus import connections
                connections.disconnect("default")
            finally:
                self.server.stop()
                self.server = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


class MilvusSearch:
    """pymilvus `Collection.search`, `batch` queries per call."""
    engine, api = "milvus", "pymilvus"

    def __init__(self, service, batch):
        self.service, self.batch = service, batch
        self.name = "milvus" if batch == 1 else "milvus-batch"

    def open(self):
        if self.service.collection is None:
            raise Unavailable("Milvus not set up")

    def requests(self, queries, ef):
        coll = self.service.collection
        param = {"metric_type": "IP", "params": {"ef": max(ef, K)}}  # Milvus refuses ef < limit

        def one(chunk):
            def run():
                res = coll.search(data=chunk, anns_field="vector", param=param, limit=K)
                return id_rows([hits.ids for hits in res], len(chunk))
            return run
        return [one(c) for c in chunks(queries, self.batch)]

    def close(self):
        pass


# ---------------------------------------------------------------- measuring


def measure(reqs, nq, min_secs):
    """One pass returning the ids (also the warm-up), then passes for at least
    `min_secs`: (ids, queries/s, p50 ms, p99 ms per request)."""
    ids = np.concatenate([r() for r in reqs])
    lat = []
    done = 0
    clock = time.perf_counter
    t0 = clock()
    while True:
        for r in reqs:
            s = clock()
            r()
            lat.append(clock() - s)
        done += nq
        el = clock() - t0
        if el >= min_secs:
            break
    ms = np.array(lat) * 1000
    return ids, done / el, float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def sweep(eng, r, data, a):
    base, queries, gt, gts = data
    pts = []
    for ef in a.ef:
        ids, qps, p50, p99 = measure(eng.requests(queries, ef), len(queries), a.min_secs)
        rec = recall10(base, queries, ids, gt, gts, "ip")
        pts.append({"ef": ef, "recall10": round(rec, 5), "qps": round(qps, 1),
                    "p50_ms": round(p50, 3), "p99_ms": round(p99, 3)})
        print(f"| {r + 1} | {eng.name} | {ef} | {rec:.4f} | {qps:.0f} | {p50:.2f} | {p99:.2f} |", flush=True)
    return pts


def summarize(rounds):
    pts = []
    for i, p0 in enumerate(rounds[0]):
        col = [rr[i] for rr in rounds]
        qs = [p["qps"] for p in col]
        mq = statistics.mean(qs)
        pts.append({"ef": p0["ef"],
                    "recall10": round(statistics.mean(p["recall10"] for p in col), 5),
                    "qps": round(mq, 1),
                    "spread": round((max(qs) - min(qs)) / mq, 4),
                    "p50_ms": round(statistics.mean(p["p50_ms"] for p in col), 3),
                    "p99_ms": round(statistics.mean(p["p99_ms"] for p in col), 3)})
    return pts


def qps_at_recall(points, target):
    q, why = qps_at([{"ef": p["ef"], "recall10": p["recall10"], "qps1": p["qps"]} for p in points], target)
    return q, why


def print_summary(series):
    print("\n## recall@10 (tie-aware), queries/s and per-request latency per ef "
          "(mean of rounds; spread = (max-min)/mean of queries/s)")
    print("| series | batch | ef | R@10 | q/s | spread | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for s in series:
        for p in s["points"]:
            print(f"| {s['name']} | {s['batch']} | {p['ef']} | {p['recall10']:.4f} | {p['qps']:.0f} | "
                  f"{100 * p['spread']:.0f}% | {p['p50_ms']:.2f} | {p['p99_ms']:.2f} |")

    print("\n## queries/s at matched recall@10 (log-linear between bracketing ef; never extrapolated)")
    print("| series | " + " | ".join(f"q/s @{t}" for t in TARGETS) + " |")
    print("|---|" + "---|" * len(TARGETS))
    at = {}
    for s in series:
        cells = []
        for t in TARGETS:
            q, why = qps_at_recall(s["points"], t)
            at[(s["name"], t)] = q
            cells.append(f"{q:.0f}" if q else why)
        print(f"| {s['name']} | " + " | ".join(cells) + " |")

    names = {s["name"] for s in series}
    pairs = [(x, y) for x, y in (("eddy-http", "milvus"), ("eddy-http-lean", "milvus"),
                                 ("eddy-exchange", "milvus-batch"),
                                 ("eddy-http", "qdrant-http"), ("eddy-http-lean", "qdrant-http-lean"),
                                 ("eddy-exchange", "qdrant-batch"))
             if x in names and y in names]
    if pairs:
        print("\n## eddy / served peer queries/s at matched recall@10")
        print("| eddy | peer | " + " | ".join(f"@{t}" for t in TARGETS) + " |")
        print("|---|---|" + "---|" * len(TARGETS))
        by_name = {s["name"]: s for s in series}
        for x, y in pairs:
            cells = [ratio_cell(at, by_name, x, y, t) for t in TARGETS]
            print(f"| {x} | {y} | " + " | ".join(cells) + " |")


def ratio_cell(at, by_name, x, y, t):
    """`x / y` queries/s at recall t; when x's lowest ef already beats t, its best
    queries/s at recall >= t is a lower bound on its queries/s at t."""
    qx, qy = at[(x, t)], at[(y, t)]
    if qx and qy:
        return f"{qx / qy:.2f}x"
    if not qy:
        return f"{y} {qps_at_recall(by_name[y]['points'], t)[1]}"
    why = qps_at_recall(by_name[x]["points"], t)[1]
    if why == "below sweep":
        best = max((p for p in by_name[x]["points"] if p["recall10"] >= t), key=lambda p: p["qps"])
        return f">= {best['qps'] / qy:.2f}x ({x} R={best['recall10']:.3f} at ef {best['ef']})"
    return f"{x} {why}"


# ---------------------------------------------------------------- main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True,
                    help="base.fvecs, queries-public.fvecs, gt-public.ivecs, gt-public-scores.fvecs")
    ap.add_argument("--eddy-http", default=None, help="host:port of eddy-query's HTTP API")
    ap.add_argument("--eddy-flight", default=None, help="host:port of eddy-query's Flight API")
    ap.add_argument("--collection", default="demo")
    ap.add_argument("--api-key", default=None, help="sent as `Authorization: Bearer KEY` (HTTP and Flight)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=", ".join(ENGINES))
    ap.add_argument("--ef", default="10,16,24,32,48,64,96,128,192,256")
    ap.add_argument("--batch", type=int, default=100, help="queries per exchange / per batched Milvus call")
    ap.add_argument("--queries", type=int, default=None, help="first N queries (default all)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--min-secs", type=float, default=1.0)
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--milvus-dir", default=None, help="Milvus data directory (default a temporary one, removed)")
    ap.add_argument("--qdrant-bin", default=None,
                    help="Qdrant server binary built from its source (default $EDDY_QDRANT_BIN; none: its series are unavailable)")
    a = ap.parse_args()
    try:
        a.ef = [int(x) for x in a.ef.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--ef: not a comma-separated list of integers: {a.ef!r}")
    a.engines = [e for e in a.engines.split(",") if e]
    bad = [e for e in a.engines if e not in ENGINES]
    if bad:
        ap.error(f"--engines: unknown {bad}; known: {ENGINES}")
    if not a.engines or not a.ef or min(a.ef) < 1:
        ap.error("--engines and --ef must be non-empty, ef >= 1")
    if a.batch < 1 or a.rounds < 1 or a.min_secs < 0 or (a.queries is not None and a.queries < 1):
        ap.error("--batch, --rounds and --queries must be >= 1, --min-secs >= 0")
    if not os.path.isdir(a.dataset):
        ap.error(f"--dataset: no directory {a.dataset}")
    return a


def load_dataset(a):
    base = fvecs(first(a.dataset, ["base.fvecs"]))
    queries = fvecs(first(a.dataset, ["queries-public.fvecs", "queries.fvecs"]), a.queries)
    gt = ivecs(first(a.dataset, ["gt-public.ivecs", "gt.ivecs"]), a.queries)
    gts = fvecs(first(a.dataset, ["gt-public-scores.fvecs", "gt-scores.fvecs"]), a.queries)
    return base, queries, gt, gts


def open_engines(a, base, queries, milvus, qdrant, unavailable, errors):
    """The selected series that can run, in `--engines` order; the others go to `unavailable`
    (Qdrant's series under one `qdrant-server` entry when its server cannot run)."""
    setup = {}
    if set(QDRANT_SERIES) & set(a.engines):
        t = time.perf_counter()
        try:
            setup["qdrant"] = qdrant.start(base)
        except ImportError as err:
            unavailable["qdrant-server"] = f"not installed: {reason(err)}"
        except errors as err:
            unavailable["qdrant-server"] = (reason(err) if isinstance(err, Unavailable) else
                                            f"setup failed after {time.perf_counter() - t:.0f} s: {reason(err)}")
    if {"milvus", "milvus-batch"} & set(a.engines):
        t = time.perf_counter()
        try:
            setup["milvus"] = milvus.start(base)
            milvus.settle(queries, a.ef, a.batch)
        except ImportError as err:
            why = f"not installed: {reason(err)}"
            unavailable.update({e: why for e in ("milvus", "milvus-batch") if e in a.engines})
        except errors as err:
            why = f"setup failed after {time.perf_counter() - t:.0f} s: {reason(err)}"
            unavailable.update({e: why for e in ("milvus", "milvus-batch") if e in a.engines})
    make = {"eddy-http": lambda: EddyHttp(a, len(base), base.shape[1]),
            "eddy-http-lean": lambda: EddyHttpLean(a, len(base), base.shape[1]),
            "eddy-exchange": lambda: EddyExchange(a, len(base), base.shape[1]),
            "milvus": lambda: MilvusSearch(milvus, 1),
            "milvus-batch": lambda: MilvusSearch(milvus, a.batch)}
    for name in QDRANT_SERIES:
        batch = a.batch if name == "qdrant-batch" else 1
        make[name] = lambda name=name, batch=batch: QdrantSearch(qdrant, name, batch, id_rows, chunks, K)
    engines = []
    for name in a.engines:
        if name in unavailable or (name in QDRANT_SERIES and "qdrant-server" in unavailable):
            continue
        eng = make[name]()
        try:
            eng.open()
            eng.requests(base[:1], a.ef[0])[0]()  # one search: the API answers as expected
            engines.append(eng)
        except ImportError as err:
            unavailable[name] = f"not installed: {reason(err)}"
        except errors as err:
            unavailable[name] = reason(err)
    for name in unavailable:
        if name in ENGINES or name == "qdrant-server":
            print(f"{name}: unavailable: {unavailable[name]}", flush=True)
    return engines, setup


def run_rounds(engines, data, a, unavailable, errors):
    rounds = {e.name: [] for e in engines}
    live = list(engines)
    print("\n| round | series | ef | R@10 | q/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|", flush=True)
    for r in range(a.rounds):
        for eng in (live if r % 2 == 0 else list(reversed(live))):
            try:
                rounds[eng.name].append(sweep(eng, r, data, a))
            except errors as err:
                why = f"failed in round {r + 1}: {reason(err)}"
                print(f"{eng.name}: {why}", flush=True)
                if not rounds[eng.name]:
                    unavailable[eng.name] = why
                live.remove(eng)
    return rounds


def main():
    a = parse_args()
    data = load_dataset(a)
    base, queries = data[0], data[1]
    print(f"dataset {a.dataset}: base {base.shape}, queries {queries.shape}; series {','.join(a.engines)}; "
          f"ef {a.ef}; batch {a.batch}; rounds {a.rounds}; min {a.min_secs} s per point", flush=True)
    errors = engine_errors()
    unavailable = {}
    milvus = MilvusService(a)
    qdrant = QdrantService(a, Unavailable, TIMEOUT_S)
    engines, setup, rounds = [], {}, {}
    try:
        engines, setup = open_engines(a, base, queries, milvus, qdrant, unavailable, errors)
        rounds = run_rounds(engines, data, a, unavailable, errors) if engines else {}
    finally:
        for eng in engines:
            eng.close()
        milvus.stop()
        qdrant.stop()

    series = [{"name": e.name, "engine": e.engine, "api": e.api,
               "batch": 1 if e.name in SINGLE_QUERY else a.batch,
               "points": summarize(rounds[e.name]), "rounds": rounds[e.name]}
              for e in engines if rounds.get(e.name)]
    if series:
        print_summary(series)
    vers = {"milvus": version("milvus"), "pymilvus": version("pymilvus"), "qdrant": qdrant.version,
            "pyarrow": version("pyarrow"), "requests": version("requests"), "orjson": version("orjson")}
    client = ", ".join([f"python {platform.python_version()}"]
                       + [f"{k} {vers[k]}" for k in ("requests", "orjson", "pyarrow", "pymilvus") if vers[k]])
    out = {"client": client, "versions": vers,
           "params": {"m": M, "ef_construction": EF_CONSTRUCTION, "k": K, "batch": a.batch,
                      "queries": len(queries), "rounds": a.rounds, "metric": "ip"},
           "setup": setup, "series": series, "unavailable": unavailable}
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
        print(f"\nwrote {a.json_out}", flush=True)
    if not series:
        sys.exit("nothing could be measured: no selected series is available")


if __name__ == "__main__":
    main()
