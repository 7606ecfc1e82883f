"""torch's answers for eager's mixed-precision tests (tests/mixed_precision.rs, tests/autocast.rs).

Usage: python3 amp_reference.py < request.json > answer.json, where the request names a
scenario and gives its inputs. Scenarios:
- "clip": clip_grad_norm_ of the given gradients for each norm type: the total norm and the
  clipped gradients.
- "scaler": a scripted sequence of (already scaled) gradients through GradScaler.unscale_,
  clip_grad_norm_(max_norm), GradScaler.step(SGD) and update(): per step the scale after
  update, whether the step ran, the norm, and the parameters.
- "autocast_mlp": steps of an MLP (Linear, ReLU, Linear, cross_entropy) under
  torch.autocast("cpu", bfloat16) with SGD from the given weights and batches: per step the
  loss, the logits' dtype and each gradient's dtype.
Needs torch (tests/requirements-models.txt).
"""

import json
import sys

import torch


def t(v):
    return torch.tensor(v, dtype=torch.float32)


def num(x):
    x = float(x)
    return x if x == x and abs(x) != float("inf") else str(x)


def clip(req):
    out = []
    for norm_type in req["norm_types"]:
        params = [torch.nn.Parameter(t(v)) for v in req["params"]]
        for p, g in zip(params, req["grads"]):
            p.grad = t(g)
        nt = float("inf") if norm_type == "inf" else norm_type
        total = torch.nn.utils.clip_grad_norm_(params, req["max_norm"], nt)
        out.append({"norm": num(total), "grads": [[num(x) for x in p.grad.tolist()] for p in params]})
    return out


def scaler(req):
    params = [torch.nn.Parameter(t(v)) for v in req["params"]]
    opt = torch.optim.SGD(params, lr=req["lr"])
    s = torch.amp.GradScaler("cpu", init_scale=req["init_scale"], growth_factor=req["growth_factor"],
                             backoff_factor=req["backoff_factor"], growth_interval=req["growth_interval"])
    s.scale(torch.ones(()))  # the scale is made lazily, by the first scale()
    steps = []
    for grads in req["steps"]:
        for p, g in zip(params, grads):
            p.grad = torch.tensor([float(x) for x in g], dtype=torch.float32)
        s.unscale_(opt)
        found = sum(v.item() for v in s._found_inf_per_device(opt).values())
        norm = torch.nn.utils.clip_grad_norm_(params, req["max_norm"])
        s.step(opt)
        s.update()
        steps.append({"scale": s.get_scale(), "stepped": found == 0, "norm": num(norm),
                      "params": [[num(x) for x in p.detach().tolist()] for p in params]})
    return steps


def autocast_mlp(req):
    w1, b1, w2, b2 = (torch.nn.Parameter(t(v).reshape(s)) for v, s in zip(req["weights"], req["shapes"]))
    opt = torch.optim.SGD([w1, b1, w2, b2], lr=req["lr"])
    out = []
    for x, y in req["batches"]:
        x, y = t(x), torch.tensor(y, dtype=torch.int64)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.relu(torch.nn.functional.linear(x, w1, b1))
            logits = torch.nn.functional.linear(h, w2, b2)
            loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        out.append({"loss": loss.item(), "loss_dtype": str(loss.dtype), "logits_dtype": str(logits.dtype),
                    "grad_dtypes": [str(p.grad.dtype) for p in (w1, b1, w2, b2)]})
        opt.step()
    return out


def main():
    req = json.load(sys.stdin)
    fn = {"clip": clip, "scaler": scaler, "autocast_mlp": autocast_mlp}[req["scenario"]]
    json.dump({"torch": torch.__version__, "result": fn(req)}, sys.stdout)


if __name__ == "__main__":
    main()
