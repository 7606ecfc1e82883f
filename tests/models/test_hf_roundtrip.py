"""Interop of issue 28, item 4: a Llama-architecture model trained from scratch in eager and
saved as a Hugging Face directory loads in transformers (from PyPI), which generates the same
greedy tokens and computes the same logits as eager (eager's own `generate` example reading the
saved directory back); a byte-level BPE trained in eager (with Hugging Face's `tokenizers` crate)
loads in transformers and encodes and decodes text to the same ids.

torch and transformers are imported plainly: CI installs them (tests/requirements-models.txt),
and a broken install fails here instead of skipping."""

import json
import os
import subprocess

import numpy as np
import pytest
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "target", "release", "examples", "finetune_and_save")
GENERATE = os.path.join(ROOT, "target", "release", "examples", "generate")
TOKENIZER = os.path.join(ROOT, "models", "tests", "fixtures", "llama")


@pytest.mark.parametrize("tokenizer", ["fixture", "trained"])
def test_eager_trained_model_loads_and_generates_in_transformers(tmp_path, tokenizer):
    out = tmp_path / "eager-llama"
    # "trained": the example trains its own BPE on the README and saves it with the model.
    tok_args = ["--tokenizer", TOKENIZER] if tokenizer == "fixture" else []
    subprocess.run([EXAMPLE, *tok_args, "--out", str(out), "--steps", "30"], check=True, timeout=900)
    eager = json.loads((out / "eager_greedy.json").read_text())
    assert eager["losses"][-1] < eager["losses"][0], "training lowered the loss"
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = tok(eager["prompt"], return_tensors="pt").input_ids
    assert ids[0].tolist() == eager["prompt_ids"]
    assert tok(eager["sample"], add_special_tokens=False).input_ids == eager["sample_ids"]
    assert tok.decode(eager["sample_ids"]) == eager["sample"]
    if tokenizer == "trained":
        assert len(tok) == 384 and (tok.bos_token, tok.eos_token, tok.pad_token) == ("<s>", "</s>", "<pad>")
    n = len(eager["greedy"])
    gen = model.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=tok.pad_token_id)
    assert gen[0, ids.shape[1]:].tolist() == eager["greedy"]
    # The prompt's logits: eager, loading the saved directory back, against transformers.
    logits_npy, tokens_json = tmp_path / "eager_logits.npy", tmp_path / "eager_tokens.json"
    subprocess.run([GENERATE, "--model", str(out), "--prompt", eager["prompt"], "--temperature", "0",
                    "--max-new-tokens", str(n), "--logits-out", str(logits_npy), "--tokens-out", str(tokens_json)],
                   check=True, timeout=900, stdout=subprocess.DEVNULL)
    assert json.loads(tokens_json.read_text()) == eager["greedy"], "eager reloaded generates as it did in training"
    eager_logits = np.load(logits_npy)
    with torch.no_grad():
        hf_logits = model(ids).logits[0].float().numpy()
    assert eager_logits.shape == hf_logits.shape == (len(eager["prompt_ids"]), len(tok)), (eager_logits.shape,
                                                                                           hf_logits.shape)
    np.testing.assert_allclose(eager_logits, hf_logits, rtol=1e-4, atol=1e-4)
