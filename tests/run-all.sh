#!/usr/bin/env bash
# The whole test suite: Rust tests of every crate (core, viz, REPL through a pty, the guide's
# snippets), the API docs and the guide built, then the Jupyter kernel under real Jupyter
# clients and the notebooks under nbclient, a model trained in eager loaded by transformers, and
# eager-serve under OpenAI's client against transformers' generation.
set -euo pipefail
cd "$(dirname "$0")/.."
suite_start=$(date +%s)
python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
# torch and transformers: the Hugging Face round trip (tests/models)
python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements-models.txt
# Tests start sessions with settings of their own: each would get a session server of its own
# (a spare session, ~1 GB, for an hour). The tests of the server turn it on.
export EAGER_SESSION_SERVER=0
# Every crate's tests, doctests included: eager-guide's doctests are the guide's Rust snippets.
cargo test --release --workspace
# The API docs: every intra-doc link resolves, nothing warns.
RUSTDOCFLAGS="-D warnings" cargo doc --release --workspace --no-deps
# The guide (docs/, an mdBook): mdbook from crates.io at a pinned version, installed once
# (a cold install is about two minutes; later runs find it and skip it).
MDBOOK_VERSION=0.5.4
if [ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
  cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search
fi
mdbook build docs
# The binaries the Python tests drive (eager-kernel, the model examples, eager-serve) in one build
# over the workspace with its examples: the test build's features, so no dependency compiles
# again (built one package at a time, cargo resolved 8-16 dependencies with other features and
# spent 7.2 minutes recompiling them; this build took 18 s after the test build, 2026-12-07).
cargo build --release --workspace --bins --examples
python3 -m pytest -q tests/kernel tests/notebooks tests/models tests/serve
# Every session server the suite started is gone (one left holds about 1 GB for an hour).
left=""
for pid in $(pgrep -f -- '--eager-session-server' || true); do
  age=$(ps -o etimes= -p "$pid" 2>/dev/null) || continue  # it ended meanwhile
  if [ $(( $(date +%s) - age )) -ge "$suite_start" ]; then left="$left $pid"; fi
done
if [ -n "$left" ]; then
  ps -o pid,etimes,args -p $left
  echo "session servers the suite started are still running:$left"
  exit 1
fi
