"""A batch kNN job in the shape analytics teams run it: a DuckDB table of
documents with their own keys, their embeddings sent to eddy-query over
Arrow Flight DoExchange, and the answers joined back to the table by key in
DuckDB. eddy carries every input column other than `vector` (here
`doc_key`) beside each result row, so the job keeps no bookkeeping of its
own.

    python3 services/query/examples/flight_job_duckdb.py \
        --location grpc://127.0.0.1:50051 --collection docs --points points.json

`--points` is a JSON file {"ids": [...], "vectors": [[...], ...]} of points
already in the collection; each is searched for itself, so its own id must
come back first. With `--tls-root` and `--key` it speaks TLS and
authenticates with an API key. Needs pyarrow, numpy and duckdb.
"""
import argparse
import json
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight


def connect(args):
    if args.tls_root:
        client = flight.FlightClient(args.location, tls_root_certs=open(args.tls_root, "rb").read())
    else:
        client = flight.FlightClient(args.location)
    options = flight.FlightCallOptions()
    if args.key:
        options = flight.FlightCallOptions(headers=[client.authenticate_basic_token(b"job", args.key.encode())])
    return client, options


def knn(client, options, collection, table, k, batch_rows=64):
    """Streams `table` (a `vector` column plus any key columns) through
    DoExchange; returns the answers as one Arrow table."""
    command = json.dumps({"collection": collection, "k": k})
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(command), options)
    writer.begin(table.schema)
    for batch in table.to_batches(max_chunksize=batch_rows):
        writer.write_batch(batch)
    writer.done_writing()
    answers = reader.read_all()
    writer.close()
    return answers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--location", required=True)
    ap.add_argument("--collection", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--tls-root")
    ap.add_argument("--key")
    args = ap.parse_args()

    data = json.load(open(args.points))
    ids = np.array(data["ids"], dtype=np.uint64)
    vectors = np.array(data["vectors"], dtype=np.float32)
    dim = vectors.shape[1]
    docs = pa.table({
        "doc_key": pa.array([f"doc-{i}" for i in ids]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim),
    })

    client, options = connect(args)
    answers = knn(client, options, args.collection, docs, args.k)

    db = duckdb.connect()
    db.register("docs", docs.select(["doc_key"]))
    db.register("answers", answers)
    # The nearest neighbour of every document, joined back by its key.
    nearest = db.sql("""
        SELECT d.doc_key, a.id AS nearest_id, a.score
        FROM docs d JOIN answers a ON a.doc_key = d.doc_key AND a.rank = 0
        ORDER BY d.doc_key
    """).fetchall()
    if len(nearest) != len(ids):
        sys.exit(f"{len(nearest)} documents answered of {len(ids)}")
    wrong = [(key, got) for key, got, _ in nearest if key != f"doc-{got}"]
    if wrong:
        sys.exit(f"documents whose nearest point is not themselves: {wrong[:5]}")
    per_doc = db.sql("SELECT count(*) FROM answers GROUP BY doc_key").fetchall()
    if any(n != args.k for (n,) in per_doc):
        sys.exit(f"expected {args.k} answers per document")
    print(f"duckdb job: ok ({len(nearest)} documents joined to their {args.k} nearest points)")


if __name__ == "__main__":
    main()
