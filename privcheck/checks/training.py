"""Model-agnostic record-level checks V1–V13 of DP-SGD / DP-GRPO training (docs/dpgrpo.md).

Every check takes a `SuiteBindings` (user-supplied callables and fixtures; every field optional) and returns one
`CheckResult` of suite "dpgrpo" (V13, `precision_preflight`, returns one per rerun check, at float32 or
bfloat16, named `precision_preflight.<precision>.<check>`):

- a binding the check needs is missing → status "skipped" with the names of the missing fields (never "pass");
- a bound callable raises → status "error" with the exception text;
- otherwise "pass"/"fail" from the comparison with an *independent* reference (closed form, an independent
  transcription of the paper's equations, or the published Table VI / VII values), under the tolerance each
  check's docstring states and justifies.

This module never imports `mechanisms` (dependencies flow audits → mechanisms → privcheck) and imports torch
lazily, inside functions, so `privcheck.accounting` keeps working without torch.

Binding signatures (all tensors 1-D flat float vectors unless stated):

=========================  ===========================================================================
field                      signature
=========================  ===========================================================================
sample                     ``sample(n, q) -> BoolTensor[n]`` (the trainer's own coins generator)
advantages                 ``advantages(rewards: Tensor[G]) -> Tensor[G]`` (eq. (2))
prompt_loss                ``prompt_loss(logp[G,L], ref_logp[G,L], adv[G], mask[G,L], beta) -> scalar``
token_logprobs             ``token_logprobs(model, prompt_ids[P], completion_ids[G,L]) -> Tensor[G,L]``
record_gradient            ``record_gradient(item) -> Tensor[p]`` (unclipped)
record_loss_and_grad       ``record_loss_and_grad(item, chunk_size | None, C) -> (loss, grad, clipped)``
                           (clipped = the production contribution of `item` at clip norm C with that chunking)
contributions              ``contributions(items) -> list[Tensor[p]]`` (clipped, production path)
clipped_sum                ``clipped_sum(items, C) -> Tensor[p]`` (all present and sampled, no noise/division)
privatize                  ``privatize(S, *, sigma, C, q, n) -> Tensor[p]`` ((S + z)/(q·n))
noisy_update               ``noisy_update(items, *, sigma, C, q, n) -> Tensor[p]``
private_update/flat_update ``f(params: Tensor[p]) -> Tensor[p]`` (parameters after one step, see V4)
clip                       ``clip(v, C) -> Tensor``
make_randomness            ``make_randomness(seed=None, release=False) -> handle`` with ``handle.sample_coins(n,
                           q)``, ``handle.privatize(S, *, sigma, C, q, n)`` and ``handle.privacy_release: bool``
epsilon_pld / epsilon_rdp  ``f(q, sigma, T, delta) -> float | object with .value`` (RDP: optional
                           ``.details["order"]``)
calibrate_sigma            ``calibrate_sigma(q, T, delta, target_eps) -> float | object with .value``
=========================  ===========================================================================

Fixtures: ``items`` (≥ 3 base records; V3 uses the first 5), ``additions`` (real records for V3),
``make_gradient_record(v)``, ``perturb(item)`` (V6), ``constant_items`` ((all-correct, all-wrong) versions of one
record, V7), ``reference_record_gradient`` (``item -> Tensor`` with LoRA at the reference, V7), ``chunk_item``
(a record with G = 8, V8), ``initial_params`` (V4), ``model`` and ``logprob_cases`` (V1), metadata ``C``,
``q``, ``n``, ``sigma``, ``dim``, ``G``, ``beta``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from privcheck.artifacts.records import CheckResult
from privcheck.errors import InvalidParameter, PrivcheckError

SUITE = "dpgrpo"


class DropoutEnabled(PrivcheckError, ValueError):
    """A check was given a model with a dropout probability > 0 (breaks V4, V6, V7, V8: a random dropout
    mask makes one record's gradient differ between two evaluations, so no bit-identity comparison can hold)."""


class _Skip(Exception):
    """Raised inside a check when a binding it needs is missing."""


@dataclass
class SuiteBindings:
    """User-supplied callables and fixtures for the checks (docs/dpgrpo.md, "Pointing the checks at your own
    trainer"). Every field is optional."""

    # entry points
    sample: Callable | None = None
    advantages: Callable | None = None
    prompt_loss: Callable | None = None
    token_logprobs: Callable | None = None
    record_gradient: Callable | None = None
    record_loss_and_grad: Callable | None = None
    contributions: Callable | None = None
    clipped_sum: Callable | None = None
    privatize: Callable | None = None
    noisy_update: Callable | None = None
    private_update: Callable | None = None
    flat_update: Callable | None = None
    clip: Callable | None = None
    make_randomness: Callable | None = None
    epsilon_pld: Callable | None = None
    epsilon_rdp: Callable | None = None
    calibrate_sigma: Callable | None = None
    # fixtures
    items: Sequence | None = None
    additions: Sequence | None = None
    make_gradient_record: Callable | None = None
    perturb: Callable | None = None
    constant_items: Sequence | None = None
    reference_record_gradient: Callable | None = None
    chunk_item: Any = None
    initial_params: Any = None
    model: Any = None
    logprob_cases: Sequence | None = None
    # metadata
    C: float | None = None
    q: float | None = None
    n: int | None = None
    sigma: float | None = None
    dim: int | None = None
    G: int | None = None
    beta: float | None = None
    target: str = ""


# --------------------------------------------------------------------------------------------- helpers

def assert_no_dropout(model) -> None:
    """Raise `DropoutEnabled` if `model` has any dropout probability > 0 (modules or config attributes)."""
    if model is None:
        return
    import torch

    bad = []
    if isinstance(model, torch.nn.Module):
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.modules.dropout._DropoutNd) and mod.p > 0:
                bad.append(f"{name or type(mod).__name__}.p={mod.p}")
    config = getattr(model, "config", None)
    if config is not None:
        attrs = config.to_dict() if hasattr(config, "to_dict") else vars(config)
        for key, value in attrs.items():
            if ("drop" in key.lower()) and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and value > 0:
                bad.append(f"config.{key}={value}")
    if bad:
        raise DropoutEnabled("checks need every dropout probability to be 0 (random masks break bit identity); found: "
                             + ", ".join(bad[:8]))


def _need(b: SuiteBindings, *names: str) -> None:
    missing = [n for n in names if getattr(b, n) is None]
    if missing:
        raise _Skip("missing binding(s): " + ", ".join(missing))


def _value(x) -> float:
    return float(getattr(x, "value", x))


def _run(name: str, precision: str, reference: str, inputs: dict, fn: Callable[[], dict]) -> CheckResult:
    """`fn()` returns dict(passed, observed, expected, tolerance, message)."""
    start = time.perf_counter()
    try:
        out = fn()
        return CheckResult(name=name, suite=SUITE, passed=bool(out["passed"]), observed=out["observed"],
                           expected=out["expected"], tolerance=out["tolerance"], reference=reference,
                           inputs=inputs, message=out.get("message", ""), seconds=time.perf_counter() - start,
                           precision=precision)
    except _Skip as exc:
        return CheckResult(name=name, suite=SUITE, passed=False, observed=None, expected=None, tolerance=None,
                           reference=reference, inputs=inputs, message=f"skipped: {exc}",
                           seconds=time.perf_counter() - start, status="skipped", precision=precision)
    except DropoutEnabled:
        raise
    except Exception as exc:  # noqa: BLE001 - a raising callable is an "error" result, never a pass
        return CheckResult(name=name, suite=SUITE, passed=False, observed=None, expected=None, tolerance=None,
                           reference=reference, inputs=inputs,
                           message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}",
                           seconds=time.perf_counter() - start, status="error", precision=precision)


def _ref_clip(v, C):
    """Independent float64 transcription of clip_C (Algorithm 1, line 7): v·min(1, C/‖v‖), non-finite → 0."""
    import torch

    x = v.detach().to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        return torch.zeros_like(x)
    norm = math.sqrt(float((x * x).sum()))
    if not math.isfinite(norm):
        return torch.zeros_like(x)
    return x * (C / norm) if norm > C else x.clone()


def _f64(x):
    import torch

    return x.detach().to(torch.float64).reshape(-1)


def _max_abs(a, b) -> float:
    if a.numel() == 0:
        return 0.0
    return float((_f64(a) - _f64(b)).abs().max())


# ------------------------------------------------------------------------------------------------ V1

def _ref_advantages(rewards, c=1e-4):
    """Eq. (2), transcribed independently in float64 (TRL 0.15.2: (r − mean)/(std + 1e-4), std with G − 1)."""
    import torch

    r = rewards.detach().to(torch.float64)
    G = r.numel()
    mu = sum(float(x) for x in r) / G
    s = math.sqrt(sum((float(x) - mu) ** 2 for x in r) / (G - 1))
    return torch.tensor([(float(x) - mu) / (s + c) for x in r], dtype=torch.float64)


def _ref_loss_and_grad(logp, ref_logp, adv, mask, beta):
    """Eq. (7) (TRL 0.15.2 `GRPOTrainer.compute_loss`) with ρ = exp(u − sg(u)) = 1, in float64.

    per_token = −(ρ·A − β·K), K = e^{ref−u} − (ref−u) − 1; loss = mean_g( Σ_k m·per_token / Σ_k m ).
    ∂loss/∂u_{g,k} = −m_{g,k}/(G·L_g) · (A_g − β·(1 − e^{ref−u}))   (closed form, no autograd).
    """
    import torch

    u, ref = logp.detach().to(torch.float64), ref_logp.detach().to(torch.float64)
    m, A = mask.detach().to(torch.float64), adv.detach().to(torch.float64)
    G = u.shape[0]
    d = ref - u
    K = torch.exp(d) - d - 1
    per_token = -(A[:, None] - beta * K)
    L = m.sum(dim=1)
    value = float(((per_token * m).sum(dim=1) / L).mean())
    grad = -(m / (G * L[:, None])) * (A[:, None] - beta * (1 - torch.exp(d)))
    return value, grad


def _ref_token_logprobs(model, prompt_ids, completion_ids):
    """log_softmax of the temperature-1 logits, gathered at the completion positions (float64)."""
    import torch

    G, L = completion_ids.shape
    P = prompt_ids.shape[-1]
    prompt = prompt_ids.reshape(1, P).expand(G, P) if prompt_ids.dim() == 1 else prompt_ids
    ids = torch.cat([prompt, completion_ids], dim=1)
    with torch.no_grad():
        out = model(input_ids=ids)
    logits = getattr(out, "logits", out)
    logits = logits[:, P - 1:P - 1 + L].to(torch.float64)
    return torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def check_loss_reference(b: SuiteBindings, precision: str = "float64", *, seed: int = 0, trials: int = 12,
                         rtol: float = 1e-12) -> CheckResult:
    """V1 `loss_reference`: eqs. (2) and (7) against an independent float64 transcription of TRL 0.15.2.

    Random float64 inputs (G ∈ {4, 8}, right-padded masks with varied lengths, rewards in {0, 1} including
    constant groups, β ∈ {0, 0.04, 0.5}). Compares the loss value and ∂loss/∂logp (autograd on the binding
    against the closed form) and the binding's advantages against eq. (2); if `token_logprobs`, `model` and
    `logprob_cases` are bound, also the log-probabilities against log_softmax(logits) at temperature 1.
    Tolerance: |obs − ref| ≤ rtol·max(1, |ref|), rtol = 1e-12 (deterministic; no false-failure rate).
    """
    inputs = {"seed": seed, "trials": trials, "G": [4, 8], "rtol": rtol}

    def fn():
        _need(b, "prompt_loss", "advantages")
        import torch

        assert_no_dropout(b.model)
        gen = torch.Generator().manual_seed(seed)
        dv = dg = da = 0.0
        worst_rel = 0.0
        for t in range(trials):
            G = (4, 8)[t % 2]
            L = 3 + t % 5
            beta = (0.0, 0.04, 0.5)[t % 3]
            rewards = (torch.rand(G, generator=gen) < 0.5).to(torch.float64)
            if t % 4 == 3:
                rewards = torch.full((G,), float(t % 8 == 3), dtype=torch.float64)  # constant group
            lengths = torch.randint(1, L + 1, (G,), generator=gen)
            mask = (torch.arange(L)[None, :] < lengths[:, None]).to(torch.int64)
            logp = -torch.rand(G, L, generator=gen, dtype=torch.float64) * 4 - 0.01
            ref = logp + torch.randn(G, L, generator=gen, dtype=torch.float64) * 0.3
            adv_ref = _ref_advantages(rewards)
            adv_obs = b.advantages(rewards.clone())
            da = max(da, _max_abs(adv_obs, adv_ref))
            worst_rel = max(worst_rel, _max_abs(adv_obs, adv_ref) / max(1.0, float(adv_ref.abs().max())))
            v_ref, g_ref = _ref_loss_and_grad(logp, ref, adv_ref, mask, beta)
            u = logp.clone().requires_grad_(True)
            loss = b.prompt_loss(u, ref.clone(), adv_ref.clone(), mask.clone(), beta)
            (g_obs,) = torch.autograd.grad(loss, u, allow_unused=True)
            if g_obs is None:
                g_obs = torch.zeros_like(u)
            dv_t = abs(float(loss.detach()) - v_ref)
            dg_t = _max_abs(g_obs, g_ref)
            dv, dg = max(dv, dv_t), max(dg, dg_t)
            worst_rel = max(worst_rel, dv_t / max(1.0, abs(v_ref)), dg_t / max(1.0, float(g_ref.abs().max())))
        dl = None
        note = ""
        if b.token_logprobs is not None and b.model is not None and b.logprob_cases:
            dl = 0.0
            for prompt_ids, completion_ids in b.logprob_cases:
                ref_lp = _ref_token_logprobs(b.model, prompt_ids, completion_ids)
                obs_lp = b.token_logprobs(b.model, prompt_ids, completion_ids)
                d = _max_abs(obs_lp, ref_lp)
                dl = max(dl, d)
                worst_rel = max(worst_rel, d / max(1.0, float(ref_lp.abs().max())))
        else:
            note = "; token_logprobs not compared (needs token_logprobs, model and logprob_cases bindings)"
        observed = {"max_abs_diff_value": dv, "max_abs_diff_grad": dg, "max_abs_diff_advantages": da,
                    "max_abs_diff_logprobs": dl, "max_rel_diff": worst_rel}
        return {"passed": worst_rel <= rtol, "observed": observed, "expected": {"max_rel_diff": 0.0},
                "tolerance": {"rtol": rtol}, "message": f"worst relative difference {worst_rel:.3g}" + note}

    return _run("loss_reference", precision, "independent float64 transcription of eqs. (2) and (7) "
                "(TRL 0.15.2 GRPOTrainer formulas) and log_softmax of temperature-1 logits", inputs, fn)


# ------------------------------------------------------------------------------------------------ V2

def check_clip_contract(b: SuiteBindings, precision: str = "float64", *, seed: int = 0, n_dirs: int = 1000
                        ) -> CheckResult:
    """V2 `clip_contract`: clip(0) = 0 (no NaN); NaN/±inf inputs → 0; ‖v‖ ≤ C → bit-identical output;
    1,000 random directions with log10‖v‖ ~ U[−12, 12]: ‖out‖ ≤ C·(1 + 1e-10), cos(out, v) ≥ 1 − 1e-12.
    Reference: the closed-form contract of Algorithm 1, line 7. Deterministic (seeded); no false failures."""
    C = b.C if b.C is not None else 1.0
    dim = b.dim or 64
    inputs = {"C": C, "dim": dim, "n_dirs": n_dirs, "seed": seed}

    def fn():
        _need(b, "clip")
        import torch

        zero = torch.zeros(dim, dtype=torch.float64)
        out0 = b.clip(zero.clone(), C)
        zero_ok = bool(torch.isfinite(out0).all()) and bool((out0 == 0).all())
        bad_cases = []
        for k, val in enumerate((math.nan, math.inf, -math.inf)):
            v = torch.randn(dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + k))
            v[k % dim] = val
            bad_cases.append(v)
        big = torch.full((dim,), 1e300, dtype=torch.float64)  # finite entries, norm overflows to inf
        bad_cases.append(big)
        zeroed = 0
        for v in bad_cases:
            out = b.clip(v.clone(), C)
            zeroed += int(bool(torch.isfinite(out).all()) and bool((out == 0).all()))
        gen = torch.Generator().manual_seed(seed)
        max_ratio, min_cos, identical_ok, n_inside = 0.0, 1.0, True, 0
        for _ in range(n_dirs):
            d = torch.randn(dim, dtype=torch.float64, generator=gen)
            lognorm = float(torch.rand((), dtype=torch.float64, generator=gen)) * 24 - 12
            v = d / torch.linalg.vector_norm(d) * (10.0 ** lognorm)
            out = b.clip(v.clone(), C)
            o = _f64(out)
            norm_o = float(torch.linalg.vector_norm(o))
            norm_v = float(torch.linalg.vector_norm(v))
            max_ratio = max(max_ratio, norm_o / C if math.isfinite(norm_o) else math.inf)
            cos = float((o * v).sum()) / (norm_o * norm_v) if norm_o > 0 else -1.0
            min_cos = min(min_cos, cos if math.isfinite(cos) else -1.0)
            if norm_v <= C:
                n_inside += 1
                identical_ok &= bool(torch.equal(out, v))
        passed = (zero_ok and zeroed == len(bad_cases) and identical_ok and max_ratio <= 1 + 1e-10
                  and min_cos >= 1 - 1e-12)
        observed = {"max_norm_ratio": max_ratio, "min_cosine": min_cos, "nonfinite_cases_zeroed": zeroed,
                    "zero_case_ok": zero_ok, "inside_bit_identical": identical_ok, "n_inside": n_inside}
        expected = {"max_norm_ratio": "<= 1", "min_cosine": 1.0, "nonfinite_cases_zeroed": len(bad_cases),
                    "zero_case_ok": True, "inside_bit_identical": True}
        return {"passed": passed, "observed": observed, "expected": expected,
                "tolerance": {"max_norm_ratio": 1e-10, "min_cosine": 1e-12}, "message": str(observed)}

    return _run("clip_contract", precision, "closed form clip_C(v) = v·min(1, C/‖v‖), non-finite → 0 "
                "(Algorithm 1, line 7)", inputs, fn)


# ------------------------------------------------------------------------------------------------ V3

def check_sensitivity_add_remove(b: SuiteBindings, precision: str = "float64", *, seed: int = 0,
                                 n_base: int = 5, n_gradient_records: int = 20, tol: float = 1e-10,
                                 clip_norms: Sequence[str] = ("C=0.7", "C_bind", "C_mix")) -> CheckResult:
    """V3 `sensitivity_add_remove`: ‖clipped_sum(base ∪ {a}) − clipped_sum(base)‖/C ≤ 1 + 1e-10 for every
    addition `a` (real records from `additions`, 20 GradientRecords of norm C·e^{3Z}, one of norm 1e12, each
    inserted at a random position) and for the removal of every base item, at C = 0.7, C_bind = 0.25·min‖g‖
    (every real record clipped) and C_mix = median ‖g‖ (the last two need `record_gradient`). `clip_norms`
    selects a subset of these three labels (the bug zoo runs only the C at which a defect shows).
    Reference: the sensitivity bound ‖ḡ‖ ≤ C (Lemma 1). Deterministic; no false failures."""
    clip_norms = tuple(clip_norms)
    if not clip_norms or not set(clip_norms) <= {"C=0.7", "C_bind", "C_mix"}:
        raise InvalidParameter("clip_norms", clip_norms, "a non-empty subset of ('C=0.7', 'C_bind', 'C_mix')")
    inputs = {"seed": seed, "n_base": n_base, "n_gradient_records": n_gradient_records, "tol": tol,
              "clip_norms": list(clip_norms)}

    def fn():
        _need(b, "clipped_sum", "items", "make_gradient_record", "dim")
        import numpy as np
        import torch

        base = list(b.items)[:n_base]
        real_adds = list(b.additions or [])
        Cs = {"C=0.7": 0.7} if "C=0.7" in clip_norms else {}
        if b.record_gradient is not None and {"C_bind", "C_mix"} & set(clip_norms):
            norms = [float(torch.linalg.vector_norm(_f64(b.record_gradient(it)))) for it in base + real_adds
                     if not hasattr(it, "v")]
            norms = [x for x in norms if math.isfinite(x) and x > 0]
            if norms:
                if "C_bind" in clip_norms:
                    Cs["C_bind"] = 0.25 * min(norms)
                if "C_mix" in clip_norms:
                    Cs["C_mix"] = float(np.median(norms))
        if not Cs:
            raise _Skip("C_bind/C_mix need record_gradient and at least one real record with a nonzero gradient")
        rng = np.random.default_rng(seed)
        gen = torch.Generator().manual_seed(seed)
        worst, worst_kind, trials, per_c = -math.inf, None, 0, {}
        for label, C in Cs.items():
            adds = [("real", a) for a in real_adds]
            for _ in range(n_gradient_records):
                d = torch.randn(b.dim, dtype=torch.float64, generator=gen)
                scale = C * math.exp(3 * float(rng.standard_normal()))
                adds.append(("gradient_record", b.make_gradient_record(d / torch.linalg.vector_norm(d) * scale)))
            d = torch.randn(b.dim, dtype=torch.float64, generator=gen)
            adds.append(("adversarial_1e12", b.make_gradient_record(d / torch.linalg.vector_norm(d) * 1e12)))
            s_base = _f64(b.clipped_sum(list(base), C))
            worst_c = {"add": -math.inf, "remove": -math.inf}
            for kind, a in adds:
                pos = int(rng.integers(0, len(base) + 1))
                s = _f64(b.clipped_sum(base[:pos] + [a] + base[pos:], C))
                r = float(torch.linalg.vector_norm(s - s_base)) / C - 1
                r = r if math.isfinite(r) else math.inf
                trials += 1
                worst_c["add"] = max(worst_c["add"], r)
                if r > worst:
                    worst, worst_kind = r, kind
            for i in range(len(base)):
                s = _f64(b.clipped_sum(base[:i] + base[i + 1:], C))
                r = float(torch.linalg.vector_norm(s_base - s)) / C - 1
                r = r if math.isfinite(r) else math.inf
                trials += 1
                worst_c["remove"] = max(worst_c["remove"], r)
                if r > worst:
                    worst, worst_kind = r, "removal"
            per_c[label] = {"C": C, "max_ratio_minus_one_add": worst_c["add"],
                            "max_ratio_minus_one_remove": worst_c["remove"]}
        skipped = [c for c in clip_norms if c not in Cs]
        note = f"; {'/'.join(skipped)} not run (record_gradient not bound)" if skipped else ""
        observed = {"max_ratio_minus_one": worst, "per_C": per_c, "worst_item_kind": worst_kind,
                    "n_trials": trials}
        return {"passed": worst <= tol, "observed": observed, "expected": {"max_ratio_minus_one": "<= 0"},
                "tolerance": {"max_ratio_minus_one": tol},
                "message": f"worst ‖Δ sum‖/C − 1 = {worst:.3g} ({worst_kind}){note}"}

    return _run("sensitivity_add_remove", precision, "Lemma 1 sensitivity bound ‖ḡ_i‖ ≤ C (closed form)",
                inputs, fn)


# ------------------------------------------------------------------------------------------------ V4

def check_nonprivate_equivalence(b: SuiteBindings, precision: str = "float64", *, tol: float = 1e-12
                                 ) -> CheckResult:
    """V4 `nonprivate_equivalence`: one step of the trainer at q = 1, σ = 0, C = ∞ with plain SGD
    (`private_update`) equals one SGD step on (1/(n·G))·Σ_i Σ_g token-mean loss (`flat_update`), from the same
    `initial_params`. Tolerance: max |Δθ| ≤ 1e-12; the step must move the parameters (else the comparison is
    vacuous). Deterministic; no false failures."""
    def fn():
        _need(b, "private_update", "flat_update", "initial_params")
        assert_no_dropout(b.model)
        p0 = b.initial_params
        a = _f64(b.private_update(p0.detach().clone()))
        f = _f64(b.flat_update(p0.detach().clone()))
        diff = _max_abs(a, f)
        moved = _max_abs(f, p0)
        passed = diff <= tol and moved > 0
        return {"passed": passed, "observed": {"max_abs_param_diff": diff, "flat_step_size": moved},
                "expected": {"max_abs_param_diff": 0.0, "flat_step_size": "> 0"},
                "tolerance": {"max_abs_param_diff": tol},
                "message": f"max |Δθ| = {diff:.3g}; flat step moved parameters by {moved:.3g}"}

    return _run("nonprivate_equivalence", precision, "independent flat loss (1/(n·G))·Σ token-mean losses, "
                "one backward, same SGD step", {"tol": tol}, fn)


# ------------------------------------------------------------------------------------------------ V5

def check_poisson_sampling(b: SuiteBindings, precision: str = "float64", *, n: int = 6, q: float = 0.2,
                           calls: int = 20_000, freq_tol: float = 0.012, corr_tol: float = 0.035
                           ) -> CheckResult:
    """V5 `poisson_sampling`: n = 6, q = 0.2, 20,000 calls of the trainer's own sampler.

    Per-slot inclusion frequency: sd = sqrt(q(1−q)/N) = 0.00283, so 0.012 is 4.24 sd (two-sided 2.2e-5 per
    slot, 1.3e-4 for 6 slots). Off-diagonal correlation of indicators: sd ≈ 1/√N = 0.00707, 0.035 is 4.95 sd
    (7.4e-7 per pair, 1.1e-5 for 15 pairs). Total false-failure probability below 1e-3 (≈ 1.5e-4).
    Reference: independent Bernoulli(q) coins (Algorithm 1, line 2)."""
    inputs = {"n": n, "q": q, "calls": calls}

    def fn():
        _need(b, "sample")
        import numpy as np

        rows = np.empty((calls, n), dtype=np.float64)
        for t in range(calls):
            c = b.sample(n, q)
            arr = np.asarray(c.detach().cpu().numpy() if hasattr(c, "detach") else c).astype(np.float64)
            if arr.shape != (n,):
                raise ValueError(f"sample(n, q) returned shape {arr.shape}, expected ({n},)")
            rows[t] = arr
        freq = rows.mean(axis=0)
        max_freq = float(np.abs(freq - q).max())
        if np.any(rows.std(axis=0) == 0):
            max_corr = math.inf
        else:
            corr = np.corrcoef(rows, rowvar=False)
            max_corr = float(np.abs(corr[~np.eye(n, dtype=bool)]).max())
        passed = max_freq < freq_tol and max_corr < corr_tol
        observed = {"max_freq_error": max_freq, "max_offdiag_corr": max_corr,
                    "mean_batch_size": float(rows.sum(axis=1).mean())}
        return {"passed": passed, "observed": observed,
                "expected": {"max_freq_error": 0.0, "max_offdiag_corr": 0.0, "mean_batch_size": q * n},
                "tolerance": {"max_freq_error": freq_tol, "max_offdiag_corr": corr_tol},
                "message": str(observed)}

    return _run("poisson_sampling", precision, "independent Bernoulli(q) coins: binomial frequencies and "
                "zero correlations (closed form)", inputs, fn)


# ------------------------------------------------------------------------------------------------ V6

def check_record_isolation(b: SuiteBindings, precision: str = "float64") -> CheckResult:
    """V6 `record_isolation`: (a) `record_gradient(i)` is bit-identical before and after evaluating `j` and
    `perturb(j)`; (b) `contributions([i, j, k])` and `contributions([i, perturb(j), k])` agree bit for bit on
    i and k. Precondition: the perturbation changes j's own gradient. Reference: (A2) record isolation.
    Deterministic; no false failures."""
    def fn():
        _need(b, "items", "perturb")
        if b.record_gradient is None and b.contributions is None:
            raise _Skip("missing binding(s): record_gradient and contributions (need at least one)")
        import torch

        assert_no_dropout(b.model)
        if len(b.items) < 3:
            raise ValueError("items must hold at least 3 records for V6")
        i, j, k = list(b.items)[:3]
        pj = b.perturb(j)
        observed, ok, diffs = {}, True, []
        if b.record_gradient is not None:
            g1 = b.record_gradient(i)
            gj = b.record_gradient(j)
            gpj = b.record_gradient(pj)
            g2 = b.record_gradient(i)
            same = bool(torch.equal(g1, g2))
            effective = not torch.equal(gj, gpj)
            observed.update(function_level_identical=same, perturbation_changes_j=effective)
            diffs.append(_max_abs(g1, g2))
            ok &= same and effective
        else:
            observed["function_level_identical"] = None
        if b.contributions is not None:
            c1 = b.contributions([i, j, k])
            c2 = b.contributions([i, pj, k])
            same = bool(torch.equal(c1[0], c2[0])) and bool(torch.equal(c1[2], c2[2]))
            observed["trainer_level_identical"] = same
            diffs += [_max_abs(c1[0], c2[0]), _max_abs(c1[2], c2[2])]
            ok &= same
        else:
            observed["trainer_level_identical"] = None
        observed["max_abs_diff"] = max(diffs)
        missing = [k for k in ("function_level_identical", "trainer_level_identical") if observed[k] is None]
        return {"passed": ok, "observed": observed, "expected": "bit-identical", "tolerance": 0.0,
                "message": str(observed) + (f"; not run: {missing} (binding missing)" if missing else "")}

    return _run("record_isolation", precision, "(A2) record isolation: a record's gradient and clipped "
                "contribution depend only on (θ_t, x_i)", {}, fn)


# ------------------------------------------------------------------------------------------------ V7

def check_constant_reward_groups(b: SuiteBindings, precision: str = "float64", *, retention_rtol: float = 1e-12
                                 ) -> CheckResult:
    """V7 `constant_reward_groups`: advantages of all-correct and all-wrong groups are exactly 0; the two
    versions of one record give finite, bit-identical, nonzero gradients (the KL term); with LoRA at the
    reference (`reference_record_gradient`, optional) the gradient and its clip are exactly 0; retention:
    clipped_sum(others ∪ {const}) − clipped_sum(others) = clip_C(g_const) within
    retention_rtol·max(1, ‖·‖) (1e-12 in float64; V13 passes the rounding of a float32 sum), nonzero.
    Reference: eq. (2) closed form (s = 0 ⇒ A = 0) and the fixed rule "constant groups are kept" (a
    sampled record whose rewards are all equal has zero advantage but stays in the clipped sum; see
    docs/dpgrpo.md, V7).
    Deterministic; no false failures."""
    C = b.C
    inputs = {"C": C, "G": b.G, "retention_rtol": retention_rtol}

    def fn():
        _need(b, "advantages", "record_gradient", "clipped_sum", "constant_items", "items", "C")
        import torch

        assert_no_dropout(b.model)
        G = b.G or 4
        adv_max = max(float(_f64(b.advantages(torch.full((G,), v, dtype=torch.float64))).abs().max())
                      for v in (0.0, 1.0))
        correct, wrong = list(b.constant_items)[:2]
        g1, g2 = b.record_gradient(correct), b.record_gradient(wrong)
        finite = bool(torch.isfinite(g1).all()) and bool(torch.isfinite(g2).all())
        identical = bool(torch.equal(g1, g2))
        gnorm = float(torch.linalg.vector_norm(_f64(g1)))
        ref_zero = None
        if b.reference_record_gradient is not None:
            g0 = b.reference_record_gradient(correct)
            clip0 = b.clip(g0, C) if b.clip is not None else _ref_clip(g0, C)
            ref_zero = bool(torch.isfinite(g0).all()) and bool((g0 == 0).all()) and bool((clip0 == 0).all())
        others = [it for it in b.items]
        diff = _f64(b.clipped_sum(others + [correct], C)) - _f64(b.clipped_sum(others, C))
        expect = _ref_clip(g1, C)
        err = _max_abs(diff, expect)
        scale = max(1.0, float(torch.linalg.vector_norm(expect)))
        retained = err <= retention_rtol * scale and float(diff.abs().max()) > 0
        passed = (adv_max == 0.0 and finite and identical and gnorm > 0 and retained and ref_zero is not False)
        observed = {"adv_max_abs": adv_max, "grads_finite": finite, "grads_identical": identical,
                    "grad_norm": gnorm, "retained": retained, "retention_abs_err": err,
                    "reference_case_zero": ref_zero}
        note = "" if ref_zero is not None else "; reference case not run (reference_record_gradient not bound)"
        return {"passed": passed, "observed": observed,
                "expected": {"adv_max_abs": 0.0, "grads_identical": True, "grad_norm": "> 0", "retained": True,
                             "reference_case_zero": True},
                "tolerance": {"retention": f"{retention_rtol!r}·max(1, ‖clip_C(g)‖)"},
                "message": str(observed) + note}

    return _run("constant_reward_groups", precision, "eq. (2) closed form (constant group ⇒ A = 0) and the "
                "keep-constant-groups rule, independent clip transcription", inputs, fn)


# ------------------------------------------------------------------------------------------------ V8

def check_chunk_identity(b: SuiteBindings, precision: str = "float64", *, chunk_sizes=(1, 2, 3, 4, 8),
                         rel_tol: float | None = None) -> CheckResult:
    """V8 `chunk_identity`: `record_loss_and_grad(item, s, C)` for s in {1, 2, 3, 4, 8} against the unchunked
    call, with C = 0.5·‖g_unchunked‖ (binding, so clipping each chunk separately fails). Tolerances (float64,
    `rel_tol=None`): losses rtol 1e-6 / atol 1e-7; raw gradients and clipped contributions rtol 1e-10 /
    atol 1e-12 elementwise; the unchunked clipped contribution must also equal the independent clip of the
    unchunked gradient (same tolerance). At a lower precision (V13) `rel_tol` replaces them: gradients and
    clipped contributions within rel_tol in relative ℓ2 norm (‖a − b‖/‖b‖), losses within rel_tol·max(1, |ℓ|)
    (eq. (7) is a difference of O(1) advantage terms, so its rounding error is absolute).

    Also reported, never a verdict: the clip-decision flips, i.e. the (chunk size, C) cases in which
    ‖g_chunked‖ > C differs from ‖g_unchunked‖ > C, at the tested C and at the configured `C` of the bindings.
    Deterministic; no false failures."""
    if rel_tol is not None and not (isinstance(rel_tol, float) and 0 < rel_tol < 1):
        raise InvalidParameter("rel_tol", rel_tol, "None or a float in (0, 1)")
    inputs = {"chunk_sizes": list(chunk_sizes), "rel_tol": rel_tol}

    def fn():
        _need(b, "record_loss_and_grad")
        item = b.chunk_item
        if item is None:
            _need(b, "items")
            item = list(b.items)[0]
        import torch

        assert_no_dropout(b.model)
        loss0, g0, _ = b.record_loss_and_grad(item, None, math.inf)
        g0 = _f64(g0)
        norm0 = float(torch.linalg.vector_norm(g0))
        C = 0.5 * norm0
        if not C > 0:
            raise ValueError("the unchunked gradient is zero; V8 needs a record with a nonzero gradient")
        loss0, g0b, clip0 = b.record_loss_and_grad(item, None, C)
        loss0 = float(loss0)
        tested_C = {"C": C} if b.C is None else {"C": C, "configured_C": float(b.C)}

        def close(a, ref, rtol, atol):
            a, ref = _f64(a), _f64(ref)
            return bool(((a - ref).abs() <= atol + rtol * ref.abs()).all())

        def rel(a, ref):
            a, ref = _f64(a), _f64(ref)
            den = float(torch.linalg.vector_norm(ref))
            num = float(torch.linalg.vector_norm(a - ref))
            return num / den if den > 0 else (0.0 if num == 0 else math.inf)

        if rel_tol is None:
            ok = close(clip0, _ref_clip(g0, C), 1e-10, 1e-12) and close(g0b, g0, 1e-10, 1e-12)
        else:
            ok = rel(clip0, _ref_clip(g0, C)) <= rel_tol and rel(g0b, g0) <= rel_tol
        per, flips = {}, 0
        for s in chunk_sizes:
            loss, g, cl = b.record_loss_and_grad(item, s, C)
            loss = float(loss)
            norm_s = float(torch.linalg.vector_norm(_f64(g)))
            flips_s = sum((norm_s > c) != (norm0 > c) for c in tested_C.values())
            flips += flips_s
            per[s] = {"loss_max_abs_diff": abs(loss - loss0), "grad_max_abs_diff": _max_abs(g, g0),
                      "clipped_max_abs_diff": _max_abs(cl, clip0), "grad_rel_diff": rel(g, g0),
                      "clipped_rel_diff": rel(cl, clip0), "clip_decision_flips": flips_s}
            if rel_tol is None:
                ok &= abs(loss - loss0) <= 1e-7 + 1e-6 * abs(loss0)
                ok &= close(g, g0, 1e-10, 1e-12) and close(cl, clip0, 1e-10, 1e-12)
            else:
                ok &= abs(loss - loss0) <= rel_tol * max(1.0, abs(loss0))
                ok &= per[s]["grad_rel_diff"] <= rel_tol and per[s]["clipped_rel_diff"] <= rel_tol
        tolerance = ({"loss": {"rtol": 1e-6, "atol": 1e-7}, "grad_and_clipped": {"rtol": 1e-10, "atol": 1e-12}}
                     if rel_tol is None else {"loss": f"{rel_tol!r}·max(1, |loss|)",
                                              "grad_and_clipped_relative_l2": rel_tol})
        observed = {"per_chunk_size": per, "C": C, "tested_C": tested_C, "clip_decision_flips": flips,
                    "max_grad_rel_diff": max(p["grad_rel_diff"] for p in per.values()) if per else 0.0}
        return {"passed": ok, "observed": observed, "expected": "chunked = unchunked", "tolerance": tolerance,
                "message": f"{flips} clip-decision flip(s) at {tested_C}; " + str(per)}

    return _run("chunk_identity", precision, "chunk losses sum to ℓ_i (eq. (7), Algorithm 1, line 6); clip "
                "after accumulation (independent clip transcription)", inputs, fn)


# ------------------------------------------------------------------------------------------------ V9

def check_public_normalisation(b: SuiteBindings, precision: str = "float64", *, n: int = 16, q: float = 0.25,
                               k: int = 3, C: float = 1.0, ulp_dtype: str = "float64") -> CheckResult:
    """V9 `public_normalisation`: with σ = 0, n = 16, q = 0.25 (q·n = 4), x a GradientRecord with norm 0.5·C
    (so v = x exactly) and k = 3 zero GradientRecords: noisy_update([x]) and noisy_update([x, z1, z2, z3]) are
    bit-identical and within 2 ulp of v/(q·n) elementwise, ulp of `ulp_dtype` (the update's dtype: float64
    here, float32 in V13, where v itself is rounded to float32 on the way in). Reference: closed form v/(q·n)
    with the public divisor (Algorithm 1, line 8). Deterministic; no false failures."""
    if ulp_dtype not in ("float64", "float32"):
        raise InvalidParameter("ulp_dtype", ulp_dtype, "'float64' or 'float32'")
    inputs = {"n": n, "q": q, "k": k, "C": C, "sigma": 0.0, "ulp_dtype": ulp_dtype}

    def fn():
        _need(b, "noisy_update", "make_gradient_record", "dim")
        import torch

        gen = torch.Generator().manual_seed(9)
        d = torch.randn(b.dim, dtype=torch.float64, generator=gen)
        v = d / torch.linalg.vector_norm(d) * (0.5 * C)
        x = b.make_gradient_record(v)
        zeros = [b.make_gradient_record(torch.zeros(b.dim, dtype=torch.float64)) for _ in range(k)]
        ga = b.noisy_update([x], sigma=0.0, C=C, q=q, n=n)
        gb = b.noisy_update([x] + zeros, sigma=0.0, C=C, q=q, n=n)
        identical = bool(torch.equal(ga, gb))
        expect = v / (q * n)
        fi = torch.finfo(getattr(torch, ulp_dtype))
        ulp = fi.eps * expect.abs().clamp_min(fi.tiny)
        ulps = float(((_f64(ga) - expect).abs() / ulp).max())
        ulps_b = float(((_f64(gb) - expect).abs() / ulp).max())
        passed = identical and ulps <= 2 and ulps_b <= 2
        observed = {"identical_across_batch_sizes": identical, "max_ulp_vs_public_divisor": max(ulps, ulps_b),
                    "batch_sizes": [1, 1 + k]}
        return {"passed": passed, "observed": observed,
                "expected": {"identical_across_batch_sizes": True, "max_ulp_vs_public_divisor": 0},
                "tolerance": {"max_ulp_vs_public_divisor": 2}, "message": str(observed)}

    return _run("public_normalisation", precision, "closed form v/(q·n) with the public divisor q·n", inputs, fn)


# ----------------------------------------------------------------------------------------------- V10

def check_noise_calibration(b: SuiteBindings, precision: str = "float64", *, sigma: float = 0.8,
                            C: float = 0.25, q: float = 0.25, n: int = 16, min_samples: int = 2 ** 17,
                            seed: int = 0) -> CheckResult:
    """V10 `noise_calibration`: σ = 0.8, C = 0.25, q·n = 4, S = 0, ≥ 2^17 noise coordinates (repeated calls on a
    vector of length `dim`); then a random S (≥ 2^17 coordinates) for the mean.

    Requirements: sample std within 1% of σC/(q·n) (sd of the relative error ≈ 1/√(2N) = 0.00195, so 1% is
    5.1 sd, false failure ≈ 3e-7); |mean| ≤ 5·σC/(q·n)/√N (5.7e-7); mean(ĝ·q·n − S) within 5·σC/√N (5.7e-7).
    Total false-failure probability ≈ 1.5e-6. Reference: N(0, σ²C²) before division by q·n (Algorithm 1, line 8).
    """
    inputs = {"sigma": sigma, "C": C, "q": q, "n": n, "min_samples": min_samples}

    def fn():
        _need(b, "privatize")
        import torch

        dim = b.dim or min_samples
        calls = -(-min_samples // dim)
        qn = q * n
        draws = [_f64(b.privatize(torch.zeros(dim, dtype=torch.float64), sigma=sigma, C=C, q=q, n=n))
                 for _ in range(calls)]
        z = torch.cat(draws)
        N = z.numel()
        target = sigma * C / qn
        std = float(z.std())
        mean = float(z.mean())
        gen = torch.Generator().manual_seed(seed)
        resid = []
        dtype = None
        for _ in range(calls):
            S = torch.randn(dim, dtype=torch.float64, generator=gen) * 3
            out = b.privatize(S.clone(), sigma=sigma, C=C, q=q, n=n)
            dtype = str(out.dtype)
            resid.append(_f64(out) * qn - S)
        r = torch.cat(resid)
        mean_resid = float(r.mean())
        ratio = std / target
        mean_z = mean / (target / math.sqrt(N))
        resid_z = mean_resid / (sigma * C / math.sqrt(r.numel()))
        passed = abs(ratio - 1) <= 0.01 and abs(mean_z) <= 5 and abs(resid_z) <= 5
        observed = {"std_ratio": ratio, "mean_z": mean_z, "offset_mean_z": resid_z, "noise_dtype": dtype,
                    "n_samples": N}
        return {"passed": passed, "observed": observed, "expected": {"std_ratio": 1.0, "mean_z": 0.0,
                                                                     "offset_mean_z": 0.0},
                "tolerance": {"std_ratio": 0.01, "mean_z": 5, "offset_mean_z": 5}, "message": str(observed)}

    return _run("noise_calibration", precision, "closed form: std σ·C/(q·n), mean S/(q·n)", inputs, fn)


# ----------------------------------------------------------------------------------------------- V11

def check_fresh_randomness(b: SuiteBindings, precision: str = "float64", *, p: int = 4096, n: int = 256,
                           q: float = 0.5, seed: int = 1234) -> CheckResult:
    """V11 `fresh_randomness`: in default (OS-entropy) mode two consecutive noise draws (S = 0, p ≥ 4096) have
    |corr| ≤ 6/√p and differ, two consecutive coin vectors (n = 256, q = 0.5) differ, two fresh instances give
    different first draws of both; two seeded instances with the same seed give identical draws and report
    `privacy_release = False` (default instances report True); a release-mode constructor given a seed
    raises. Under independence corr ~ N(0, 1/p): false failure 2·Φ(−6) ≈ 2e-9 per pair; equal coin vectors
    have probability 2^-256. Reference: (A3) fresh hidden randomness."""
    inputs = {"p": p, "n": n, "q": q, "seed": seed}

    def fn():
        _need(b, "make_randomness")
        import torch

        dim = b.dim or p
        calls = -(-p // dim)

        def noise(h):
            return torch.cat([_f64(h.privatize(torch.zeros(dim, dtype=torch.float64), sigma=1.0, C=1.0, q=1.0,
                                               n=1)) for _ in range(calls)])

        def corr(a, c):
            a, c = a - a.mean(), c - c.mean()
            den = float(torch.linalg.vector_norm(a) * torch.linalg.vector_norm(c))
            return float((a * c).sum()) / den if den > 0 else 1.0

        bound = 6 / math.sqrt(calls * dim)
        h1 = b.make_randomness()
        z1, z2 = noise(h1), noise(h1)
        c1, c2 = h1.sample_coins(n, q), h1.sample_coins(n, q)
        h2 = b.make_randomness()
        z3, c3 = noise(h2), h2.sample_coins(n, q)
        within = corr(z1, z2)
        across = corr(z1, z3)
        coins_equal_within = bool(torch.equal(c1, c2))
        coins_equal_across = bool(torch.equal(c1, c3))
        s1, s2 = b.make_randomness(seed=seed), b.make_randomness(seed=seed)
        seeded_same = bool(torch.equal(noise(s1), noise(s2))) and bool(torch.equal(s1.sample_coins(n, q),
                                                                                   s2.sample_coins(n, q)))
        seeded_flagged = (s1.privacy_release is False) and (s2.privacy_release is False)
        default_release = (h1.privacy_release is True) and (h2.privacy_release is True)
        try:
            b.make_randomness(seed=seed, release=True)
            release_refuses_seed = False
        except Exception:  # noqa: BLE001 - any refusal counts; the type is not part of the contract here
            release_refuses_seed = True
        passed = (abs(within) <= bound and abs(across) <= bound and not torch.equal(z1, z2)
                  and not coins_equal_within and not coins_equal_across and seeded_same and seeded_flagged
                  and default_release and release_refuses_seed)
        observed = {"noise_corr_within_run": within, "noise_corr_across_runs": across,
                    "coins_equal_within_run": coins_equal_within, "coins_equal_across_runs": coins_equal_across,
                    "seeded_identical": seeded_same, "seeded_flagged": seeded_flagged,
                    "default_privacy_release": default_release, "release_refuses_seed": release_refuses_seed}
        return {"passed": passed, "observed": observed,
                "expected": {"noise_corr": 0.0, "coins_equal": False, "seeded_identical": True,
                             "seeded_flagged": True, "default_privacy_release": True,
                             "release_refuses_seed": True},
                "tolerance": {"noise_corr": bound}, "message": str(observed)}

    return _run("fresh_randomness", precision, "(A3) fresh hidden randomness: independent draws have "
                "correlation ~ N(0, 1/p)", inputs, fn)


# ----------------------------------------------------------------------------------------------- V12

def check_accountant_reference(b: SuiteBindings, precision: str = "float64", *, rows: Sequence[str] | None = None,
                               jax_privacy: bool = True, calibration_rows: Sequence[str] = ("math_eps8_reference",)
                               ) -> CheckResult:
    """V12 `accountant_reference`: the accountant against Table VI / VII of [ZJJ] and the JAX-Privacy figure.

    Per Table VI row (all seven unless `rows` names a subset): PLD within 1e-4 of the reproduced figure and
    rounding (3 decimals) to the paper's printed value; RDP (if bound) within 0.03 of the paper's RDP column
    and RDP ≥ PLD − 1e-6. JAX-Privacy: PLD within 1e-4 of 3.7697. Calibration (if bound) for each row in
    `calibration_rows` (MATH ε=8 by default; the ε=1 row in the slow tier): ε(σ) ≤ target, ε(σ − 1e-5) > target
    and |σ − σ_TableVII| ≤ 1e-5. Deterministic. The PLD evaluations cost 0.4–1.1 s each; the accountant caches
    them. Reference data: `privcheck.checks.accounting.TABLE_VI` (docs/accounting.md, "Table VI")."""
    inputs = {"rows": list(rows) if rows is not None else "all", "jax_privacy": jax_privacy,
              "calibration_rows": list(calibration_rows)}

    def fn():
        _need(b, "epsilon_pld")
        from privcheck.checks.accounting import JAX_PRIVACY, TABLE_VI

        table = {r[0]: r for r in TABLE_VI}
        chosen = list(table) if rows is None else list(rows)
        per, ok, failures = {}, True, []
        for name in chosen:
            _, n, m, T, sigma, paper, repro, _rdp060, rdp_paper = table[name]
            q, delta = m / n, 1 / (10 * n)
            t0 = time.perf_counter()
            pld = _value(b.epsilon_pld(q, sigma, T, delta))
            case = {"pld": pld, "abs_err": abs(pld - repro)}
            good = abs(pld - repro) <= 1e-4 and abs(round(pld, 3) - paper) < 5e-10
            if b.epsilon_rdp is not None:
                r = b.epsilon_rdp(q, sigma, T, delta)
                rdp = _value(r)
                case.update(rdp=rdp, rdp_order=(getattr(r, "details", None) or {}).get("order"),
                            rdp_abs_err=abs(rdp - rdp_paper))
                if not rdp >= pld - 1e-6:
                    failures.append(f"{name}: accountant error, RDP {rdp} < PLD {pld}")
                    good = False
                good &= abs(rdp - rdp_paper) <= 0.03
            case["seconds"] = time.perf_counter() - t0
            per[name] = case
            if not good:
                failures.append(name)
            ok &= good
        if jax_privacy:
            j = JAX_PRIVACY
            pld = _value(b.epsilon_pld(j["q"], j["sigma"], j["T"], j["delta"]))
            per["jax_privacy"] = {"pld": pld, "abs_err": abs(pld - j["pld"])}
            if abs(pld - j["pld"]) > 1e-4:
                ok = False
                failures.append("jax_privacy")
        cal = {}
        if b.calibrate_sigma is not None:
            for name in calibration_rows:
                _, n, m, T, sigma_vii, *_ = table[name]
                q, delta = m / n, 1 / (10 * n)
                target = {"math_eps1": 1.0}.get(name, 8.0)
                s = _value(b.calibrate_sigma(q, T, delta, target))
                e_at = _value(b.epsilon_pld(q, s, T, delta))
                e_below = _value(b.epsilon_pld(q, s - 1e-5, T, delta))
                good = e_at <= target and e_below > target and abs(s - sigma_vii) <= 1e-5
                cal[name] = {"sigma": s, "sigma_table_vii": sigma_vii, "abs_err": abs(s - sigma_vii),
                             "eps_at_sigma": e_at, "eps_at_sigma_minus_1e-5": e_below, "target": target}
                if not good:
                    failures.append(f"calibration {name}")
                ok &= good
        note = "" if b.calibrate_sigma is not None else "; calibration not run (calibrate_sigma not bound)"
        note += "" if b.epsilon_rdp is not None else "; RDP not compared (epsilon_rdp not bound)"
        observed = {"cases": per, "calibration": cal, "failures": failures}
        return {"passed": ok, "observed": observed, "expected": "Table VI PLD repro / paper values, Table VII σ",
                "tolerance": {"pld": 1e-4, "rdp_vs_paper": 0.03, "rdp_minus_pld": -1e-6, "sigma": 1e-5},
                "message": ("failures: " + ", ".join(failures) if failures else "all cases within tolerance")
                + note}

    return _run("accountant_reference", precision, "Zhao, Januszewicz & Jung, arXiv:2610.07212, Table VI/VII "
                "and the JAX-Privacy reference (3.77)", inputs, fn)


# ----------------------------------------------------------------------------------------------- V13

PREFLIGHT_CHECKS = ("sensitivity_add_remove", "record_isolation", "constant_reward_groups", "chunk_identity",
                    "public_normalisation")
# V13 (docs/dpgrpo.md, "V13: precision preflight"). The base weights are in the named precision; LoRA,
# gradients, clip, noise and the update are float32 in both, so V3's ratio, V7's retention (a difference of two
# float32 sums) and V9's ulp are float32 quantities; only V8's chunked-vs-unchunked gradient difference feels
# the bfloat16 base.
PREFLIGHT_TOLERANCES = {
    "float32": {"v3_ratio_minus_one": 1e-6, "v7_retention_rtol": 1e-5, "v8_rel": 1e-5, "v9_ulp_dtype": "float32"},
    "bfloat16": {"v3_ratio_minus_one": 1e-6, "v7_retention_rtol": 1e-5, "v8_rel": 5e-2, "v9_ulp_dtype": "float32"},
}
_V3_OPTIONS = ("seed", "n_base", "n_gradient_records", "clip_norms")


def _check_precision_of_model(model, precision: str) -> str:
    """The model's dtypes must match `precision`: float32 trainable tensors, and frozen floating tensors in the
    base precision. Returns a note ("" or why nothing was verified); raises `InvalidParameter` on a mismatch."""
    if model is None:
        return "dtypes not verified (no model bound)"
    import torch

    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    if not params:
        return "dtypes not verified (model has no torch parameters)"
    trainable = {str(p.dtype).replace("torch.", "") for p in params if p.requires_grad}
    frozen = {str(p.dtype).replace("torch.", "") for p in params if not p.requires_grad and p.is_floating_point()}
    if trainable != {"float32"} or not frozen <= {precision}:
        raise InvalidParameter("precision", precision, f"the model's dtypes: trainable {sorted(trainable)} must be "
                               f"['float32'], frozen {sorted(frozen)} must be [{precision!r}]")
    return ""


def precision_preflight(b: SuiteBindings, precision: str, *, v3_options: dict | None = None) -> list[CheckResult]:
    """V13 `precision_preflight`: rerun V3, V6, V7, V8 and V9 on bindings built at a lower precision.

    `precision` is "float32" (everything float32) or "bfloat16" (base weights bfloat16; LoRA, gradients, clip,
    noise and optimizer float32); `b` must be bound to such a build (the model's dtypes are verified when
    `b.model` is a torch module). Tolerances: V3 ratio ≤ 1 + 1e-6 (one float32 ulp is 1.2e-7);
    V6 bit identity; V7 exact zero advantages, bit-identical constant-group gradients, retention within
    1e-5·max(1, ‖·‖) (float32 sums); V8 relative gradient difference ≤ 1e-5 (float32) or ≤ 5e-2 (bfloat16),
    with the clip-decision flips at the tested C reported; V9 bit identity across batch sizes and 2 float32 ulp.
    `v3_options` passes `seed`, `n_base`, `n_gradient_records` or `clip_norms` to V3 (its tolerance is fixed).

    Returns one `CheckResult` per check, named `precision_preflight.<precision>.<check>`, with `precision` set,
    so that they are never merged with the float64 results. Bad input raises `InvalidParameter` before any check
    runs; a model with dropout raises `DropoutEnabled`."""
    if precision not in PREFLIGHT_TOLERANCES:
        raise InvalidParameter("precision", precision, f"one of {tuple(PREFLIGHT_TOLERANCES)}")
    v3_options = dict(v3_options or {})
    unknown = sorted(set(v3_options) - set(_V3_OPTIONS))
    if unknown:
        raise InvalidParameter("v3_options", unknown, f"keys among {_V3_OPTIONS}")
    if not isinstance(b, SuiteBindings):
        raise InvalidParameter("bindings", type(b).__name__, "a SuiteBindings")
    note = _check_precision_of_model(b.model, precision)
    assert_no_dropout(b.model)
    tol = PREFLIGHT_TOLERANCES[precision]
    results = [
        check_sensitivity_add_remove(b, precision, tol=tol["v3_ratio_minus_one"], **v3_options),
        check_record_isolation(b, precision),
        check_constant_reward_groups(b, precision, retention_rtol=tol["v7_retention_rtol"]),
        check_chunk_identity(b, precision, rel_tol=tol["v8_rel"]),
        check_public_normalisation(b, precision, ulp_dtype=tol["v9_ulp_dtype"]),
    ]
    out = []
    for r in results:
        message = f"{r.message}; {note}" if note else r.message
        out.append(dataclasses.replace(r, name=f"precision_preflight.{precision}.{r.name}", message=message,
                                       inputs={**r.inputs, "preflight_precision": precision}))
    return out


# ------------------------------------------------------------------------------------------------ suite

CHECKS: dict[str, Callable[..., CheckResult]] = {
    "loss_reference": check_loss_reference,
    "clip_contract": check_clip_contract,
    "sensitivity_add_remove": check_sensitivity_add_remove,
    "nonprivate_equivalence": check_nonprivate_equivalence,
    "poisson_sampling": check_poisson_sampling,
    "record_isolation": check_record_isolation,
    "constant_reward_groups": check_constant_reward_groups,
    "chunk_identity": check_chunk_identity,
    "public_normalisation": check_public_normalisation,
    "noise_calibration": check_noise_calibration,
    "fresh_randomness": check_fresh_randomness,
    "accountant_reference": check_accountant_reference,
}


def run_suite(bindings: SuiteBindings, precision: str = "float64") -> list[CheckResult]:
    """Run V1–V12 in order. Raises `DropoutEnabled` before running anything if `bindings.model` has dropout."""
    assert_no_dropout(bindings.model)
    return [check(bindings, precision) for check in CHECKS.values()]


__all__ = ["SuiteBindings", "DropoutEnabled", "CHECKS", "run_suite", "assert_no_dropout", "precision_preflight",
           "PREFLIGHT_CHECKS", "PREFLIGHT_TOLERANCES"] + [
    f.__name__ for f in CHECKS.values()]
