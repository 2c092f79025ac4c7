"""Qdrant's server as a served peer of `served_peers.py`.

The server is a binary built from Qdrant's public source (it is not on any
package registry this project installs from; `docs/benchmarks.md` gives the
build command), named by `--qdrant-bin` or `EDDY_QDRANT_BIN`. It is started
here on loopback with its storage in a temporary directory, the base is
uploaded once (point id = base row) into a collection with HNSW M=16,
ef_construct=100 and dot-product distance (the vectors are unit length, so it
ranks as eddy's cosine), and the series wait until Qdrant reports the
collection green with every vector indexed. Everything else is Qdrant's
default configuration (its optimizer picks the segment count: the setup
reports it).

Series:

- `qdrant-http`: `POST /collections/{c}/points/search` `{"vector", "limit": 10,
  "params": {"hnsw_ef"}}` through one `requests.Session`, as `eddy-http`.
- `qdrant-http-lean`: the same through `http.client` + `orjson`, as
  `eddy-http-lean`.
- `qdrant-batch`: `POST .../points/search/batch` with `--batch` searches per
  request through the lean client (Qdrant's own way to send many queries in
  one call), beside `eddy-exchange`.
"""
import http.client
import json
import os
import socket
import subprocess
import tempfile
import shutil
import time

import numpy as np

COLLECTION = "served_peers"
UPLOAD_ROWS = 1_000
START_TIMEOUT_S = 60
INDEX_TIMEOUT_S = 900
SETTLED_POLLS = 6
NOT_BUILT = ("no Qdrant server binary given (--qdrant-bin or EDDY_QDRANT_BIN): it is built "
             "from Qdrant's public source (docs/benchmarks.md, 'Qdrant's server'); its "
             "engine runs in process instead (qdrant-edge-py)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QdrantService:
    """The Qdrant server process with the base uploaded and indexed once."""

    def __init__(self, a, unavailable_error, timeout_s):
        self.a = a
        self.Unavailable = unavailable_error
        self.timeout_s = timeout_s
        self.proc = None
        self.tmp = None
        self.port = None
        self.version = None
        self.setup = None

    def binary(self):
        path = self.a.qdrant_bin or os.environ.get("EDDY_QDRANT_BIN")
        if not path:
            raise self.Unavailable(NOT_BUILT)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise self.Unavailable(f"Qdrant server binary {path!r} is not an executable file")
        return path

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)

    def call(self, conn, method, path, body=None):
        """One REST call; the parsed `result`, or Unavailable with Qdrant's answer."""
        import orjson
        data = None if body is None else orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
        if r.status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {r.status}: {raw[:300]!r}")
        return orjson.loads(raw).get("result")

    def start(self, base):
        """Starts the server, uploads and indexes the base; returns setup times."""
        path = self.binary()
        self.tmp = tempfile.mkdtemp(prefix="served-peers-qdrant-")
        self.port = free_port()
        env = dict(os.environ,
                   QDRANT__SERVICE__HOST="127.0.0.1",
                   QDRANT__SERVICE__HTTP_PORT=str(self.port),
                   QDRANT__SERVICE__GRPC_PORT=str(free_port()),
                   QDRANT__STORAGE__STORAGE_PATH=os.path.join(self.tmp, "storage"),
                   QDRANT__STORAGE__SNAPSHOTS_PATH=os.path.join(self.tmp, "snapshots"),
                   QDRANT__TELEMETRY_DISABLED="true",
                   QDRANT__LOG_LEVEL="WARN")
        log = open(os.path.join(self.tmp, "qdrant.log"), "wb")
        t = time.perf_counter()
        self.proc = subprocess.Popen([path], cwd=self.tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        conn = self.wait_ready(t)
        print(f"qdrant {self.version} started in {time.perf_counter() - t:.1f} s on port {self.port}",
              flush=True)

        self.call(conn, "PUT", f"/collections/{COLLECTION}", {
            "vectors": {"size": int(base.shape[1]), "distance": "Dot"},
            "hnsw_config": {"m": 16, "ef_construct": 100},
        })
        t = time.perf_counter()
        ids = np.arange(len(base))
        for i in range(0, len(base), UPLOAD_ROWS):
            self.call(conn, "PUT", f"/collections/{COLLECTION}/points?wait=true",
                      {"batch": {"ids": ids[i:i + UPLOAD_ROWS], "vectors": base[i:i + UPLOAD_ROWS]}})
        insert_s = time.perf_counter() - t
        t = time.perf_counter()
        info = self.wait_indexed(conn, len(base))
        index_s = time.perf_counter() - t
        conn.close()
        segments = info.get("segments_count")
        print(f"qdrant: upload {insert_s:.1f} s, then indexed after {index_s:.1f} s; "
              f"{info.get('points_count')} points, {info.get('indexed_vectors_count')} indexed, "
              f"{segments} segment(s)", flush=True)
        self.setup = {"insert_s": round(insert_s, 3), "index_s": round(index_s, 3),
                      "segments": segments}
        return self.setup

    def wait_ready(self, started):
        """Polls `GET /` until the server answers; returns an open connection."""
        while True:
            if self.proc.poll() is not None:
                raise self.Unavailable(f"Qdrant server exited with {self.proc.returncode}; {self.log_tail()}")
            conn = self.conn()
            try:
                conn.request("GET", "/")
                r = conn.getresponse()
                body = r.read()
                if r.status == 200:
                    self.version = json.loads(body).get("version")
                    return conn
            except OSError:
                pass
            conn.close()
            if time.perf_counter() - started > START_TIMEOUT_S:
                raise self.Unavailable(f"Qdrant server did not answer in {START_TIMEOUT_S} s; {self.log_tail()}")
            time.sleep(0.2)

    def wait_indexed(self, conn, n):
        """Polls the collection until green and idle with every point stored,
        and either every vector indexed or that state unchanged over
        `SETTLED_POLLS` polls (Qdrant leaves segments under its
        `indexing_threshold` unindexed and scans them: a small base never
        reaches "all indexed")."""
        t = time.perf_counter()
        settled, last = 0, None
        while True:
            info = self.call(conn, "GET", f"/collections/{COLLECTION}")
            idle = (info.get("status") == "green" and info.get("optimizer_status") == "ok"
                    and info.get("points_count") == n)
            indexed = info.get("indexed_vectors_count") or 0
            state = (idle, indexed, info.get("segments_count"))
            settled = settled + 1 if idle and state == last else 0
            last = state
            if idle and (indexed >= n or settled >= SETTLED_POLLS):
                return info
            if time.perf_counter() - t > INDEX_TIMEOUT_S:
                raise self.Unavailable(f"Qdrant did not finish indexing in {INDEX_TIMEOUT_S} s: {info}")
            time.sleep(0.5)

    def log_tail(self):
        try:
            with open(os.path.join(self.tmp, "qdrant.log"), encoding="utf-8", errors="replace") as f:
                lines = [x.strip() for x in f.readlines() if x.strip()]
        except OSError:
            return "no server log"
        return "log: " + (lines[-1][:300] if lines else "empty")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


class QdrantSearch:
    """Qdrant's REST search: one query per request (`requests` or the lean
    client), or `batch` searches per `search/batch` request (lean client)."""
    engine, api = "qdrant", "http"

    def __init__(self, service, name, batch, id_rows, chunks, k):
        self.service, self.name, self.batch = service, name, batch
        self.id_rows, self.chunks, self.k = id_rows, chunks, k

    def open(self):
        s = self.service
        if s.setup is None:
            raise s.Unavailable("Qdrant not set up")
        self.search_url = f"/collections/{COLLECTION}/points/search"
        if self.name == "qdrant-http":
            import requests
            self.session = requests.Session()
            base = f"http://127.0.0.1:{s.port}"

            def post(path, body):
                r = self.session.post(base + path, json=body, timeout=s.timeout_s)
                if r.status_code != 200:
                    raise RuntimeError(f"POST {path}: HTTP {r.status_code}: {r.text[:300]}")
                return r.json()["result"]
            self.post, self.vector = post, lambda q: q.tolist()
        else:
            # Opened per sweep point by `requests`.
            self.conn = None
            self.post = lambda path, body: s.call(self.conn, "POST", path, body)
            self.vector = lambda q: q

    def requests(self, queries, ef):
        if self.name != "qdrant-http":
            # Qdrant closes a keep-alive connection idle for a few seconds
            # (while other series run): a fresh one per sweep point, opened
            # by the warm-up pass.
            if self.conn is not None:
                self.conn.close()
            self.conn = self.service.conn()
        params = {"hnsw_ef": max(ef, self.k)}
        if self.batch == 1:
            def one(q):
                def run():
                    hits = self.post(self.search_url, {"vector": self.vector(q), "limit": self.k,
                                                       "params": params})
                    return self.id_rows([[h["id"] for h in hits]], 1)
                return run
            return [one(q) for q in queries]

        def many(chunk):
            def run():
                body = {"searches": [{"vector": q, "limit": self.k, "params": params} for q in chunk]}
                res = self.post(self.search_url + "/batch", body)
                return self.id_rows([[h["id"] for h in hits] for hits in res], len(chunk))
            return run
        return [many(c) for c in self.chunks(queries, self.batch)]

    def close(self):
        if hasattr(self, "session"):
            self.session.close()
        if getattr(self, "conn", None) is not None:
            self.conn.close()
