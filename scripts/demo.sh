#!/usr/bin/env bash
# eddy demo on a fresh machine: installs the Tansu broker if missing, builds
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

echo "==> building eddy (release)" >&2
cargo build --release -p eddy-ingest -p eddy-query -p eddy-loadtest

exec target/release/eddy-loadtest demo "$@"
