"""pyarrow Flight client check for eddy-query.

Runs DoGet (JSON ticket) and DoExchange (batches of query vectors) against
the service and compares every result with an exact numpy search over the
points the test produced. Exits non-zero with a message on any mismatch.

With --tls-root and --key (a secured service) it speaks TLS, checks that a
call without a key is refused, and authenticates the way pyarrow jobs do:
a basic-token handshake whose password is the key, then the bearer token
the service answers with on every call.
"""
import argparse
import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight


def exact(points, ids, queries, k):
    d = ((queries[:, None, :].astype(np.float64) - points[None, :, :].astype(np.float64)) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(ids, d.shape), d), axis=-1)[:, :k]
    return ids[order], np.take_along_axis(d, order, axis=-1)


def check(table, queries, points, ids, k, what):
    want_ids, want_d = exact(points, ids, queries, k)
    qi = table.column("query_index").to_numpy()
    rank = table.column("rank").to_numpy()
    got_ids = table.column("id").to_numpy()
    score = table.column("score").to_numpy()
    if len(qi) != len(queries) * k:
        sys.exit(f"{what}: {len(qi)} rows for {len(queries)} queries x k={k}")
    for q, r, i, s in zip(qi, rank, got_ids, score):
        if i != want_ids[q, r]:
            sys.exit(f"{what}: query {q} rank {r}: id {i}, exact {want_ids[q, r]}")
        if abs(s - want_d[q, r]) > 1e-4 * max(1.0, want_d[q, r]):
            sys.exit(f"{what}: query {q} rank {r}: score {s}, exact {want_d[q, r]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--location", required=True)
    ap.add_argument("--collection", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--tls-root", help="PEM file of the server's certificate (TLS)")
    ap.add_argument("--key", help="API key (read scope is enough)")
    args = ap.parse_args()
    data = json.load(open(args.points))
    ids = np.array(data["ids"], dtype=np.uint64)
    points = np.array(data["vectors"], dtype=np.float32)
    dim = points.shape[1]
    rng = np.random.default_rng(7)
    queries = rng.uniform(-1, 1, size=(40, dim)).astype(np.float32)
    if args.tls_root:
        client = flight.FlightClient(args.location, tls_root_certs=open(args.tls_root, "rb").read())
    else:
        client = flight.FlightClient(args.location)
    opts = flight.FlightCallOptions()
    if args.key:
        try:
            client.get_flight_info(flight.FlightDescriptor.for_path("collections", args.collection))
            sys.exit("no key: expected the call to be refused")
        except flight.FlightUnauthenticatedError:
            pass
        try:
            client.authenticate_basic_token(b"job", b"not-a-key-of-this-service")
            sys.exit("a wrong key: expected the handshake to be refused")
        except flight.FlightUnauthenticatedError:
            pass
        token = client.authenticate_basic_token(b"job", args.key.encode())
        opts = flight.FlightCallOptions(headers=[token])

    info = client.get_flight_info(flight.FlightDescriptor.for_path("collections", args.collection), opts)
    if info.total_records != len(ids):
        sys.exit(f"flight info: total_records {info.total_records}, expected {len(ids)}")

    k = 7
    ticket = json.dumps({"collection": args.collection, "vectors": queries[:10].tolist(), "k": k})
    table = client.do_get(flight.Ticket(ticket.encode()), opts).read_all()
    check(table, queries[:10], points, ids, k, "do_get")
    # The answer says which offsets it reflects, in its first chunk's metadata.
    chunk = client.do_get(flight.Ticket(ticket.encode()), opts).read_chunk()
    said = json.loads(chunk.app_metadata.to_pybytes())
    if not said.get("offsets") or "stale" in said:
        sys.exit(f"do_get answer metadata: {said}")

    # A payload filter (the test's points carry kind = "k{id % 3}").
    keep = ids % 3 == 0
    ticket = json.dumps({"collection": args.collection, "vectors": queries[:10].tolist(), "k": k,
                         "filter": {"must": [{"key": "kind", "match": {"value": "k0"}}]}})
    table = client.do_get(flight.Ticket(ticket.encode()), opts).read_all()
    check(table, queries[:10], points[keep], ids[keep], k, "do_get with a filter")

    descriptor = flight.FlightDescriptor.for_command(json.dumps({"collection": args.collection, "k": k}))
    writer, reader = client.do_exchange(descriptor, opts)
    schema = pa.schema([("vector", pa.list_(pa.float32(), dim))])
    writer.begin(schema)
    for lo in range(0, len(queries), 16):
        part = queries[lo:lo + 16]
        arr = pa.FixedSizeListArray.from_arrays(pa.array(part.reshape(-1), pa.float32()), dim)
        writer.write_batch(pa.record_batch([arr], schema=schema))
    writer.done_writing()
    table = reader.read_all()
    writer.close()
    check(table, queries, points, ids, k, "do_exchange")

    try:
        client.do_get(flight.Ticket(b'{"collection": "%s", "vectors": [[1.0]]}' % args.collection.encode()), opts).read_all()
        sys.exit("bad ticket: expected an error")
    except flight.FlightServerError as e:
        if "dimension" not in str(e):
            sys.exit(f"bad ticket: unclear error {e}")
    except pa.ArrowInvalid as e:
        if "dimension" not in str(e):
            sys.exit(f"bad ticket: unclear error {e}")
    print("pyarrow flight: ok")


if __name__ == "__main__":
    main()
