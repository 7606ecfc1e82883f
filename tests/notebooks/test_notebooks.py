"""Every notebook in notebooks/ runs top to bottom under nbclient on the eager kernel, and its
key outputs are there. With EAGER_REFRESH_NOTEBOOKS=1 the executed notebooks (outputs
included) are written back, which is how the committed outputs are made."""
import json
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
    # The batch-size slider: a widget view, and (in the notebook's saved widget state, as nbclient
    # stores it from the comm messages) an Output holding the first run's line and chart.
    views = list(outputs(nb, "application/vnd.jupyter.widget-view+json"))
    assert len(views) == 1 and views[0]["version_major"] == 2, views
    assert "IntSlider(batch = 128, 8..=256)" in text, text
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert views[0]["model_id"] in states
    [shown] = [m["state"]["outputs"] for m in states.values() if m["model_name"] == "OutputModel"]
    printed = "".join(o.get("text", "") for o in shown if o["output_type"] == "stream")
    assert re.search(r"batch 128: loss [\d.]+ after 5 eager steps; \d+ executables compiled, \d+ loaded from disk, "
                     r"\d+ found in memory", printed), shown
    assert any(o.get("data", {}).get("image/png", "").startswith("iVBORw0KGgo") for o in shown), shown


def check_training(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    eager = re.search(r"eager: loss ([\d.]+) -> ([\d.]+), accuracy ([\d.]+)%", text)
    compiled = re.search(r"compiled: loss ([\d.]+) -> ([\d.]+), accuracy ([\d.]+)%, (\d+) op dispatches"
                         r".*largest loss difference to eager ([\d.e+-]+) over the first 10 steps, ([\d.e+-]+) over all",
                         text)
    assert eager and compiled, text
    # Both runs learn, and give the same numbers.
    assert float(eager[2]) < 0.5 * float(eager[1]) and float(eager[3]) > 90, eager.group(0)
    assert float(compiled[2]) < 0.5 * float(compiled[1]) and float(compiled[3]) > 90, compiled.group(0)
    # The same numbers: to float rounding at first; over 150 Adam steps a last-bit difference (a
    # fresh cache's quick-tier code in the eager run) grows to a few 1e-3, never to a different run.
    assert float(compiled[5]) < 1e-5 and float(compiled[6]) < 3e-2, compiled.group(0)
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
                   r"largest loss difference to one device ([\d.e+-]+) over the first 10 steps, ([\d.e+-]+) over all", text)
    assert dp and float(dp[2]) < 0.5 * float(dp[1]) and float(dp[3]) > 90, text
    # The same losses to rounding: four devices sum in another order, which 150 Adam steps amplify.
    assert float(dp[4]) < 1e-5 and float(dp[5]) < 3e-2, dp.group(0)
    # Mixtral's experts over 4 devices: the single-device output, tokens exchanged by all-to-all.
    moe = re.search(r"experts' w1 \[8, 128, 64\], \[2, 128, 64\] on each device; 32 tokens, largest difference to one "
                    r"device ([\d.e+-]+); collectives in the layer's program: (\[.*\])", text)
    assert moe and float(moe[1]) < 1e-4 and moe[2].count("all-to-all") >= 2, text
    # The timelines draw a lane per device of the mesh.
    svgs = list(outputs(nb, "image/svg+xml"))
    assert any(all(f"cpu:{d}" in svg for d in range(4)) for svg in svgs)


def check_hf_llama(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    streams = "\n".join(outputs(nb, "stream"))
    # The preload's hidden variable, dropped when `:dep eager-models` rebuilds eager, is not news.
    assert "__eager_warmup" not in streams + text, streams
    tokens = re.search(r"README: (\d+) characters, (\d+) tokens \(([\d.]+) characters a token\); vocabulary (\d+)", text)
    assert tokens and int(tokens[4]) == 512 and int(tokens[2]) < int(tokens[1]) / 1.5, text
    # Hidden 128, 4 layers, 4 query and 2 key/value heads of 32, SwiGLU 344, untied head, vocab 512.
    assert "857216 parameters in 39 tensors" in text, text
    assert "model.layers.0.self_attn.k_proj.weight: [64, 128]" in streams, streams
    # Learned from scratch: from about uniform (ln 512 = 6.24) to well below 1 nat a token.
    loss = re.search(r"loss ([\d.]+) \(first 10 steps\) -> ([\d.]+) \(last 10\); uniform guessing: ([\d.]+)", text)
    assert loss and float(loss[1]) > 5.0 and float(loss[2]) < 1.0 and abs(float(loss[3]) - 6.238) < 1e-3, text
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert re.search(rf"^{re.escape(name)} +[\d.]+ K?M?i?B$", streams, re.M), streams
    # Loaded back by AutoModel: the same logits, to the bit.
    assert re.search(r"loaded in \d+ ms \(llama\); logits of a 48-token prompt: 0 of 24576 values differ", text), text
    # The streamed text, as its display's last update left it: the prompt and 100 tokens after it.
    assert re.search(r"^100 tokens in [\d.]+ s", text.replace('"', ""), re.M), text
    assert any(t.startswith("It comes with a REPL") and len(t) > 150 for t in outputs(nb, "text/plain")), text
    # Prefill against decode: a static cache means no decode step after the first compiles or
    # loads anything; fused and compiled steps dispatch a handful of programs, eager hundreds.
    rows = {(m[1], m[2]): [float(v) for v in m.groups()[2:]] for m in re.finditer(
        r"^(eager|fused|compiled) +(prefill|decode step 1|decode steps 2-31, each) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$",
        streams, re.M)}
    assert len(rows) == 9, streams
    for mode in ("eager", "fused", "compiled"):
        assert rows[(mode, "decode steps 2-31, each")][1] == 0.0, rows
    assert rows[("eager", "decode steps 2-31, each")][0] > 100, rows
    assert rows[("fused", "decode steps 2-31, each")][0] < 20 and rows[("compiled", "decode steps 2-31, each")][0] < 20, rows
    svgs = list(outputs(nb, "image/svg+xml"))
    assert any("Training loss, live" in svg for svg in svgs)
    assert any("Milliseconds per decode step" in svg and "compiled" in svg for svg in svgs)
    # The key/value cache: its tensors at the peak of the ledger, their size as computed.
    cache = re.search(r"key/value cache: 4 layers × keys and values × \[8, 2, (\d+), 32\] f32 = ([\d.]+ K?M?i?B)", streams)
    assert cache, streams
    assert f"f32[8, 2, {cache[1]}, 32]" in text, text
    # (format_bytes rounds to a tenth of its unit)
    assert abs(size_in_bytes(cache[2]) - 4 * 2 * 8 * 2 * int(cache[1]) * 32 * 4) <= 0.05 * (1 << 20), cache.group(0)
    # Each step writes the cache in place (donated): the peak holds it once, not a step's copy
    # beside it (which made it twice before).
    above = re.search(r"the peak of live device memory: [\d.]+ K?M?i?B, ([\d.]+ K?M?i?B) above what was live before", streams)
    assert above and size_in_bytes(above[1]) < 1.5 * size_in_bytes(cache[2]), streams
    assert any("batch-8 generation, the key/value cache" in svg and "Largest at the peak" in svg for svg in svgs)
    # Checkpoints of other families: each tiny fixture transformers made generates, greedily,
    # the 8 tokens transformers generated after its prompt.
    families = {m[1]: m for m in re.finditer(
        r"^(\w+) +(\d+) params  greedy \[(\d+(?:, \d+)*)\]  (.*)$", streams, re.M)}
    for family in ("qwen3", "gemma2", "gemma3_text", "phi3", "mistral", "mixtral", "qwen2_moe", "qwen3_moe", "gpt_neox"):
        line = families.get(family)
        assert line and line[4] == "= transformers" and len(line[3].split(", ")) == 8 and int(line[2]) > 0, (family, streams)
    assert "9 of 9 families generate transformers' greedy tokens" in text, text


def size_in_bytes(text):
    """`57.6 MiB`, `0 B` (eager::memory::format_bytes) as bytes."""
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def check_lora(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    streams = "\n".join(outputs(nb, "stream"))
    size = re.search(r"(\d+) parameters in (\d+) tensors", text)
    assert size and "blocks.0.q_proj.weight: [64, 64]" in streams and "blocks.0.v_proj.weight: [64, 64]" in streams, text
    pre = re.search(r"pretrained on the guide: loss ([\d.]+) -> ([\d.]+) \(last 20 steps\); on the held-out code ([\d.]+)", text)
    assert pre and float(pre[2]) < float(pre[1]) - 1.0, text
    # Rank 4 on q_proj and v_proj of both blocks: an A [4, 64] and a B [64, 4] each, all f32, and
    # nothing else trainable.
    lora = re.search(r"(\d+) adapted layers; trainable: (\d+) tensors, (\d+) of (\d+) parameters", text)
    assert lora and (int(lora[1]), int(lora[2]), int(lora[3])) == (4, 8, 4 * 2 * 4 * 64), text
    trainable = re.findall(r"^blocks\.(\d)\.(q_proj|v_proj)\.lora_(A|B)\.weight: \[(\d+), (\d+)\] f32$", streams, re.M)
    assert sorted(trainable) == sorted((b, m, ab, *(("4", "64") if ab == "A" else ("64", "4")))
                                       for b in "01" for m in ("q_proj", "v_proj") for ab in "AB"), streams
    # Both fine-tunings learn the new text: the held-out code's loss falls (measured 2.80 -> 2.64).
    runs = {m[1]: [float(v) for v in m.groups()[1:]] for m in re.finditer(
        r"(f32|bf16) ?: training loss ([\d.]+) \(first 10 steps\) -> ([\d.]+) \(last 10\); "
        r"held-out code ([\d.]+) -> ([\d.]+); ([\d.]+) steps/s", streams)}
    assert set(runs) == {"f32", "bf16"}, streams
    for first, last, held_before, held_after, speed in runs.values():
        assert held_before == float(pre[3]) and held_after < held_before - 0.05 and last < first and speed > 0, runs
    # bf16 autocast follows the f32 run from the same start, within a bf16 tolerance: 0.02 nats
    # per training step, 0.01 on the held-out loss (measured 0.002 and 0.001).
    gap = re.search(r"largest difference between the bf16 and f32 runs: training loss ([\d.]+), "
                    r"held-out loss ([\d.]+); the adapters stay f32 under autocast", text)
    assert gap and float(gap[1]) < 0.02 and float(gap[2]) < 0.01, text
    # What a step's forward keeps for its backward: no bf16 in f32; under autocast bf16 tensors,
    # some f32 still, and fewer bytes in all.
    kept = {m[1]: [size_in_bytes(v) for v in m.groups()[1:]] for m in re.finditer(
        r"^(f32|bf16) +run +([\d.]+ K?M?i?B) +([\d.]+ K?M?i?B) +([\d.]+ K?M?i?B)$", streams, re.M)}
    assert set(kept) == {"f32", "bf16"}, streams
    assert kept["f32"][0] > 0 and kept["f32"][1] == 0, kept
    assert kept["bf16"][0] > 0 and kept["bf16"][1] > 0 and kept["bf16"][2] < kept["f32"][2], kept
    svgs = list(outputs(nb, "image/svg+xml"))
    assert any("bf16 autocast, held-out code" in svg and "f32, training batch" in svg for svg in svgs)
    assert any("Device memory: LoRA fine-tuning, f32 then bf16" in svg and "Largest at the peak" in svg for svg in svgs)
    # The adapter in PEFT's format, PEFT's tensor names, read back to the same model.
    assert re.search(r"^adapter_config\.json  \d+ B$", streams, re.M), streams
    assert re.search(r"^adapter_model\.safetensors  [\d.]+ KiB$", streams, re.M), streams
    assert '"peft_type": "LORA"' in streams and '"r": 4,' in streams and '"lora_alpha": 8.0' in streams, streams
    saved = re.findall(r"^base_model\.model\.blocks\.(\d)\.(q_proj|v_proj)\.lora_(A|B)\.weight: \[(\d+), (\d+)\] f32$", streams, re.M)
    assert sorted(saved) == sorted(trainable), streams
    reloaded = re.search(r"reloaded onto a fresh copy of the base: held-out code loss ([\d.]+) \(the fine-tuned model: ([\d.]+)\)", text)
    assert reloaded and abs(float(reloaded[1]) - float(reloaded[2])) < 1e-4 and float(reloaded[1]) < float(pre[3]), text
    # The base weights: all of them checked, none changed, frozen, no gradient; the adapters moved.
    base = {m[1]: [float(v) for v in m.groups()[1:]] for m in re.finditer(
        r"(f32|bf16) run: (\d+) base tensors, (\d+) changed, (\d+) frozen, (\d+) with a gradient; "
        r"largest \|lora_B\| ([\d.]+)", text)}
    assert set(base) == {"f32", "bf16"}, text
    for tensors, changed, frozen, with_grad, lora_b in base.values():
        assert tensors == int(size[2]) and changed == 0 and frozen == tensors and with_grad == 0 and lora_b > 0.01, base


def check_serve(nb):
    text = "\n".join(outputs(nb, "text/plain"))
    streams = "\n".join(outputs(nb, "stream"))
    assert re.search(r"serving `readme-llama` at http://127\.0\.0\.1:\d+/v1: 8 slots of 256 positions", text), text
    assert "decode programs for batches [1, 2, 4, 8]" in text, text
    # 32 requests of 160 greedy tokens at once; the batch filled; greedy answers do not depend
    # on the batch.
    run = re.search(r"32 requests, (\d+) tokens in [\d.]+ s: \d+ tokens/s; up to (\d+) sequences decoded together; "
                    r"each prompt's four answers equal: (\w+)", text)
    assert run and 0 < int(run[1]) <= 32 * 160 and int(run[2]) > 1 and run[3] == "true", text
    # Serving compiled nothing: every program was ready before the first request.
    assert re.search(r"^\d+ programs run while serving: 0 compiled, 0 loaded, \d+ hits$", streams, re.M), streams
    # A structured reply that parses and fits its schema, and a named tool call whose arguments fit.
    m = re.search(r"^structured reply: (.*)$", streams, re.M)
    assert m, streams
    reply = json.loads(m[1])
    assert set(reply) == {"name", "stars", "interactive"} and 1 <= reply["stars"] <= 5, reply
    assert isinstance(reply["interactive"], bool) and len(reply["name"]) <= 12, reply
    m = re.search(r"^tool call: get_weather\((.*)\), finish_reason \"tool_calls\"$", streams, re.M)
    assert m, streams
    args = json.loads(m[1])
    assert args["city"] in ("Oslo", "Paris", "Lima") and 1 <= args["days"] <= 7, args
    assert any("serve_decode" in html for html in outputs(nb, "text/html")), "the profile table names serve_decode"
    # Two live charts and the timeline.
    assert len(list(outputs(nb, "image/svg+xml"))) >= 3
    # The 32 requests, the structured reply and the tool call.
    assert 'eager_serve_requests_total{outcome=\\"completed\\"} 34' in text, text
    assert "eager_serve_kv_blocks_in_use 0" in text, text


EXPECTED = {
    "01-quickstart.ipynb": check_quickstart,
    "02-profiling.ipynb": check_profiling,
    "03-what-eager-costs.ipynb": check_costs,
    "04-training.ipynb": check_training,
    "05-cnn-digits.ipynb": check_cnn,
    "06-char-gpt.ipynb": check_gpt,
    "07-multi-device.ipynb": check_multi_device,
    "08-hf-llama.ipynb": check_hf_llama,
    "09-bf16-lora.ipynb": check_lora,
    "10-serve.ipynb": check_serve,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_and_shows_its_results(name):
    EXPECTED[name](run(name))
