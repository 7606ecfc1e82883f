"""torch's side of eager's whole-model autocast tests (tests/autocast_models.rs) and bench
(examples/autocast_bench.rs): the digits CNN and the char GPT of eager-bench, written with
torch.nn as tests/common/models.rs writes them with eager::nn (the same parameter names).

Test: python3 autocast_models_reference.py < request.json > answer.json. The request names
the model ("cnn" or "gpt"), a safetensors file with its initial parameters (eager's names)
and its batches ("data.x" [steps, B, ...], "data.y" [steps, B, ...]) and the optimizer's
settings. The answer has two runs from those weights, "bf16" under torch.autocast("cpu",
bfloat16) and "f32" without; each, per step: the loss, its dtype, the logits' dtype, the
gradients' dtypes; and the parameters' dtypes after the last step. The optimizer zeroes the
gradients before each step's forward (as eager's test does after reading them).

Bench: python3 autocast_models_reference.py --bench [--seconds S] prints, per model, the
training steps/s in f32 and under torch.autocast("cpu", bfloat16) (eager-bench's batch
sizes; 2 threads, as the peers' bench runs torch; medians of 3 windows of each, alternating).
Needs torch and safetensors (tests/requirements-models.txt).
"""

import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 64, 32, 64, 4, 2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(WIDTH, 3 * WIDTH)
        self.out_proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, HEADS, d // HEADS).transpose(1, 2) for z in self.in_proj(x).split(d, dim=-1))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(o.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(WIDTH, eps=1e-5), Attention()
        self.ln2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.fc, self.proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm, self.head = nn.LayerNorm(WIDTH, eps=1e-5), nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        h = self.tok(idx) + self.pos(torch.arange(CONTEXT))
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(128, 10))


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def logits_and_loss(name, net, x, y):
    if name == "gpt":
        logits = net(x)
        return logits, F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    logits = net(x)
    return logits, F.cross_entropy(logits, y)


def optimizer(name, params, req):
    if name == "gpt":
        return torch.optim.AdamW(params, lr=req["lr"], betas=(0.9, 0.999), eps=1e-8,
                                 weight_decay=req["weight_decay"])
    return torch.optim.SGD(params, lr=req["lr"], momentum=req["momentum"])


def train(req, tensors, low):
    name = req["model"]
    net = Gpt() if name == "gpt" else cnn()
    sd = net.state_dict()
    assert sorted(sd) == sorted(k for k in tensors if not k.startswith("data.")), sorted(sd)
    net.load_state_dict({k: tensors[k] for k in sd})
    opt = optimizer(name, net.parameters(), req)
    out = []
    for x, y in zip(tensors["data.x"], tensors["data.y"]):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            logits, loss = logits_and_loss(name, net, x, y)
        loss.backward()
        out.append({"loss": loss.item(), "loss_dtype": str(loss.dtype), "logits_dtype": str(logits.dtype),
                    "grad_dtypes": sorted({str(p.grad.dtype) for p in net.parameters()})})
        opt.step()
    return {"steps": out, "param_dtypes": sorted({str(p.dtype) for p in net.parameters()})}


def both(req):
    from safetensors.torch import load_file
    tensors = load_file(req["file"])
    return {"bf16": train(req, tensors, True), "f32": train(req, tensors, False)}


def bench(seconds):
    torch.set_num_threads(2)
    torch.manual_seed(1)
    cases = {
        "mlp": (mlp(), torch.rand(64, 784), torch.arange(64) % 10, dict(lr=0.05, momentum=0.9)),
        "cnn": (cnn(), torch.rand(64, 1, 8, 8), torch.arange(64) % 10, dict(lr=0.05, momentum=0.9)),
        "gpt": (Gpt(), torch.randint(0, VOCAB, (16, CONTEXT)), torch.randint(0, VOCAB, (16, CONTEXT)),
                dict(lr=3e-3, weight_decay=0.01)),
    }
    for name, (net, x, y, cfg) in cases.items():
        opt = optimizer(name, net.parameters(), cfg)

        def step(mode):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
                _, loss = logits_and_loss(name, net, x, y)
            loss.backward()
            opt.step()
            return loss.item()

        rates = {"f32": [], "bf16": []}
        for mode in rates:
            for _ in range(10):
                step(mode)
        for _ in range(3):  # windows of the two alternate, as the eager side's do
            for mode in rates:
                n, t0 = 0, time.perf_counter()
                while n < 5 or time.perf_counter() - t0 < seconds:
                    step(mode)
                    n += 1
                rates[mode].append(n / (time.perf_counter() - t0))
        rates = {m: statistics.median(r) for m, r in rates.items()}
        print(json.dumps({"model": name, "torch": torch.__version__, "f32_steps_per_s": rates["f32"],
                          "bf16_steps_per_s": rates["bf16"]}), flush=True)


def main():
    if "--bench" in sys.argv:
        seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 2.0
        bench(seconds)
        return
    req = json.load(sys.stdin)
    json.dump({"torch": torch.__version__, "result": both(req)}, sys.stdout)


if __name__ == "__main__":
    main()
