"""PEFT's output for eager's LoRA test (tests/lora.rs): loads the base weights eager saved
(`base.safetensors`, transformers-style names) into the same tiny torch module, loads the
adapter directory eager wrote with `peft.PeftModel.from_pretrained`, and prints the output
for the input `x.json` as JSON, with the adapter's scaling and the LoRA keys PEFT loaded.

Usage: python3 peft_reference.py DIR (with DIR/base.safetensors, DIR/adapter, DIR/x.json).
Needs torch, safetensors and peft (tests/requirements-models.txt).
"""

import json
import os
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file

DIM, LAYERS = 8, 2


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, n, torch.nn.Linear(DIM, DIM))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attn()


class Body(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(LAYERS)])


class Tiny(torch.nn.Module):
    """The module of tests/lora.rs: per layer x + o(tanh(q(x)) * v(x) + k(x))."""

    def __init__(self):
        super().__init__()
        self.model = Body()

    def forward(self, x):
        for layer in self.model.layers:
            a = layer.self_attn
            x = x + a.o_proj(torch.tanh(a.q_proj(x)) * a.v_proj(x) + a.k_proj(x))
        return x


def main():
    d = sys.argv[1]
    model = Tiny()
    model.load_state_dict(load_file(os.path.join(d, "base.safetensors")))
    peft_model = PeftModel.from_pretrained(model, os.path.join(d, "adapter"))
    peft_model.eval()
    with open(os.path.join(d, "x.json")) as f:
        x = torch.tensor(json.load(f), dtype=torch.float32)
    with torch.no_grad():
        y = peft_model(x)
    loaded = sorted(k for k, _ in peft_model.named_parameters() if "lora_" in k)
    q = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    json.dump({"y": y.reshape(-1).tolist(), "lora_keys": loaded, "scaling": q.scaling["default"],
               "peft": __import__("peft").__version__}, sys.stdout)


if __name__ == "__main__":
    main()
