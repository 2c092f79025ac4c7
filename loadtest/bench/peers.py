#!/usr/bin/env python3
"""Compare eddy's HNSW with hnswlib, faiss (IndexHNSWFlat), usearch and Qdrant's
HNSW (qdrant-edge: Qdrant's engine in-process) on one dataset.

Same M / ef_construction for every engine, same machine, same run; engines
alternate (A/B/A/B, order reversed every round) for --rounds rounds and the
spread across rounds is reported. Per engine: 2-thread build time, and per ef
single-thread QPS and tie-aware recall@10. eddy runs through
`eddy-bench --json` (its own timing loop, f32 and SQ8 traversal).

Then, for recall@10 targets 0.90 / 0.95 / 0.99, each engine's QPS at the target
is interpolated linearly in log(QPS) between the two ef points bracketing the
target (never extrapolated: "not reached" / "below sweep" otherwise), and eddy's
throughput ratio to each peer is printed, plus the build-time ratio.

    pip install hnswlib faiss-cpu usearch qdrant-edge-py numpy
    python3 loadtest/bench/peers.py --dataset ../shared/datasets/debian-minilm \
        --eddy-bin target/release/eddy-bench
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def fvecs(path, limit=None):
    a = np.fromfile(path, dtype=np.int32)
    d = int(a[0])
    m = a.reshape(-1, d + 1)[:, 1:]
    if limit:
        m = m[:limit]
    return np.ascontiguousarray(m.view(np.float32))


def ivecs(path, limit=None):
    a = np.fromfile(path, dtype=np.int32)
    d = int(a[0])
    m = a.reshape(-1, d + 1)[:, 1:]
    return m[:limit] if limit else m


def first(dirname, names):
    for n in names:
        p = os.path.join(dirname, n)
        if os.path.exists(p):
            return p
    sys.exit(f"none of {names} in {dirname}")


def recall10(base, queries, ids, gt, gts, space):
    """Tie-aware recall@10: hit if in true top 10 or exact score >= 10th true score - 1e-5."""
    k = 10
    kth = gts[:, k - 1]
    hits = 0
    for i in range(len(queries)):
        row = [int(x) for x in ids[i][:k] if x >= 0]
        if not row:
            continue
        vecs = base[row]
        if space == "ip":
            s = vecs @ queries[i]
        else:
            s = -((vecs - queries[i]) ** 2).sum(axis=1)
        top = set(int(x) for x in gt[i, :k])
        hits += sum(1 for j, r in enumerate(row) if r in top or s[j] >= kth[i] - 1e-5)
    return hits / (k * len(queries))


def timed_qps(fn, nq, min_secs):
    fn()  # warm-up
    t = time.perf_counter()
    done = 0
    while True:
        fn()
        done += nq
        el = time.perf_counter() - t
        if el >= min_secs:
            return done / el


class Hnswlib:
    name = "hnswlib"

    def build(self, base, space, m, efc, threads):
        import hnswlib
        self.ix = hnswlib.Index(space=space, dim=base.shape[1])
        self.ix.init_index(max_elements=len(base), ef_construction=efc, M=m, random_seed=42)
        t = time.perf_counter()
        self.ix.add_items(base, num_threads=threads)
        el = time.perf_counter() - t
        self.ix.set_num_threads(1)
        return el

    def search(self, queries, ef):
        self.ix.set_ef(max(ef, 10))
        return lambda: self.ix.knn_query(queries, k=10, num_threads=1)[0]


class Faiss:
    name = "faiss"

    def build(self, base, space, m, efc, threads):
        import faiss
        self.faiss = faiss
        metric = faiss.METRIC_INNER_PRODUCT if space == "ip" else faiss.METRIC_L2
        self.ix = faiss.IndexHNSWFlat(base.shape[1], m, metric)
        self.ix.hnsw.efConstruction = efc
        faiss.omp_set_num_threads(threads)
        t = time.perf_counter()
        self.ix.add(base)
        el = time.perf_counter() - t
        faiss.omp_set_num_threads(1)
        return el

    def search(self, queries, ef):
        self.ix.hnsw.efSearch = max(ef, 10)
        return lambda: self.ix.search(queries, 10)[1]


class Usearch:
    name = "usearch"

    def build(self, base, space, m, efc, threads):
        from usearch.index import Index
        self.ix = Index(ndim=base.shape[1], metric="ip" if space == "ip" else "l2sq",
                        dtype="f32", connectivity=m, expansion_add=efc, expansion_search=64)
        t = time.perf_counter()
        self.ix.add(np.arange(len(base), dtype=np.uint64), base, threads=threads)
        return time.perf_counter() - t

    def search(self, queries, ef):
        self.ix.expansion_search = max(ef, 10)
        return lambda: self.ix.search(queries, 10, threads=1).keys.astype(np.int64)


class QdrantEdge:
    """Qdrant's HNSW through qdrant-edge (Qdrant's storage engine in-process, no server).

    One shard in a temporary directory: vectors in RAM, no WAL, one segment
    (`default_segment_number=1`), HNSW built on every segment above 1 KB, no
    quantization. The build is the upsert of all points plus `optimize()`,
    which blocks until the HNSW graph is built (`max_indexing_threads` =
    build threads). Searching uses a one-thread search pool and Qdrant's
    per-request `hnsw_ef`; the point objects and search requests are made
    before the timing, so the timed loop is one `EdgeShard.search` call per
    query (Qdrant's own minimum of ef = k applies either way)."""
    name = "qdrant-edge"

    def build(self, base, space, m, efc, threads):
        import tempfile
        import qdrant_edge as qe
        self.qe = qe
        self.tmp = tempfile.TemporaryDirectory(prefix="qdrant-edge-")  # removed when dropped
        cfg = qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=base.shape[1],
                                        distance=qe.Distance.Dot if space == "ip" else qe.Distance.Euclid),
            hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=efc, full_scan_threshold=1,
                                           max_indexing_threads=threads),
            optimizers=qe.EdgeOptimizersConfig(default_segment_number=1, indexing_threshold=1),
            max_search_threads=1, wal_enabled=False)
        self.shard = qe.EdgeShard.create(os.path.join(self.tmp.name, "shard"), cfg)
        points = [qe.Point(i, v) for i, v in enumerate(base.tolist())]
        t = time.perf_counter()
        for i in range(0, len(points), 10_000):
            self.shard.update(qe.UpdateOperation.upsert_points(points[i:i + 10_000]))
        self.shard.optimize()
        el = time.perf_counter() - t
        info = self.shard.info()
        if info.indexed_vectors_count != len(base):
            raise RuntimeError(f"qdrant-edge indexed {info.indexed_vectors_count} of {len(base)} vectors")
        return el

    def search(self, queries, ef):
        qe = self.qe
        params = qe.SearchParams(hnsw_ef=max(ef, 10))
        reqs = [qe.SearchRequest(query=qe.Query.Nearest(q), limit=10, params=params)
                for q in queries.tolist()]
        shard = self.shard

        def run():
            out = np.full((len(reqs), 10), -1, dtype=np.int64)
            for i, r in enumerate(reqs):
                hits = shard.search(r)
                out[i, :len(hits)] = [h.id for h in hits]
            return out
        return run


def run_peer(engine, base, queries, gt, gts, a):
    el = engine.build(base, a.space, a.m, a.efc, a.threads)
    pts = []
    for ef in a.ef:
        fn = engine.search(queries, ef)
        ids = fn()
        r = recall10(base, queries, ids, gt, gts, a.space)
        q = timed_qps(fn, len(queries), a.min_secs)
        pts.append({"ef": ef, "recall10": r, "qps1": q})
    return {"build_secs": el, "points": pts}


def run_eddy(a, huge_pages=True):
    """eddy-bench as the service serves: data in transparent huge pages
    (`--segment-residency huge-pages`); huge_pages=False maps 4 KiB pages like
    the peers' allocations (engine name `eddy4k`). With --eddy-two-threads each
    mode is also searched by two threads at once (engine `eddy-<mode>-2t`, its
    `qps1` the two threads' total): the figure the service's batches are
    measured against."""
    cmd = [a.eddy_bin, "--dataset", a.dataset, "--json", "--m", str(a.m), "--efc", str(a.efc),
           "--threads", str(a.threads), "--ef", ",".join(map(str, a.ef)), "--modes", a.eddy_modes,
           "--min-secs", str(a.min_secs), "--huge-pages", "true" if huge_pages else "false",
           "--space", "dot" if a.space == "ip" else "l2"]
    if not a.eddy_two_threads:
        cmd += ["--no-mt"]
    if a.queries:
        cmd += ["--queries", str(a.queries)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rep = json.loads(out)
    res = {}
    prefix = "eddy" if huge_pages else "eddy4k"
    for mode in a.eddy_modes.split(","):
        res[f"{prefix}-{mode}"] = {
            "build_secs": rep["build_secs"],
            "points": [{"ef": p["ef"], "recall10": p["recall10"], "qps1": p["qps1"]}
                       for p in rep["points"] if p["mode"] == mode],
            "unreachable": rep["unreachable"],
        }
        if a.eddy_two_threads:
            res[f"{prefix}-{mode}-2t"] = {
                "build_secs": rep["build_secs"],
                "points": [{"ef": p["ef"], "recall10": p["recall10"], "qps1": p["qps2"]}
                           for p in rep["points"] if p["mode"] == mode and p.get("qps2")],
                "unreachable": rep["unreachable"],
            }
    return res


def qps_at(points, target):
    """log-linear interpolation of QPS at recall target between bracketing ef points."""
    pts = sorted(points, key=lambda p: p["ef"])
    if pts and pts[0]["recall10"] >= target:
        return None, "below sweep"
    for lo, hi in zip(pts, pts[1:]):
        if lo["recall10"] < target <= hi["recall10"]:
            f = (target - lo["recall10"]) / (hi["recall10"] - lo["recall10"])
            lq = math.log(lo["qps1"]) + f * (math.log(hi["qps1"]) - math.log(lo["qps1"]))
            return math.exp(lq), "ok"
    return None, "not reached"


def ratio_cell(at, x, y, t, ratios):
    """`x / y` QPS at recall t as a table cell (mean ratio, per-round range), recorded
    in `ratios`; None when either side has no interpolated QPS there."""
    qx, _, rx = at[(x, t)]
    qy, _, ry = at[(y, t)]
    if not (qx and qy):
        return None
    rr = [u / v for u, v in zip(rx, ry) if u and v]
    sp = f" [{min(rr):.2f}-{max(rr):.2f}]" if rr else ""
    ratios[f"{x}/{y}@{t}"] = qx / qy
    return f"{qx / qy:.2f}x{sp}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--eddy-bin", default="target/release/eddy-bench")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--efc", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ef", type=lambda s: [int(x) for x in s.split(",")],
                    default=[10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default="eddy,hnswlib,faiss,usearch",
                    help="eddy (huge pages, as served), eddy4k (4 KiB pages), hnswlib, faiss, usearch, "
                         "qdrant-edge (qdrant-edge-py: Qdrant's engine in-process)")
    ap.add_argument("--eddy-modes", default="f32,sq8")
    ap.add_argument("--eddy-two-threads", action="store_true",
                    help="also measure eddy's modes with two search threads (engines eddy-<mode>-2t)")
    ap.add_argument("--space", default="ip", choices=["ip", "l2"])
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--min-secs", type=float, default=0.5)
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()

    base = fvecs(first(a.dataset, ["base.fvecs"]))
    queries = fvecs(first(a.dataset, ["queries-public.fvecs", "queries.fvecs"]), a.queries)
    gt = ivecs(first(a.dataset, ["gt-public.ivecs", "gt.ivecs"]), a.queries)
    gts = fvecs(first(a.dataset, ["gt-public-scores.fvecs", "gt-scores.fvecs"]), a.queries)
    print(f"dataset {a.dataset}: base {base.shape}, queries {queries.shape}, M={a.m} efc={a.efc} "
          f"build threads={a.threads}, search 1 thread, rounds={a.rounds}", flush=True)

    peers = {"hnswlib": Hnswlib, "faiss": Faiss, "usearch": Usearch, "qdrant-edge": QdrantEdge}
    engines = [e for e in a.engines.split(",") if e]
    rounds = []  # list of {engine: result}
    for r in range(a.rounds):
        order = engines if r % 2 == 0 else list(reversed(engines))
        res = {}
        for e in order:
            t = time.perf_counter()
            if e in ("eddy", "eddy4k"):
                res.update(run_eddy(a, huge_pages=(e == "eddy")))
            else:
                try:
                    res[e] = run_peer(peers[e](), base, queries, gt, gts, a)
                except ImportError as err:
                    print(f"  {e}: not installed ({err})", flush=True)
                    continue
            print(f"round {r + 1}: {e} done in {time.perf_counter() - t:.0f} s", flush=True)
        rounds.append(res)

    names = sorted({n for rr in rounds for n in rr}, key=lambda n: (not n.startswith("eddy"), n))
    # Per engine, per ef: mean recall, mean QPS and spread.
    summary = {}
    for n in names:
        runs = [rr[n] for rr in rounds if n in rr]
        builds = [x["build_secs"] for x in runs]
        pts = []
        for i, ef in enumerate(a.ef):
            qs = [x["points"][i]["qps1"] for x in runs]
            rs = [x["points"][i]["recall10"] for x in runs]
            pts.append({"ef": ef, "recall10": statistics.mean(rs), "qps1": statistics.mean(qs),
                        "spread": (max(qs) - min(qs)) / statistics.mean(qs)})
        summary[n] = {"build": builds, "points": pts, "runs": runs}

    print("\n## recall@10 (tie-aware) and single-thread QPS per ef (mean of rounds, spread = (max-min)/mean)")
    hdr = "| ef | " + " | ".join(f"{n} R@10 | {n} QPS (spread)" for n in names) + " |"
    print(hdr)
    print("|" + "---|" * (1 + 2 * len(names)))
    for i, ef in enumerate(a.ef):
        cells = []
        for n in names:
            p = summary[n]["points"][i]
            cells.append(f"{p['recall10']:.4f} | {p['qps1']:.0f} ({100 * p['spread']:.0f}%)")
        print(f"| {ef} | " + " | ".join(cells) + " |")

    print("\n## build time on %d threads (s, per round)" % a.threads)
    for n in names:
        b = summary[n]["build"]
        print(f"- {n}: " + ", ".join(f"{x:.2f}" for x in b) + f" (mean {statistics.mean(b):.2f})")

    print("\n## QPS at matched recall@10 (log-linear interpolation between bracketing ef; never extrapolated)")
    targets = [0.90, 0.95, 0.99]
    print("| engine | " + " | ".join(f"QPS @{t}" for t in targets) + " |")
    print("|---|" + "---|" * len(targets))
    at = {}
    for n in names:
        cells = []
        for t in targets:
            q, why = qps_at(summary[n]["points"], t)
            per_round = [qps_at(x["points"], t)[0] for x in summary[n]["runs"]]
            at[(n, t)] = (q, why, per_round)
            cells.append(f"{q:.0f}" if q else why)
        print(f"| {n} | " + " | ".join(cells) + " |")

    # Two-thread curves are compared only with eddy's own one-thread ones.
    eddys = [n for n in names if n.startswith("eddy") and not n.endswith("-2t")]
    others = [n for n in names if not n.startswith("eddy")]
    print("\n## eddy throughput ratio at matched recall@10 (mean; per-round min-max in brackets)")
    print("| eddy mode | peer | " + " | ".join(f"@{t}" for t in targets) + " | build ratio (eddy/peer, lower is better) |")
    print("|---|---|" + "---|" * len(targets) + "---|")
    ratios = {}
    for e in eddys:
        for p in others:
            cells = []
            for t in targets:
                qe, we, _ = at[(e, t)]
                qp, wp, _ = at[(p, t)]
                cell = ratio_cell(at, e, p, t, ratios)
                if cell:
                    cells.append(cell)
                elif we == "below sweep" and qp:
                    # eddy's lowest ef already beats the target: its QPS there is a
                    # lower bound on its QPS at the target (QPS falls as ef grows).
                    low = min(summary[e]["points"], key=lambda x: x["ef"])
                    cells.append(f">= {low['qps1'] / qp:.2f}x (eddy R={low['recall10']:.3f} at ef {low['ef']})")
                else:
                    cells.append(f"eddy {we}" if not qe else f"{p} {wp}")
            br = statistics.mean(summary[e]["build"]) / statistics.mean(summary[p]["build"])
            ratios[f"{e}/{p}@build"] = br
            print(f"| {e} | {p} | " + " | ".join(cells) + f" | {br:.2f} |")
    pairs = [(f"{x}-sq8", f"{x}-f32") for x in ("eddy", "eddy4k")]
    pairs += [(f"eddy-{m}", f"eddy4k-{m}") for m in ("f32", "sq8")]
    pairs += [(f"eddy-{m}-2t", f"eddy-{m}") for m in ("f32", "sq8")]
    pairs = [(x, y) for x, y in pairs if x in names and y in names]
    if pairs:
        print("\n## eddy against itself at matched recall@10 (mean; per-round min-max in brackets)")
        print("| numerator | denominator | " + " | ".join(f"@{t}" for t in targets) + " |")
        print("|---|---|" + "---|" * len(targets))
        for x, y in pairs:
            cells = []
            for t in targets:
                qx, wx, _ = at[(x, t)]
                wy = at[(y, t)][1]
                cells.append(ratio_cell(at, x, y, t, ratios) or (wx if not qx else wy))
            print(f"| {x} | {y} | " + " | ".join(cells) + " |")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"summary": {n: {k: v for k, v in s.items()} for n, s in summary.items()},
                       "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
