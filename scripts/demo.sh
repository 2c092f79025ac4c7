#!/usr/bin/env bash
# eddy demo on a fresh machine: installs the Tansu broker (and OpenSSL's
# headers) if missing, builds
# the services and the demo driver in release mode, and runs
#   eddy-loadtest demo "$@"
# (see `target/release/eddy-loadtest demo --help`; e.g. `--exit` to stop
# after the report, `--dataset DIR` for the full debian-minilm set).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n "${TANSU_BIN:-}" ]]; then
    [[ -x "$TANSU_BIN" ]] || { echo "TANSU_BIN=$TANSU_BIN is not executable" >&2; exit 1; }
elif ! command -v tansu >/dev/null 2>&1 && [[ ! -x "$HOME/.cargo/bin/tansu" ]]; then
    echo "==> installing the Tansu broker (one-off, a few minutes)" >&2
    cargo install --locked tansu --features libsql
fi

# The Kafka client is built with OpenSSL (TLS and SCRAM for secured brokers).
if ! pkg-config --exists openssl 2>/dev/null; then
    echo "==> installing OpenSSL headers (apt-get install libssl-dev pkg-config)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libssl-dev pkg-config >/dev/null
fi

echo "==> building eddy (release)" >&2
cargo build --release -p eddy-ingest -p eddy-query -p eddy-loadtest

exec target/release/eddy-loadtest demo "$@"
