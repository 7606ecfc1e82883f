#!/usr/bin/env bash
# The whole test suite: Rust tests of every crate (core, viz, REPL through a pty), then the
# Jupyter kernel under real Jupyter clients and the notebooks under nbclient.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
cargo test --release --workspace
cargo build --release -p kernel
python3 -m pytest -q tests/kernel tests/notebooks
