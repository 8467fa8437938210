"""What the whole-step and whole-run checks observe of a training run: the private update as one flat float64
vector, public outputs flattened into {dotted name: leaf}, and their comparison within a precision's ulps
(docs/whole_step.md, docs/whole_run.md). torch is imported lazily."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Mapping

__all__ = ["compare_public", "flat_grads", "grad_dtype", "leaf_diff", "norm", "public_leaves", "training_state",
           "write_grads"]


def flat_grads(params):
    import torch

    parts = []
    for p in params:
        g = p.grad
        parts.append(torch.zeros(p.numel(), dtype=torch.float64) if g is None
                     else g.detach().reshape(-1).to(device="cpu", dtype=torch.float64))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def grad_dtype(params):
    for p in params:
        if p.grad is not None:
            return p.grad.dtype
    return params[0].dtype if params else None


def write_grads(params, flat) -> None:
    import torch

    off = 0
    with torch.no_grad():
        for p in params:
            k = p.numel()
            v = flat[off:off + k].reshape(p.shape).to(dtype=p.dtype, device=p.device)
            if p.grad is None:
                p.grad = v.clone()
            else:
                p.grad.copy_(v)
            off += k


def norm(v) -> float:
    import torch

    return float(torch.linalg.vector_norm(v)) if v.numel() else 0.0


def public_leaves(prefix: str, value, out: dict | None = None, _depth: int = 0) -> dict:
    """Flatten a public output into {dotted name: leaf}: mappings by ".key", sequences by "[i]", dataclasses by
    field; tensors (cloned to CPU), numbers, strings, bools and None are leaves; anything else is its `repr`."""
    out = {} if out is None else out
    try:
        import torch
        tensor_type = torch.Tensor
    except ImportError:  # pragma: no cover - torch is a dependency of every whole-step binding
        tensor_type = ()
    if _depth > 24:
        out[prefix] = repr(value)
    elif tensor_type and isinstance(value, tensor_type):
        out[prefix] = value.detach().to("cpu").clone()
    elif isinstance(value, Mapping):
        for k, v in value.items():
            public_leaves(f"{prefix}.{k}" if prefix else str(k), v, out, _depth + 1)
    elif isinstance(value, (list, tuple)):
        if not value:
            out[prefix] = type(value).__name__ + "()"
        for i, v in enumerate(value):
            public_leaves(f"{prefix}[{i}]", v, out, _depth + 1)
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            public_leaves(f"{prefix}.{f.name}", getattr(value, f.name), out, _depth + 1)
    elif value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        out[prefix] = value
    elif hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        out[prefix] = value.item()   # numpy scalar
    elif hasattr(value, "__array__"):
        import numpy as np

        out[prefix] = torch.as_tensor(np.asarray(value))
    else:
        out[prefix] = repr(value)
    return out


def leaf_diff(a, b, ulps: int, eps_default: float):
    """None when equal within `ulps` ulps (0 = bit-identical), else a short description."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{type(a).__name__} vs {type(b).__name__}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
        if not a.is_floating_point() and not a.is_complex():
            return None if torch.equal(a, b) else "integer values differ"
        x, y = a.to(torch.float64), b.to(torch.float64)
        nan = torch.isnan(x) | torch.isnan(y)
        if not torch.equal(torch.isnan(x), torch.isnan(y)):
            return "NaN positions differ"
        x, y = x[~nan], y[~nan]
        if ulps == 0:
            if torch.equal(x, y):
                return None
        else:
            eps = torch.finfo(a.dtype).eps
            scale = torch.maximum(x.abs(), y.abs())
            inf_ok = torch.equal(torch.isinf(x), torch.isinf(y)) and torch.equal(x[torch.isinf(x)], y[torch.isinf(y)])
            fin = torch.isfinite(x) & torch.isfinite(y)
            if inf_ok and bool(((x - y).abs()[fin] <= ulps * eps * scale[fin]).all()):
                return None
        fin = torch.isfinite(x) & torch.isfinite(y)
        return f"max |Δ| = {float((x - y).abs()[fin].max()) if bool(fin.any()) else math.inf:.3g}"
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return None
        if a == b or (ulps and abs(a - b) <= ulps * eps_default * max(abs(a), abs(b))):
            return None
        return f"{a!r} vs {b!r}"
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                       and not isinstance(a, bool) and not isinstance(b, bool)):
        return f"{a!r} vs {b!r}"
    return None if a == b else f"{a!r} vs {b!r}"


def compare_public(A: dict, B: dict, ulps: int, eps: float) -> dict:
    out = {}
    for key in sorted(set(A) | set(B)):
        if key not in A or key not in B:
            out[key] = "only in D'" if key not in A else "only in D"
            continue
        d = leaf_diff(A[key], B[key], ulps, eps)
        if d is not None:
            out[key] = d
    return out


def training_state(model, optimizer, prefix: str = "", out: dict | None = None) -> dict:
    """The public state of a model and its optimizer as {dotted name: leaf}: every named parameter and buffer, every
    param-group entry ("params" as parameter names) and the optimizer state keyed by parameter name (position in
    the param groups for a parameter outside the model)."""
    out = {} if out is None else out
    named = list(model.named_parameters())
    names = {id(p): k for k, p in named}
    for k, p in named:
        out[f"{prefix}parameters.{k}"] = p.detach().to("cpu").clone()
    for k, buf in model.named_buffers():
        out[f"{prefix}buffers.{k}"] = buf.detach().to("cpu").clone()
    for gi, group in enumerate(optimizer.param_groups):
        for key, v in group.items():
            if key == "params":
                out[f"{prefix}optimizer.param_groups[{gi}].params"] = tuple(names.get(id(p), "?") for p in v)
            else:
                public_leaves(f"{prefix}optimizer.param_groups[{gi}].{key}", v, out)
    positional = {id(p): f"group{gi}.param{j}" for gi, g in enumerate(optimizer.param_groups)
                  for j, p in enumerate(g["params"])}
    for p, state in optimizer.state.items():
        public_leaves(f"{prefix}optimizer.state[{names.get(id(p)) or positional.get(id(p), '?')}]", state, out)
    return out
