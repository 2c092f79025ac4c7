#!/usr/bin/env python3
"""Cut the committed demo sample out of the full debian-minilm dataset.

Writes, into OUT (default: loadtest/data/debian-minilm-10k):

  base.fvecs          the first N_BASE base vectors (float32, as published)
  base-payload.jsonl  their payload lines, without the long `text` fields
  queries.fvecs       the first N_QUERIES public queries
  gt.ivecs            exact top-K ids over the cut base (int32)
  gt-scores.fvecs     their cosine similarities (float32)

Ground truth is recomputed for the cut with numpy in float64: vectors are
re-normalized in float64, cosine = inner product, sorted by decreasing score,
ties broken by the smaller base id (the full dataset's rules).

Usage: python3 loadtest/scripts/make_sample.py [SRC [OUT]]
Needs numpy only.
"""

import hashlib
import json
import os
import sys

import numpy as np

N_BASE = 10_000
N_QUERIES = 200
K = 100
KEEP_FIELDS = ["id", "name", "section", "priority", "installed_size", "tags", "summary"]

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SRC = "/work/shared/datasets/debian-minilm"
DEFAULT_OUT = os.path.join(HERE, "..", "data", "debian-minilm-10k")


def read_vecs(path, dtype, limit):
    """Reads the first `limit` rows of an fvecs/ivecs file."""
    raw = np.fromfile(path, dtype="<i4")
    dim = int(raw[0])
    rows = raw.reshape(-1, dim + 1)
    if not (rows[:, 0] == dim).all():
        raise ValueError(f"{path}: rows with different dimensions")
    rows = rows[:limit]
    return np.ascontiguousarray(rows[:, 1:]).view(dtype)


def write_vecs(path, m):
    """Writes a 2-D float32 or int32 array as fvecs/ivecs."""
    n, dim = m.shape
    out = np.empty((n, dim + 1), dtype="<i4")
    out[:, 0] = dim
    out[:, 1:] = m.view("<i4")
    out.tofile(path)


def exact_topk(base, queries, k):
    """Exact cosine top-k in float64; ties broken by the smaller id."""
    b = base.astype(np.float64)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    q = queries.astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    scores = q @ b.T
    ids = np.arange(b.shape[0])
    gt_ids = np.empty((q.shape[0], k), dtype="<i4")
    gt_scores = np.empty((q.shape[0], k), dtype="<f4")
    for i, row in enumerate(scores):
        # lexsort: last key is primary -> decreasing score, then increasing id.
        order = np.lexsort((ids, -row))[:k]
        gt_ids[i] = order
        gt_scores[i] = row[order]
    return gt_ids, gt_scores


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SRC
    out = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_OUT
    os.makedirs(out, exist_ok=True)

    base = read_vecs(os.path.join(src, "base.fvecs"), "<f4", N_BASE)
    queries = read_vecs(os.path.join(src, "queries-public.fvecs"), "<f4", N_QUERIES)
    assert base.shape == (N_BASE, 384), base.shape
    assert queries.shape == (N_QUERIES, 384), queries.shape

    write_vecs(os.path.join(out, "base.fvecs"), base)
    write_vecs(os.path.join(out, "queries.fvecs"), queries)

    with open(os.path.join(src, "base-payload.jsonl"), encoding="utf-8") as fin, open(
        os.path.join(out, "base-payload.jsonl"), "w", encoding="utf-8"
    ) as fout:
        for i, line in enumerate(fin):
            if i == N_BASE:
                break
            rec = json.loads(line)
            if rec["id"] != i:
                raise ValueError(f"payload line {i} has id {rec['id']}")
            slim = {f: rec.get(f) for f in KEEP_FIELDS}
            fout.write(json.dumps(slim, ensure_ascii=False) + "\n")

    gt_ids, gt_scores = exact_topk(base, queries, K)
    write_vecs(os.path.join(out, "gt.ivecs"), gt_ids)
    write_vecs(os.path.join(out, "gt-scores.fvecs"), gt_scores)

    # Sanity: float32 brute force must reach tie-aware recall@10 = 1.
    s32 = queries @ base.T
    top10 = np.argsort(-s32, axis=1, kind="stable")[:, :10]
    kth = gt_scores[:, 9:10]
    hit = np.isin(top10, gt_ids[:, :10]) | (np.take_along_axis(s32, top10, 1) >= kth - 1e-5)
    print(f"float32 brute force tie-aware recall@10 = {hit.mean():.4f}")

    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        print(f"| {name} | {os.path.getsize(path)} | `{sha256(path)}` |")


if __name__ == "__main__":
    main()
