#!/usr/bin/env bash
# The whole test suite: Rust tests of every crate (core, viz, REPL through a pty), then the
# Jupyter kernel under real Jupyter clients and the notebooks under nbclient, and a model
# trained in eager loaded by transformers.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
# torch and transformers: the Hugging Face round trip (tests/models)
python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements-models.txt
# Tests start sessions with settings of their own: each would get a session server of its own
# (a spare session, ~1 GB, for an hour). The tests of the server turn it on.
export EAGER_SESSION_SERVER=0
cargo test --release --workspace
cargo build --release -p kernel
cargo build --release -p eager-models --examples
python3 -m pytest -q tests/kernel tests/notebooks tests/models
