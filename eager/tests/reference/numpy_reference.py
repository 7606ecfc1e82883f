#!/usr/bin/env python3
"""NumPy side of eager's differential test (eager/tests/differential.rs).

Usage: numpy_reference.py DIR

DIR/cases.json lists cases: {"id", "op", "attrs", "inputs": [{"file", "dtype", "shape"}]}.
Each input file holds raw little-endian values; bf16 inputs come as float32 (NumPy has no
bf16; the values are exact). Writes DIR/results.json: per case id either
{"file", "dtype", "shape"} (the expected values, raw: floats as float64, ints as int64 or
uint64, bools as uint8), optionally "mag_file" (the same op on |x|, for the error bound of
sums and products), or {"error": "..."} when NumPy refuses the case (eager must refuse too).

Semantics follow torch: f16/bf16 inputs are computed in float32 and rounded once (by the
Rust side, to the result dtype); integer division truncates toward zero (torch's
rounding_mode="trunc", which is what eager's div of ints does).
"""

import json
import math
import os
import sys

import numpy as np

NP = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
    "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u32": np.uint32, "u64": np.uint64,
    "bool": np.bool_,
}
HALF = ("f16", "bf16")


def load(d, spec):
    raw = np.fromfile(os.path.join(d, spec["file"]), dtype=np.dtype(NP[spec["dtype"]]).newbyteorder("<"))
    a = raw.reshape(spec["shape"])
    # Half precision computes in float32, as torch does on the CPU.
    return a.astype(np.float32) if spec["dtype"] in HALF else a


def trunc_div(a, b):
    if a.dtype.kind == "f":
        return a / b
    if (b == 0).any():
        raise ValueError("integer division by zero is not compared (eager documents XLA's values)")
    with np.errstate(over="ignore"):
        q = np.abs(a) // np.abs(b) if a.dtype.kind == "i" else a // b
        if a.dtype.kind == "i":
            q = np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)
    return q


def softmax(x, dim):
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def log_softmax(x, dim):
    s = x - np.max(x, axis=dim, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=dim, keepdims=True))


def axes(attrs, x):
    dims = attrs.get("dims") or list(range(x.ndim))
    return tuple(d % max(x.ndim, 1) for d in dims)


def reduce(fn, x, attrs):
    ax = axes(attrs, x)
    keep = attrs.get("keepdim", False)
    if fn == "sum":
        return np.sum(x, axis=ax, keepdims=keep, dtype=x.dtype)
    if fn == "mean":
        return np.mean(x, axis=ax, keepdims=keep, dtype=x.dtype)
    if fn in ("max", "min"):
        if any(x.shape[a] == 0 for a in ax):
            raise ValueError(f"{fn} of an empty dim")
        return (np.max if fn == "max" else np.min)(x, axis=ax, keepdims=keep)
    raise KeyError(fn)


def arg(fn, x, attrs):
    f = np.argmax if fn == "argmax" else np.argmin
    dim = attrs.get("dim")
    keep = attrs.get("keepdim", False)
    if dim is None:
        r = f(x.reshape(-1))
        return np.reshape(r, [1] * x.ndim) if keep else np.asarray(r)
    return f(x, axis=dim, keepdims=keep)


def gelu(x):
    k = x.dtype.type(np.sqrt(2.0 / np.pi))
    return x.dtype.type(0.5) * x * (1 + np.tanh(k * (x + x.dtype.type(0.044715) * x * x * x)))


def cross_entropy(logits, targets):
    ls = log_softmax(logits, 1)
    n, c = logits.shape
    if ((targets < 0) | (targets >= c)).any():
        raise IndexError("target out of range")
    return -np.mean(ls[np.arange(n), targets])


def erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def stable_order(v, d, descending):
    """The positions sorting `v` along `d` stably, NaN as the largest value (as torch)."""
    exact = int if v.dtype.kind in "iub" else float

    def lane_order(lane):
        def key(i):
            nan = lane.dtype.kind == "f" and np.isnan(lane[i])
            value = 0 if nan else exact(lane[i])
            return (0 if nan else 1, -value) if descending else (1 if nan else 0, value)
        return np.array(sorted(range(len(lane)), key=key), dtype=np.int64)

    if v.shape[d] == 0:
        return np.zeros(v.shape, np.int64)
    return np.apply_along_axis(lane_order, d, v)


def clamp(x, lo, hi):
    # torch: max(x, lo) then min(., hi), so lo > hi gives hi; NaN stays NaN. A bound outside an
    # int dtype's range bounds nothing on that side (the true clamp), not a wrapped value.
    def bound(v):
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            v = min(max(v, info.min), info.max)
        return np.asarray(v).astype(x.dtype)
    if lo is not None:
        x = np.maximum(x, bound(lo))
    if hi is not None:
        x = np.minimum(x, bound(hi))
    return x
def conv(x, w, a):
    """torch's convolution (NCHW input, OIHW weight) in plain NumPy: a sum over kernel taps."""
    stride, pads, dil, groups = a["stride"], a["padding"], a["dilation"], a["groups"]
    if pads == "same" and any(s != 1 for s in stride):
        raise ValueError("padding='same' is not supported for strided convolutions")  # torch's words
    ns = x.ndim - 2
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    if c != groups * w.shape[1] or o % groups:
        raise ValueError(f"channels {c} vs weight {w.shape} with groups {groups}")
    xp = np.pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in pads])
    out = [(xp.shape[2 + d] - dil[d] * (k[d] - 1) - 1) // stride[d] + 1 for d in range(ns)]
    if any(s <= 0 for s in out):
        raise ValueError("kernel larger than the padded input")
    r = np.zeros((n, o, *out), dtype=x.dtype)
    cg, og = c // groups, o // groups
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for tap in np.ndindex(*k):
            win = tuple(slice(tap[d] * dil[d], tap[d] * dil[d] + stride[d] * (out[d] - 1) + 1, stride[d])
                        for d in range(ns))
            patch = xs[(slice(None), slice(None)) + win]
            r[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, ws[(slice(None), slice(None)) + tap])
    return r


def conv_transpose(x, w, a):
    """torch's conv_transpose (weight [C_in, C_out/groups, *k]): every input element adds
    x * w at output position i*stride + tap*dilation - padding."""
    stride, pad, opad, dil, groups = a["stride"], a["padding"], a["output_padding"], a["dilation"], a["groups"]
    ns = x.ndim - 2
    n, cin = x.shape[:2]
    coutg, k = w.shape[1], w.shape[2:]
    size = [(x.shape[2 + d] - 1) * stride[d] + dil[d] * (k[d] - 1) + 1 + opad[d] for d in range(ns)]
    full = np.zeros((n, coutg * groups, *size), dtype=x.dtype)
    cg = cin // groups
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for tap in np.ndindex(*k):
            win = tuple(slice(tap[d] * dil[d], tap[d] * dil[d] + stride[d] * (x.shape[2 + d] - 1) + 1, stride[d])
                        for d in range(ns))
            full[(slice(None), slice(g * coutg, (g + 1) * coutg)) + win] += np.einsum(
                "nc...,co->no...", xs, ws[(slice(None), slice(None)) + tap])
    out = [size[d] - 2 * pad[d] for d in range(ns)]
    return full[(slice(None), slice(None)) + tuple(slice(pad[d], pad[d] + out[d]) for d in range(ns))]


def pool2d(x, a, kind):
    """Max or average pooling over the last two dims; padding is -inf (max) or zeros that
    count in the mean (torch's count_include_pad=True)."""
    k, s, p = a["kernel"], a["stride"], a["padding"]
    fill = -np.inf if kind == "max" else 0
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(p[0], p[0]), (p[1], p[1])], constant_values=fill)
    out = [(xp.shape[x.ndim - 2 + d] - k[d]) // s[d] + 1 for d in range(2)]
    taps = [xp[..., i:i + s[0] * (out[0] - 1) + 1:s[0], j:j + s[1] * (out[1] - 1) + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]
    if kind == "max":
        return np.max(np.stack(taps), axis=0)
    return np.sum(np.stack(taps), axis=0, dtype=x.dtype) / x.dtype.type(k[0] * k[1])


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "sin": np.sin, "cos": np.cos, "relu": lambda x: np.maximum(x, x.dtype.type(0)), "gelu": gelu,
    "erf": erf, "log1p": np.log1p, "expm1": np.expm1, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "sign": np.sign, "square": np.square,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu_exact": lambda x: x.dtype.type(0.5) * x * (1 + erf(x / x.dtype.type(np.sqrt(2.0)))),
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": trunc_div, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
}


def compute(op, a, x):
    """The expected result of `op` with attributes `a` on inputs `x`."""
    if op in UNARY:
        return UNARY[op](x[0])
    if op in BINARY:
        if op == "pow" and x[0].dtype.kind in "iu" and (x[1] < 0).any():
            raise ValueError("integers to negative integer powers")
        return BINARY[op](x[0], x[1])
    if op in ("cumsum", "cumprod"):
        fn = np.cumsum if op == "cumsum" else np.cumprod
        v = x[0].reshape(1) if x[0].ndim == 0 else x[0]
        # In the input's dtype (NumPy would widen ints); halves arrive as float32 already.
        return fn(v, axis=a["dim"], dtype=v.dtype).reshape(x[0].shape)
    if op in ("argsort", "sort_values", "topk_values", "topk_indices"):
        d = a["dim"]
        v = x[0].reshape(1) if x[0].ndim == 0 else x[0]
        idx = stable_order(v, d, a.get("descending", a.get("largest", False)))
        if op.startswith("topk"):
            idx = np.take(idx, np.arange(a["k"]), axis=d)
        if op in ("argsort", "topk_indices"):
            return idx.reshape(x[0].shape) if x[0].ndim == 0 else idx
        return np.take_along_axis(v, idx, axis=d).reshape(idx.shape if x[0].ndim else ())
    if op == "rms_norm":
        axes = tuple(range(x[0].ndim - a["dims"], x[0].ndim))
        return x[0] / np.sqrt(np.mean(x[0] * x[0], axis=axes, keepdims=True) + x[0].dtype.type(1e-5))
    if op == "rms_norm_w":
        return x[0] / np.sqrt(np.mean(x[0] * x[0], axis=-1, keepdims=True) + 1e-5) * x[1]
    if op == "layer_norm":
        mean = x[0].mean(axis=-1, keepdims=True)
        var = ((x[0] - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x[0] - mean) / np.sqrt(var + 1e-5) * x[1] + x[2]
    if op == "batch_norm":
        col = (1, -1) + (1,) * (x[0].ndim - 2)
        over = tuple(d for d in range(x[0].ndim) if d != 1)
        if a["training"]:
            mean = x[0].mean(axis=over, keepdims=True)
            var = ((x[0] - mean) ** 2).mean(axis=over, keepdims=True)
        else:
            mean, var = x[3].reshape(col), x[4].reshape(col)
        return (x[0] - mean) / np.sqrt(var + 1e-5) * x[1].reshape(col) + x[2].reshape(col)
    if op == "group_norm":
        n, c = x[0].shape[:2]
        g = x[0].reshape(n, a["groups"], -1)
        mean = g.mean(axis=2, keepdims=True)
        var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
        return ((g - mean) / np.sqrt(var + g.dtype.type(1e-5))).reshape(x[0].shape)
    if op == "sdpa":
        q, k, v = x[0], x[1], x[2]
        s = q @ np.swapaxes(k, -1, -2) / q.dtype.type(np.sqrt(q.shape[-1]))
        keep = np.ones(s.shape[-2:], bool)
        if a["mask"]:
            keep &= x[3].astype(bool)
        if a["causal"]:
            keep &= np.tril(np.ones(s.shape[-2:], bool))
        s = np.where(keep, s, s.dtype.type(-np.inf))
        # A row with nothing to attend has weights 0 (torch 2.9's answer), not 0/0.
        w = np.where(keep.any(-1, keepdims=True), softmax(s, -1), s.dtype.type(0))
        return w @ v
    if op == "one_hot":
        n = a["classes"]
        if (x[0] < 0).any() or (x[0] >= n).any():
            raise IndexError("class out of range")
        return (x[0][..., None] == np.arange(n)).astype(np.int64)
    if op == "masked_fill":
        return np.where(x[1], np.asarray(a["value"]).astype(x[0].dtype), x[0])
    if op == "clamp":
        return clamp(x[0], a["min"], a["max"])
    if op == "tril":
        return np.tril(x[0], a["diagonal"])
    if op == "triu":
        return np.triu(x[0], a["diagonal"])
    if op == "where":
        return np.where(x[0], x[1], x[2])
    if op == "matmul":
        return np.matmul(*transposed(x, a))
    if op in ("sum", "mean", "max", "min"):
        return reduce(op, x[0], a)
    if op in ("argmax", "argmin"):
        return arg(op, x[0], a)
    if op == "softmax":
        return softmax(x[0], a["dim"])
    if op == "log_softmax":
        return log_softmax(x[0], a["dim"])
    if op == "reshape":
        return x[0].reshape(a["shape"])
    if op == "permute":
        return np.transpose(x[0], a["perm"])
    if op == "broadcast_to":
        return np.broadcast_to(x[0], a["shape"])
    if op == "slice":
        idx = [slice(None)] * x[0].ndim
        idx[a["dim"]] = slice(a["start"], a["end"], a["step"])
        return x[0][tuple(idx)]
    if op == "cat":
        return np.concatenate(x, axis=a["dim"])
    if op == "index_select":
        # np.take: negative indices wrap, out-of-range ones raise IndexError.
        return np.take(x[0], x[1], axis=a["dim"])
    if op == "gather":
        # torch.gather: the index may be smaller than the input outside `dim`.
        d, idx = a["dim"], x[1]
        part = x[0][tuple(slice(0, n) if k != d else slice(None) for k, n in enumerate(idx.shape))]
        return np.take_along_axis(part, idx.astype(np.int64), axis=d)
    if op == "scatter_add":
        d, idx = a["dim"], x[1].astype(np.int64)
        out = x[0].copy()
        grid = list(np.indices(idx.shape))
        grid[d] = idx
        src = x[2][tuple(slice(0, n) for n in idx.shape)]
        np.add.at(out, tuple(grid), src)
        return out
    if op == "take_along_dim":
        # np.take_along_axis broadcasts the input and the indices outside the axis.
        return np.take_along_axis(x[0], x[1].astype(np.int64), axis=a["dim"])
    if op == "index_add":
        out = x[0].copy()
        where = [slice(None)] * out.ndim
        where[a["dim"]] = x[1].astype(np.int64)
        np.add.at(out, tuple(where), x[2])
        return out
    if op == "embedding":
        return np.take(x[0], x[1], axis=0)
    if op == "cast":
        return x[0].astype(NP[a["to"]]) if a["to"] not in HALF else x[0].astype(np.float32)
    if op == "arange":
        return np.arange(a["start"], a["end"], a["step"]).astype(NP[a["dtype"]])
    if op == "eye":
        return np.eye(a["n"], a["m"], dtype=NP[a["dtype"]])
    if op == "full":
        return np.full(a["shape"], a["value"], dtype=NP[a["dtype"]])
    if op in ("conv1d", "conv2d"):
        return conv(x[0], x[1], a)
    if op == "conv_transpose2d":
        return conv_transpose(x[0], x[1], a)
    if op in ("max_pool2d", "avg_pool2d"):
        return pool2d(x[0], a, op[:3])
    if op == "cross_entropy":
        return cross_entropy(x[0], x[1])
    if op == "mse":
        return np.mean((x[0] - x[1]) ** 2)
    raise KeyError(f"no reference for op {op!r}")


def transposed(x, a):
    """matmul's operands as read: each with its last two dims swapped where lhs_t / rhs_t."""
    flip = [a.get("lhs_t", False), a.get("rhs_t", False)]
    return [np.swapaxes(v, -1, -2) if t else v for v, t in zip(x, flip)]


def magnitude(op, a, x):
    """The op on |x| for sums and products: the scale of their rounding error."""
    ax = [np.abs(v.astype(np.float64)) if v.dtype.kind == "f" else v for v in x]
    if op in ("sum", "mean"):
        return reduce(op, ax[0], a)
    if op == "matmul":
        return np.matmul(*transposed(ax, a))
    if op in ("conv1d", "conv2d"):
        return conv(ax[0], ax[1], a)
    if op == "conv_transpose2d":
        return conv_transpose(ax[0], ax[1], a)
    if op == "avg_pool2d":
        return pool2d(ax[0], a, "avg")
    if op in ("softmax", "log_softmax", "cross_entropy", "mse"):
        return None
    return None


def write(d, name, r):
    r = np.asarray(r)
    if r.dtype.kind == "f":
        r = r.astype("<f8")
    elif r.dtype.kind == "i":
        r = r.astype("<i8")
    elif r.dtype.kind == "u":
        r = r.astype("<u8")
    elif r.dtype.kind == "b":
        r = r.astype("u1")
    else:
        raise TypeError(f"unexpected result dtype {r.dtype}")
    np.ascontiguousarray(r).tofile(os.path.join(d, name))
    return {"file": name, "dtype": r.dtype.str, "shape": list(r.shape)}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    with open(os.path.join(d, "cases.json")) as f:
        cases = json.load(f)["cases"]
    results = {}
    for c in cases:
        x = [load(d, s) for s in c["inputs"]]
        if c.get("attrs", {}).get("f64"):
            # Against the exact result: every float input in float64.
            x = [v.astype(np.float64) if v.dtype.kind == "f" else v for v in x]
        try:
            with np.errstate(all="ignore"):
                r = compute(c["op"], c.get("attrs", {}), x)
                m = magnitude(c["op"], c.get("attrs", {}), x) if r.dtype.kind == "f" else None
        except (IndexError, ValueError) as e:
            results[str(c["id"])] = {"error": f"{type(e).__name__}: {e}"}
            continue
        entry = write(d, f"{c['id']}.out", r)
        if m is not None:
            entry["mag_file"] = write(d, f"{c['id']}.mag", m)["file"]
        results[str(c["id"])] = entry
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump({"numpy": np.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
