#!/usr/bin/env bash
# A real-browser check: JupyterLab (PyPI) with Debian's chromium, driven by playwright-core
# (npm), opens notebooks with their outputs cleared and runs them on the eager kernel:
# 01-quickstart, a screenshot in which the chart shows (target/browser/quickstart.png); and
# 04-training, whose progress bar and loss chart must update in place while it runs, a
# screenshot after the updates (target/browser/training-live.png); and 03-what-eager-costs, whose
# batch-size slider (a widget, drawn by jupyterlab_widgets) is dragged: the chart under it must be
# redrawn (target/browser/widgets-before.png, widgets-after.png).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
python3 -m pip install --quiet --disable-pip-version-check jupyterlab jupyterlab_widgets nbformat
(cd "$here" && npm install --silent --no-audit --no-fund)
# The kernel, built as tests/run-all.sh builds it (the workspace's features), so that after the
# suite nothing recompiles (`-p kernel` alone resolves other features: 3.9 minutes of rebuild).
cargo build --release --workspace --bins --examples --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
"$root/target/release/eager-kernel" install --prefix "$work/prefix" >/dev/null
export JUPYTER_PATH="$work/prefix/share/jupyter"
# A session server of this check's own (its runtime dir), stopped with its spares at the end.
export XDG_RUNTIME_DIR="$work/runtime"
mkdir -m 700 "$XDG_RUNTIME_DIR"
python3 - "$root/notebooks" "$work/nb" 01-quickstart 03-what-eager-costs 04-training <<'PY'
import sys, pathlib, nbformat
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dst.mkdir(parents=True)
for name in sys.argv[3:]:
    nb = nbformat.read(src / f"{name}.ipynb", as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    nbformat.write(nb, dst / f"{name}.ipynb")
PY
port=18888
token=eager-browser-check
jupyter lab --allow-root --no-browser --port "$port" --ServerApp.token="$token" \
  --ServerApp.root_dir="$work/nb" --LabApp.workspaces_dir="$work/workspaces" > "$work/lab.log" 2>&1 &
lab=$!
trap 'kill $lab 2>/dev/null; wait $lab 2>/dev/null; "$root/target/release/eager-kernel" stop-server; rm -rf "$work"' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/api/status?token=$token" >/dev/null && break; sleep 1; done
mkdir -p "$root/target/browser"
# Each notebook in a workspace of its own (a shared one would reopen the other's tab).
node "$here/run_notebook.mjs" "http://127.0.0.1:$port/lab/workspaces/quickstart/tree/01-quickstart.ipynb?token=$token" "$root/target/browser/quickstart.png"
node "$here/run_live.mjs" "http://127.0.0.1:$port/lab/workspaces/live/tree/04-training.ipynb?token=$token" "$root/target/browser/training-live.png"
node "$here/run_widgets.mjs" "http://127.0.0.1:$port/lab/workspaces/widgets/tree/03-what-eager-costs.ipynb?token=$token" \
  "$root/target/browser/widgets-before.png" "$root/target/browser/widgets-after.png"
echo "browser: 3 passed, 0 failed"
