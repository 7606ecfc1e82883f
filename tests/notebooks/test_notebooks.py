"""Every notebook in notebooks/ runs top to bottom under nbclient on the eager kernel, and its
key outputs are there. With EAGER_REFRESH_NOTEBOOKS=1 the executed notebooks (outputs
included) are written back, which is how the committed outputs are made."""
import os
import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"


def run(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # Errors in a cell raise CellExecutionError: the test, and CI, fail.
    NotebookClient(nb, kernel_name="eager", timeout=600, startup_timeout=900,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    if os.environ.get("EAGER_REFRESH_NOTEBOOKS"):
        nbformat.write(nb, NOTEBOOKS / name)
    return nb


def outputs(nb, mime):
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if mime in out.get("data", {}):
                yield out["data"][mime]
            elif mime == "stream" and out.get("output_type") == "stream":
                yield out["text"]


def test_every_notebook_is_tested():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(EXPECTED)


def check_quickstart(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    assert "tensor([[0.0159, 0.1173, 0.8668],\n        [0.0159, 0.1173, 0.8668]], shape=[2, 3]" in text
    assert "hit rate" in text
    assert any(svg.lstrip().startswith("<svg") for svg in outputs(nb, "image/svg+xml"))


def check_profiling(nb):
    assert len(list(outputs(nb, "image/svg+xml"))) == 3
    assert any("<table" in html for html in outputs(nb, "text/html"))
    hints = "\n".join(outputs(nb, "stream"))
    # The churn of ten shapes of exp, named with its shapes and the dim that varies (compiled,
    # or some loaded from the disk cache).
    assert re.search(r"hint: `exp` (was compiled|needed new executables) for 10 distinct shapes \(\[1, 8\], \[2, 8\], \[3, 8\], …, "
                     r"\[10, 8\]; dim 0 of input 0 varies\)", hints), hints


def check_costs(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    assert "cached sin:" in text
    # The lesson shows a real compile on the first call, then a load from the disk cache.
    assert re.search(r"first sin of f32\[16, \d+\]: [\d.]+ ms \(compiled \+ run\)", text), text
    assert re.search(r"sin again, in-memory cache emptied: [\d.]+ ms \(loaded from the disk cache \+ run\)", text), text
    png = next(outputs(nb, "image/png"))
    assert png.startswith("iVBORw0KGgo")  # base64 of the PNG signature
    # Eager, fused and compiled compute the same step: the first step's loss (before any update)
    # agrees up to the rounding of fused ops (f32, 1e-5 relative).
    first = re.search(r"first step's loss: eager ([\d.]+), fused ([\d.]+), compiled ([\d.]+)", text)
    assert first, text
    eager, fused, compiled = (float(first[i]) for i in (1, 2, 3))
    assert abs(fused - eager) <= 1e-5 * eager and abs(compiled - eager) <= 1e-5 * eager, first.group(0)
    # Sixty steps of momentum SGD compound that rounding: all three learn, to losses a few
    # percent apart (measured: 0.00106, 0.00109, 0.00109).
    losses = re.search(r"loss after (\d+) steps: eager ([\d.]+), fused ([\d.]+), compiled ([\d.]+)", text)
    assert losses, text
    eager, fused, compiled = (float(losses[i]) for i in (2, 3, 4))
    assert eager < 0.5 and fused < 0.5 and compiled < 0.5, losses.group(0)
    assert abs(fused - eager) <= 0.1 * eager + 1e-4 and abs(compiled - fused) <= 0.1 * fused + 1e-4, losses.group(0)
    # Fused: one program per step, none per op.
    stream = "\n".join(outputs(nb, "stream"))
    per_step = re.search(r"per step\s+(\d+)\s+(\d+)\s+([\d.]+)", stream)
    # Eager: the user's ops (two linears, relu, cross_entropy), the backward pass and the step.
    assert per_step and int(per_step[1]) >= 6 and int(per_step[2]) == 1, stream
    assert re.search(r"most dispatched.*fused\{\d+ ops compiled into one\} ×\d+", stream), stream


def check_training(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    eager = re.search(r"eager: loss ([\d.]+) -> ([\d.]+), accuracy ([\d.]+)%", text)
    compiled = re.search(r"compiled: loss ([\d.]+) -> ([\d.]+), accuracy ([\d.]+)%, (\d+) op dispatches"
                         r".*largest loss difference to eager ([\d.e+-]+)", text)
    assert eager and compiled, text
    # Both runs learn, and give the same numbers.
    assert float(eager[2]) < 0.5 * float(eager[1]) and float(eager[3]) > 90, eager.group(0)
    assert float(compiled[2]) < 0.5 * float(compiled[1]) and float(compiled[3]) > 90, compiled.group(0)
    assert float(compiled[5]) < 1e-3, compiled.group(0)
    # The loss curves (SVG), the comparison (PNG) and its table, the saved weights.
    assert any(svg.lstrip().startswith("<svg") and "compiled" in svg for svg in outputs(nb, "image/svg+xml"))
    assert any(png.startswith("iVBORw0KGgo") for png in outputs(nb, "image/png"))
    assert "train_step" in "\n".join(outputs(nb, "stream"))
    assert "0.weight: [64, 2] f32" in text, text
    # The live run: the bar and the chart as their last update left them, then the memory chart.
    assert re.search(r"training 100%\|█{24}\| 300/300 \[[\d:]+<00:00, [\d.]+ it/s\] loss [\d.]+", text), text
    live = re.search(r"Training loss, live: cross-entropy ([\d.]+) at step 299", text)
    assert live and float(live[1]) < 0.3, text
    assert re.search(r"live run: accuracy (9\d|100)\.\d%", text), text
    assert "largest at the peak:" in text and ", made by " in text, text
    svgs = outputs(nb, "image/svg+xml")
    assert any("Training loss, live" in svg for svg in svgs)
    assert any("Device memory while training" in svg and "Largest at the peak" in svg for svg in svgs)


def check_cnn(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    eager = re.search(r"eager: (\d+) steps, loss ([\d.]+) -> ([\d.]+), test accuracy ([\d.]+)%", text)
    compiled = re.search(r"compiled: (\d+) steps, loss ([\d.]+) -> ([\d.]+), test accuracy ([\d.]+)%.*"
                         r"largest loss difference to eager ([\d.e+-]+) in the first epoch", text)
    assert eager and compiled, text
    # The bar: 95% of the held-out digits, eager and compiled, with the same losses.
    assert float(eager[4]) >= 95 and float(compiled[4]) >= 95, (eager.group(0), compiled.group(0))
    assert float(compiled[5]) < 1e-3, compiled.group(0)
    assert any(svg.lstrip().startswith("<svg") and "compiled" in svg for svg in outputs(nb, "image/svg+xml"))
    assert any(png.startswith("iVBORw0KGgo") for png in outputs(nb, "image/png"))
    # The profile table of one eager step names the convolution and pooling ops.
    tables = [h for h in outputs(nb, "text/html") if "<table" in h]
    assert any("conv" in h and "pool" in h for h in tables), tables


def check_gpt(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    final = re.search(r"final loss: train ([\d.]+) \(last 20 steps\), held-out ([\d.]+); unigram entropy ([\d.]+) nats", text)
    assert final, text
    train, held, unigram = map(float, final.groups())
    # Well below what character frequencies alone give, on held-out text too.
    assert train < unigram - 1.0 and held < unigram - 0.5, final.group(0)
    cached = re.search(r"(\d+) characters written; largest difference between cached and full logits ([\d.e+-]+)", text)
    assert cached and int(cached[1]) > 20 and float(cached[2]) < 1e-3, text
    assert any(svg.lstrip().startswith("<svg") for svg in outputs(nb, "image/svg+xml"))
    tables = [h for h in outputs(nb, "text/html") if "<table" in h]
    # The decode step's ops as the model calls them: its projections and its attention.
    assert any("linear" in h and "attention" in h for h in tables), tables


def check_multi_device(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    streams = "\n".join(outputs(nb, "stream"))
    assert "data=1  cpu:2      cpu:3" in streams, streams
    matmul = re.search(r"each device holds \[4, 128\] of y's \[8, 256\]; largest difference to one device ([\d.e+-]+)", text)
    assert matmul and float(matmul[1]) < 1e-4, text
    assert 'y: P("data", "model") over Mesh {data: 2, model: 2} on cpu:0..3' in streams, streams
    summed = next((l for l in text.splitlines() if "[8, 256] -> [4, 256]" in l), "")
    assert "model" in summed and "all-reduce" in summed, text
    dp = re.search(r"data-parallel on 4 devices: loss ([\d.]+) -> ([\d.]+), accuracy ([\d.]+)%; "
                   r"largest loss difference to one device ([\d.e+-]+)", text)
    assert dp and float(dp[2]) < 0.5 * float(dp[1]) and float(dp[3]) > 90 and float(dp[4]) < 1e-3, text
    # The timelines draw a lane per device of the mesh.
    svgs = list(outputs(nb, "image/svg+xml"))
    assert any(all(f"cpu:{d}" in svg for d in range(4)) for svg in svgs)


EXPECTED = {
    "01-quickstart.ipynb": check_quickstart,
    "02-profiling.ipynb": check_profiling,
    "03-what-eager-costs.ipynb": check_costs,
    "04-training.ipynb": check_training,
    "05-cnn-digits.ipynb": check_cnn,
    "06-char-gpt.ipynb": check_gpt,
    "07-multi-device.ipynb": check_multi_device,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_and_shows_its_results(name):
    EXPECTED[name](run(name))
