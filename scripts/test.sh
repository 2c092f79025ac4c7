#!/usr/bin/env bash
# The test command: installs what the tests need when missing (Tansu, pyarrow,
# numpy, duckdb, schemathesis, moto's S3 server for the object-store tests,
# build packages with OpenSSL for Kafka's TLS and
# SCRAM, socat as the test broker's TLS front), checks formatting and lints,
# then runs every test,
# the ingest crash-point tests (failpoints build), and the SIMD kernels again
# with every backend this CPU supports forced in turn.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

if ! dpkg -s zlib1g-dev libssl-dev pkg-config make gcc >/dev/null 2>&1 \
  || ! command -v promtool >/dev/null 2>&1 || ! command -v socat >/dev/null 2>&1; then
  log "installing build packages, promtool and socat (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    zlib1g-dev libssl-dev pkg-config make gcc prometheus socat >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v tansu >/dev/null 2>&1; then
  log "installing the Tansu broker (cargo install --locked tansu --features libsql)"
  cargo install --locked tansu --features libsql
fi

PYTHON=${PYTHON:-python3}
export PYTHON
if ! "$PYTHON" -c 'import pyarrow, numpy, duckdb, schemathesis, moto.moto_server.werkzeug_app' >/dev/null 2>&1; then
  log "installing pyarrow, numpy, duckdb, schemathesis and moto's S3 server (pip)"
  "$PYTHON" -m pip install --quiet pyarrow numpy duckdb schemathesis 'moto[server]==5.2.5'
fi

log "promtool check rules (alert rules of the shipped dashboards)"
promtool check rules dashboards/alerts.yml

log "cargo fmt --check"
cargo fmt --all --check

log "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings

# The kernels report what they really dispatch: the table and, per kernel, the
# module of the function it runs (an AVX-512 table keeps AVX2 kernels where
# those measured faster).
kernel_backend() { cargo run -q --locked -p eddy-kernels --example backend -- "$@"; }
log "cargo test (kernel backend: $(kernel_backend))"
cargo test --locked --workspace

log "crash-point tests (eddy-manifest and eddy-ingest with the failpoints feature; never in a release build)"
cargo test --locked -p eddy-manifest --features failpoints --lib gc::
cargo test --locked -p eddy-ingest --features failpoints --lib maintenance::
cargo test --locked -p eddy-ingest --features failpoints --test failpoints
cargo test --locked -p eddy-ingest --features failpoints --test kill -- crash_points

# Every backend this CPU runs, forced in turn (AVX-512 only where the CPU has it);
# the differential tests also run the variants no table picks.
supported=$(kernel_backend --supported)
for backend in $supported; do
  packages=(-p eddy-kernels -p eddy-quant)
  [ "$backend" = scalar ] && packages=(-p eddy-kernels)
  log "${packages[*]} tests with the $backend backend forced ($(EDDY_KERNELS_BACKEND=$backend kernel_backend))"
  EDDY_KERNELS_BACKEND=$backend cargo test --locked "${packages[@]}"
done
