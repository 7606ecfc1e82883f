#!/usr/bin/env bash
# A real-browser check: JupyterLab (PyPI) with Debian's chromium, driven by playwright-core
# (npm), opens notebooks/01-quickstart.ipynb with its outputs cleared, runs it on the eager
# kernel and takes a screenshot in which the chart shows: target/browser/quickstart.png.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
python3 -m pip install --quiet --disable-pip-version-check jupyterlab nbformat
(cd "$here" && npm install --silent --no-audit --no-fund)
cargo build --release -p kernel --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
"$root/target/release/eager-kernel" install --prefix "$work/prefix" >/dev/null
export JUPYTER_PATH="$work/prefix/share/jupyter"
python3 - "$root/notebooks/01-quickstart.ipynb" "$work/nb/01-quickstart.ipynb" <<'PY'
import sys, pathlib, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
for c in nb.cells:
    if c.cell_type == "code":
        c.outputs, c.execution_count = [], None
pathlib.Path(sys.argv[2]).parent.mkdir(parents=True)
nbformat.write(nb, sys.argv[2])
PY
port=18888
token=eager-browser-check
jupyter lab --allow-root --no-browser --port "$port" --ServerApp.token="$token" \
  --ServerApp.root_dir="$work/nb" > "$work/lab.log" 2>&1 &
lab=$!
trap 'kill $lab 2>/dev/null; wait $lab 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/api/status?token=$token" >/dev/null && break; sleep 1; done
mkdir -p "$root/target/browser"
node "$here/run_notebook.mjs" "http://127.0.0.1:$port/lab/tree/01-quickstart.ipynb?token=$token" "$root/target/browser/quickstart.png"
echo "browser: 1 passed, 0 failed"
