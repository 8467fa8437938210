"""Pure tensor functions of Algorithm 1 (docs/dpgrpo.md; the proof steps they carry: docs/dpgrpo_proof.md).

Every function validates its public constants and raises `InvalidParameter` naming the parameter. Private
values (rewards, log-probabilities, gradients) are never a reason to raise: non-finite gradients are mapped
to zero by the fixed rule of `clip_flat`. Shape and type errors (programming errors) raise as well.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable

import torch

from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["DEFAULT_C_ADV", "ParamSpace", "clip_flat", "completion_mask", "flat_norm", "flatten_grads",
           "group_advantages", "k3_kl", "poisson_coins", "privatize", "prompt_loss", "public_step_entry",
           "unflatten_into"]

DEFAULT_C_ADV = 1e-4  # c of eq. (2)


# --------------------------------------------------------------------------------------------- helpers

def _generator(name: str, generator) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise InvalidParameter(name, generator, "a torch.Generator (dedicated to this randomness source)")
    return generator


def _tensor(name: str, x, *, ndim: int | None = None, floating: bool = False) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InvalidParameter(name, type(x).__name__, "a torch.Tensor")
    if ndim is not None and x.dim() != ndim:
        raise InvalidParameter(name, tuple(x.shape), f"a {ndim}-dimensional tensor")
    if floating and not x.is_floating_point():
        raise InvalidParameter(name, x.dtype, "a floating-point tensor")
    return x


# ---------------------------------------------------------------------------------------------- line 2

def poisson_coins(n, q, generator: torch.Generator) -> torch.Tensor:
    """Algorithm 1, line 2: c_{t,i} ~ Bernoulli(q) independently for every slot i ∈ [n].

    Exactly `torch.rand(n, dtype=float64, generator=generator) < q`, drawn for all n slots (absent and canary
    slots included) every round; `generator` is the dedicated CPU coins generator. Returns BoolTensor[n].
    """
    n = val.count("n", n)
    q = val.sampling_rate("q", q)
    generator = _generator("generator", generator)
    return torch.rand(n, dtype=torch.float64, generator=generator) < q


# ---------------------------------------------------------------------------------------------- line 6

def group_advantages(rewards, c=DEFAULT_C_ADV) -> torch.Tensor:
    """Algorithm 1, line 6 (advantages), eq. (2): A_g = (r_g − μ) / (s + c) for one prompt's group.

    μ is the group mean and s the sample standard deviation with the G − 1 denominator, computed in float64
    from this prompt's own G rewards only (no statistic shared across prompts, which would break (A2)). Requires
    G ≥ 2 and c > 0. A constant group (all rewards equal) gives exactly 0. Returns a float64 Tensor[G].
    """
    rewards = _tensor("rewards", rewards, ndim=1)
    if rewards.dtype == torch.bool or rewards.is_complex():
        raise InvalidParameter("rewards", rewards.dtype, "an integer or floating-point tensor")
    G = rewards.shape[0]
    if G < 2:
        raise InvalidParameter("G", G, "an integer >= 2 (group size: rewards must have at least 2 entries)")
    c = val.positive("c", c)
    r = rewards.detach().to(torch.float64)
    if not bool(torch.isfinite(r).all()):
        raise InvalidParameter("rewards", rewards.tolist(), "finite numbers")
    if bool((r == r[0]).all()):
        return torch.zeros(G, dtype=torch.float64, device=r.device)
    mu = r.sum() / G
    s = torch.sqrt(((r - mu) ** 2).sum() / (G - 1))
    return (r - mu) / (s + c)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Algorithm 1, line 6 (KL term of eq. (7)): the k3 estimator K = exp(ref − u) − (ref − u) − 1 ≥ 0.

    `logp` = u = log π_θ, `ref_logp` = log π_ref (per token). Gradient: ∇K = (1 − exp(ref − u))·∇u.
    """
    logp = _tensor("logp", logp, floating=True)
    ref_logp = _tensor("ref_logp", ref_logp, floating=True)
    if logp.shape != ref_logp.shape:
        raise InvalidParameter("ref_logp", tuple(ref_logp.shape), f"shape {tuple(logp.shape)} (same as logp)")
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def _chunk(rollout_slice, G: int) -> slice:
    if rollout_slice is None:
        return slice(0, G)
    if not isinstance(rollout_slice, slice) or rollout_slice.step not in (None, 1):
        raise InvalidParameter("rollout_slice", rollout_slice, "None or a contiguous slice start:stop")
    start, stop, _ = rollout_slice.indices(G)
    if not 0 <= start < stop <= G:
        raise InvalidParameter("rollout_slice", rollout_slice, f"a non-empty contiguous slice within 0:{G}")
    return slice(start, stop)


def prompt_loss(logp, ref_logp, mask, advantages, beta, rollout_slice=None) -> torch.Tensor:
    """Algorithm 1, line 6: the per-prompt loss ℓ_i of eq. (7), or its part for a chunk of rollouts.

        ℓ_i = −(1/G)·Σ_{g∈S} (1/L_g)·Σ_k m_{g,k}·[ρ_{g,k}·A_g − β·K_{g,k}],  ρ = exp(u − sg(u))

    ρ has value 1 and gradient ∇u (one optimizer step per rollout batch); K is `k3_kl`. Token mean within
    each completion (L_g = Σ_k m_{g,k} ≥ 1), then divided by the full group size G = len(advantages), so the
    losses of chunks partitioning {0..G−1} sum to the full loss. S = `rollout_slice` (None = all G).

    `advantages` is the full float64 Tensor[G] (cast to logp's dtype). `logp`, `ref_logp` and `mask` have
    either G rows (the chunk's rows are selected) or exactly the chunk's |S| rows (memory-saving form).
    `ref_logp` is treated as a constant (detached). Returns a scalar of logp's dtype.
    """
    advantages = _tensor("advantages", advantages, ndim=1)
    G = advantages.shape[0]
    if G < 2:
        raise InvalidParameter("G", G, "an integer >= 2 (group size: advantages must have at least 2 entries)")
    beta = val.nonnegative("beta", beta)
    S = _chunk(rollout_slice, G)
    rows = S.stop - S.start
    logp = _tensor("logp", logp, ndim=2, floating=True)
    ref_logp = _tensor("ref_logp", ref_logp, ndim=2, floating=True)
    mask = _tensor("mask", mask, ndim=2)
    if logp.shape[0] == G and rows != G:
        logp = logp[S]
        if ref_logp.shape[0] == G:
            ref_logp = ref_logp[S]
        if mask.shape[0] == G:
            mask = mask[S]
    if logp.shape[0] != rows:
        raise InvalidParameter("logp", tuple(logp.shape), f"{G} or {rows} rows (group size or chunk size)")
    if ref_logp.shape != logp.shape:
        raise InvalidParameter("ref_logp", tuple(ref_logp.shape), f"shape {tuple(logp.shape)} (same as logp)")
    if mask.shape != logp.shape:
        raise InvalidParameter("mask", tuple(mask.shape), f"shape {tuple(logp.shape)} (same as logp)")
    m = mask.to(logp.dtype)
    if not bool(((m == 0) | (m == 1)).all()):
        raise InvalidParameter("mask", "non-binary values", "entries in {0, 1}")
    lengths = m.sum(dim=1)
    if not bool((lengths >= 1).all()):
        raise InvalidParameter("mask", lengths.tolist(), "at least one completion token per row (L_g >= 1)")
    adv = advantages[S].detach().to(device=logp.device, dtype=logp.dtype)
    rho = torch.exp(logp - logp.detach())
    kl = k3_kl(logp, ref_logp.detach())
    per_token = rho * adv[:, None] - beta * kl
    per_completion = (per_token * m).sum(dim=1) / lengths
    return -per_completion.sum() / G


def completion_mask(token_ids, eos_id) -> torch.Tensor:
    """Algorithm 1, lines 4–6: m_{g,k} = 1 up to and including the first EOS, 0 after it.

    Rows without EOS count all L_max positions. Returns an int64 Tensor[G, L_max] of 0/1.
    """
    token_ids = _tensor("token_ids", token_ids, ndim=2)
    if token_ids.is_floating_point() or token_ids.dtype == torch.bool or token_ids.is_complex():
        raise InvalidParameter("token_ids", token_ids.dtype, "an integer tensor")
    if token_ids.shape[1] < 1:
        raise InvalidParameter("token_ids", tuple(token_ids.shape), "at least one position (L_max >= 1)")
    eos_id = val.count("eos_id", eos_id, minimum=0)
    is_eos = (token_ids == eos_id).to(torch.int64)
    eos_before = torch.cumsum(is_eos, dim=1) - is_eos  # EOS strictly before position k
    return (eos_before == 0).to(torch.int64)


# ---------------------------------------------------------------------------------------------- line 7

class ParamSpace:
    """The trainable tensors of a model in a fixed order (sorted qualified names), Algorithm 1, line 7.

    `ParamSpace(model)` takes the parameters with `requires_grad`; `ParamSpace(named)` takes an iterable of
    (name, Parameter) pairs. `layout_sha256` hashes the ordered (name, shape) list (dtype excluded, so the
    float64 check build and the fp32 production build share a layout); it goes into the run artifact.
    """

    def __init__(self, source):
        if isinstance(source, torch.nn.Module):
            named = [(k, p) for k, p in source.named_parameters() if p.requires_grad]
        elif isinstance(source, Iterable):
            named = list(source)
        else:
            raise InvalidParameter("params", type(source).__name__, "a torch.nn.Module or (name, tensor) pairs")
        names = [k for k, _ in named]
        if len(set(names)) != len(names):
            raise InvalidParameter("params", names, "unique parameter names")
        if not named:
            raise InvalidParameter("params", [], "at least one trainable tensor")
        named.sort(key=lambda kv: kv[0])
        self.names: tuple[str, ...] = tuple(k for k, _ in named)
        self.params: tuple[torch.Tensor, ...] = tuple(p for _, p in named)
        self.shapes: tuple[tuple[int, ...], ...] = tuple(tuple(p.shape) for p in self.params)
        self.numels: tuple[int, ...] = tuple(p.numel() for p in self.params)
        self.dim: int = sum(self.numels)
        layout = json.dumps([[k, list(s)] for k, s in zip(self.names, self.shapes)], separators=(",", ":"))
        self.layout_sha256: str = hashlib.sha256(layout.encode("utf-8")).hexdigest()

    def __len__(self) -> int:
        return len(self.params)

    def zero_grad(self) -> None:
        """Set every .grad to None (done before each prompt's backward)."""
        for p in self.params:
            p.grad = None


def _space(params) -> ParamSpace:
    return params if isinstance(params, ParamSpace) else ParamSpace(params)


def flatten_grads(params, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Algorithm 1, line 7 (input of the clip): concatenate the .grad of every tensor in ParamSpace order.

    A tensor without .grad contributes zeros. `dtype` defaults to the first parameter's dtype (fp32 in
    production, float64 in the checks). Returns a 1-D Tensor[space.dim].
    """
    space = _space(params)
    dtype = dtype or space.params[0].dtype
    device = space.params[0].device
    parts = []
    for p in space.params:
        g = p.grad
        parts.append(torch.zeros(p.numel(), dtype=dtype, device=device) if g is None
                     else g.detach().reshape(-1).to(dtype=dtype, device=device))
    return torch.cat(parts)


def unflatten_into(vector, params) -> None:
    """Algorithm 1, line 9 (before `optimizer.step()`): write the flat vector into .grad, ParamSpace order."""
    space = _space(params)
    vector = _tensor("vector", vector, ndim=1, floating=True)
    if vector.numel() != space.dim:
        raise InvalidParameter("vector", vector.numel(), f"{space.dim} entries (the ParamSpace dimension)")
    offset = 0
    for p, k in zip(space.params, space.numels):
        p.grad = vector[offset:offset + k].detach().reshape(p.shape).to(dtype=p.dtype, device=p.device).clone()
        offset += k


def clip_flat(v, C, *, nonprivate: bool = False, norm: float | None = None) -> torch.Tensor:
    """Algorithm 1, line 7: clip_C(v) = v·min(1, C/‖v‖₂) over the whole flat vector.

    The norm is accumulated in float64 (a float32 vector with entries near 1e30 does not overflow). A vector
    with a NaN/±inf entry, or whose norm is not finite, becomes the zero vector (fixed rule, no error); a zero
    vector stays zero. C must be positive and finite; C = inf (no clipping, non-finite rule still applied) is
    accepted only with `nonprivate=True` (non-private reference arm). Returns a tensor of v's dtype/device.
    `norm`: `flat_norm(v)` when the caller has just computed it for this very v (the trainer's pre-clip norm),
    so it is not computed twice; None computes it here.
    """
    v = _tensor("v", v, ndim=1, floating=True)
    if isinstance(C, (int, float)) and not isinstance(C, bool) and C == math.inf and nonprivate:
        C = math.inf
    else:
        C = val.positive("C", C)
    norm = flat_norm(v) if norm is None else float(norm)
    if not math.isfinite(norm):
        return torch.zeros_like(v.detach())
    if norm > C:   # factor as torch forms C / norm: reciprocal, then times C
        return (v.detach().to(torch.float64) * ((1.0 / norm) * C)).to(v.dtype)
    return v.detach().clone()                   # factor 1: the float64 round trip returns v's own bits


def flat_norm(v) -> float:
    """‖v‖₂ accumulated in float64: exactly `float(torch.linalg.vector_norm(v.to(torch.float64)))` (the reduction
    casts its input to float64 itself), without a float64 copy of v held by the caller."""
    return float(torch.linalg.vector_norm(v.detach(), dtype=torch.float64))


# ---------------------------------------------------------------------------------------------- line 8

def privatize(S, sigma, C, q, n, generator: torch.Generator, *, nonprivate: bool = False) -> torch.Tensor:
    """Algorithm 1, line 8: ĝ = (S + z)/(q·n) with z ~ N(0, σ²C²·I) drawn on S's device and dtype.

    `S` is the sum of clipped contributions; `generator` is the dedicated noise generator (on S's device);
    the noise gets standard deviation σ·C before the division, and the divisor is the public q·n, never the
    realised batch size. σ = 0 (no noise drawn; returns S/(q·n)) and C = inf (only with σ = 0) are accepted
    only with `nonprivate=True` (non-private arm, checks).
    """
    S = _tensor("S", S, ndim=1, floating=True)
    sigma = val.nonnegative("sigma", sigma)
    if sigma == 0 and not nonprivate:
        raise InvalidParameter("sigma", sigma, "(0, inf); sigma = 0 only with nonprivate=True")
    if isinstance(C, (int, float)) and not isinstance(C, bool) and C == math.inf and nonprivate and sigma == 0:
        C = math.inf
    else:
        C = val.positive("C", C)
    q = val.sampling_rate("q", q)
    n = val.count("n", n)
    generator = _generator("generator", generator)
    divisor = q * n
    if sigma == 0:
        return S / divisor
    z = torch.randn(S.shape, generator=generator, dtype=S.dtype, device=S.device) * (sigma * C)
    return (S + z) / divisor


def public_step_entry(t: int, optimizer, params, before, g_hat, applied: bool) -> dict:
    """One round's public telemetry: functions of ĝ_t, θ and public settings only (the step index, the optimizer's
    learning rate, ‖ĝ_t‖, ‖θ_t − θ_{t−1}‖ and whether a non-finite ĝ_t was skipped)."""
    with torch.no_grad():
        delta = math.sqrt(sum(float(((p.detach() - b).double() ** 2).sum()) for p, b in zip(params, before)))
        update_norm = float(torch.linalg.vector_norm(g_hat.detach().double()))
    return {"t": t, "lr": optimizer.param_groups[0]["lr"], "update_norm": update_norm, "param_delta_norm": delta,
            "skipped_nonfinite_update": not applied}
