"""privcheck.integrations.opacus on a real Opacus PrivacyEngine run (tiny float64 MLP, synthetic data)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
import pytest
import torch

from audits.visibility import read_auditor_log
from privcheck.errors import CannotObserve, InvalidParameter
from privcheck.integrations.opacus import (
    GradientCanaries,
    bindings_for,
    opacus_parameters,
    private_dimension,
)
from tests.integrations.opacus_fixture import N, tiny_run

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "opacus.md"


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny tensors: threads only add contention on a shared machine
    yield
    torch.set_num_threads(before)


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_bindings_take_opacus_values():
    engine, model, opt, loader, step = tiny_run(sigma=1.3, C=0.7, batch_size=4)
    b = bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=7)
    # Opacus's q is 1/len(original loader) = 4/16; its divisor is int(N·q) = 4 (not q·n computed anew)
    assert b.q == loader.sample_rate == 0.25
    assert b.whole_step.divisor == opt.expected_batch_size == 4
    assert (b.C, b.sigma, b.n, b.precision) == (0.7, 1.3, N, "float64")
    assert b.dim == sum(p.numel() for p in model.parameters()) == private_dimension(opt)
    assert b.accountant_event.to_json() == {"kind": "poisson_gaussian", "sampling_rate": 0.25,
                                            "noise_multiplier": 1.3, "steps": 7, "relation": "add_remove"}
    # user_epsilon is the engine's own accountant at the same (q, σ, T)
    from opacus.accountants import RDPAccountant
    ref = RDPAccountant()
    ref.history = [(1.3, 0.25, 7)]
    assert b.user_epsilon() == ref.get_epsilon(1e-5)


def test_bindings_after_training_use_the_history():
    engine, model, opt, loader, step = tiny_run()
    for batch in loader:
        step(batch)
    b = bindings_for(engine, model, opt, loader, step, delta=1e-5)
    assert engine.accountant.history == [(1.0, 0.5, 2)]
    assert (b.accountant_event.sampling_rate, b.accountant_event.noise_multiplier, b.accountant_event.steps) == \
        (0.5, 1.0, 2)
    assert b.user_epsilon() == engine.get_epsilon(1e-5)


@pytest.mark.parametrize("attr, value", [("max_grad_norm", math.inf), ("max_grad_norm", None),
                                         ("noise_multiplier", None), ("noise_multiplier", 0.0),
                                         ("expected_batch_size", None)])
def test_missing_or_infinite_values_are_refused(attr, value):
    engine, model, opt, loader, step = tiny_run()
    setattr(opt, attr, value)
    with pytest.raises(InvalidParameter, match=attr):
        bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3)


def test_other_bad_inputs_are_refused():
    engine, model, opt, loader, step = tiny_run()
    with pytest.raises(InvalidParameter, match="steps"):         # no history yet, no planned T
        bindings_for(engine, model, opt, loader, step, delta=1e-5)
    with pytest.raises(InvalidParameter, match="optimizer"):
        opacus_parameters(opt.original_optimizer, loader)
    with pytest.raises(InvalidParameter, match="delta"):
        bindings_for(engine, model, opt, loader, step, delta=0.0, steps=3)
    with pytest.raises(InvalidParameter, match="records"):
        bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3, records=[loader.dataset[0]])
    with pytest.raises(InvalidParameter, match="records"):
        bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3, records=7)


def test_a_users_sampler_subclass_is_not_replaced_by_opacus_own():
    """The checks rebuild the sampler the loop iterates; a subclass (whatever it changes) is refused, never swapped
    for the library class it derives from (pass batch_sampler_factory= for it): the checks that need its batches
    fail as "cannot observe", never pass and never error."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    class MySampler(UniformWithReplacementSampler):
        pass

    engine, model, opt, loader, step = tiny_run()
    loader.batch_sampler.__class__ = MySampler
    b = bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3)
    with pytest.raises(CannotObserve, match="data_loader"):
        b.sample(6, 0.2)
    from privcheck.checks.catalogue import run_suite
    for r in run_suite(b, checks=["poisson_sampling", "step_poisson_sampling"]):
        assert r.status == "fail", (r.name, r.status, r.message)
        assert r.message.startswith("cannot observe the batches of data_loader: its batch_sampler is a MySampler")
        assert "batch_sampler_factory" in r.message


def test_bindings_refuse_an_optimizer_with_the_canary_hook_installed(tmp_path):
    engine, model, opt, loader, step = tiny_run()
    dim = private_dimension(opt)
    presence = torch.zeros(2, dtype=torch.bool)
    with GradientCanaries(opt, coordinates=[dim - 1, dim - 2], presence=presence, log_path=tmp_path / "log"):
        with pytest.raises(InvalidParameter, match="optimizer"):
            bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3)


def test_docs_example_passes_the_checks_and_leaves_the_run_unchanged():
    """The 'Verify a run' example of docs/integrations/opacus.md, run as written: ≤ 20 lines of user code, every
    generic DP-SGD check passes except clip_contract, which fails exactly on non-finite inputs (Opacus maps them
    to NaN; docs/integrations/opacus.md, "clip_contract and non-finite gradients")."""
    code = _python_blocks(DOC.read_text(encoding="utf-8"))[0]
    assert len([line for line in code.splitlines() if line.strip()]) <= 20
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)   # noqa: S102 - the documented example itself
    results, model, engine = scope["results"], scope["model"], scope["engine"]
    from privcheck.checks.catalogue import DPSGD_CHECKS, WHOLE_RUN_CHECKS
    assert set(results) == set(DPSGD_CHECKS) and len(DPSGD_CHECKS) == 17
    bad = {k: (r.status, r.message[:200]) for k, r in results.items()
           if k != "clip_contract" and k not in WHOLE_RUN_CHECKS and r.status != "pass"}
    assert not bad
    for k in WHOLE_RUN_CHECKS:      # one step's bindings: the whole run is not bound, and says so
        assert results[k].status == "skipped" and "whole_run" in results[k].message
    clip = results["clip_contract"]
    assert clip.status == "fail"
    assert clip.observed["nonfinite_cases_zeroed"] == 1      # only the overflowing finite vector is zeroed
    assert clip.observed["inside_bit_identical"] and clip.observed["zero_case_ok"]
    assert clip.observed["max_norm_ratio"] <= 1 + 1e-10 and clip.observed["min_cosine"] >= 1 - 1e-12
    assert "above privcheck's certified PLD" in results["accountant_agreement"].message   # RDP is looser than PLD
    assert engine.accountant.history == []                  # the probes restored the accountant
    # the model is the one the example built, untouched by the probes: re-seeding reproduces its weights
    assert all(p.grad is None for p in model.parameters())


def test_probes_restore_the_users_model_and_optimizer():
    engine, model, opt, loader, step = tiny_run()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    b = bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3)
    g = b.noisy_update(list(b.items), sigma=1.0, C=1.0, q=0.5, n=4)
    assert g.shape == (b.dim,) and torch.isfinite(g).all()
    run = b.whole_step.build(list(b.whole_step.records), 3)
    run.step()
    run.close()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert (opt.noise_multiplier, opt.max_grad_norm, opt.expected_batch_size, opt.generator) == (1.0, 1.0, 8, None)
    assert engine.accountant.history == [] and "clip_and_accumulate" not in opt.__dict__


def test_canaries_inject_mask_and_log(tmp_path):
    """With (almost) no noise the log shows exactly the injected canaries: U_t[j] = C·C/(C + 1e-6) (Opacus's
    clip of a norm-C row) when canary j was included at step t, else 0 (real records are masked on J), and the
    divisor is q·(n + m)."""
    engine, model, opt, loader, step = tiny_run(sigma=1e-12)
    m = 6
    J = tuple(range(private_dimension(opt) - m, private_dimension(opt)))
    presence = [1, 0, 1, 1, 0, 1]
    log = tmp_path / "private" / "auditor_log.bin"
    log.parent.mkdir()
    with GradientCanaries(opt, coordinates=J, presence=presence, log_path=log, records=N, seed=11) as hook:
        assert opt.expected_batch_size == 0.5 * (N + m)
        for _ in range(5):
            for batch in loader:
                step(batch)
    assert opt.expected_batch_size == 8 and "clip_and_accumulate" not in opt.__dict__
    assert hook.privacy_release is False
    assert oct(os.stat(log).st_mode & 0o777) == "0o600"
    lines = read_auditor_log(log)
    rounds = [x for x in lines if x["kind"] == "round"]
    diags = [x for x in lines if x["kind"] == "diagnostics"]
    assert [r["t"] for r in rounds] == list(range(1, 11)) == [d["t"] for d in diags]
    included_any = [0] * m
    for r, d in zip(rounds, diags):
        assert r["reserved"] == list(J) and r["divisor"] == 0.5 * (N + m)
        assert r["sigma_C"] == 1e-12
        inc = d["diagnostics"]["canary_included"]
        for k in range(m):
            assert inc[k] <= presence[k]                        # absent canaries are never included
            included_any[k] |= inc[k]
            expect = 1.0 * 1.0 / (1.0 + 1e-6) if inc[k] else 0.0
            assert abs(r["U"][k] - expect) <= 1e-9
    assert included_any == presence      # P(a present canary never included in 10 steps at q = 0.5) = 2^-10; seeded


def test_canaries_refuse_bad_input(tmp_path):
    engine, model, opt, loader, step = tiny_run()
    dim = private_dimension(opt)
    with pytest.raises(InvalidParameter, match="coordinates"):
        GradientCanaries(opt, coordinates=[dim], presence=[1], log_path=tmp_path / "l")
    with pytest.raises(InvalidParameter, match="coordinates"):
        GradientCanaries(opt, coordinates=[1, 1], presence=[1, 0], log_path=tmp_path / "l")
    with pytest.raises(InvalidParameter, match="presence"):
        GradientCanaries(opt, coordinates=[1, 2], presence=[1], log_path=tmp_path / "l")
    assert "clip_and_accumulate" not in opt.__dict__


@pytest.mark.slow
def test_docs_canary_audit_runs_on_the_opacus_model():
    """The 'Audit an Opacus model' example, continuing the first one: a one-run report from the 0600 log, with
    privcheck's PLD of (q, σ, T) as the nominal claim and the pre-registered guess rule."""
    blocks = _python_blocks(DOC.read_text(encoding="utf-8"))
    scope: dict = {}
    first = blocks[0].replace("steps=50)", "steps=50)\nresults = None  # checks not rerun here", 1)
    first = first.replace("results = {r.name: r for r in run_suite(bindings, checks=list(DPSGD_CHECKS))}", "")
    exec(compile(first, str(DOC), "exec"), scope)              # noqa: S102
    assert len([line for line in blocks[1].splitlines() if line.strip()]) <= 16
    exec(compile(blocks[1], str(DOC), "exec"), scope)          # noqa: S102
    report, audit = scope["report"], scope["audit"]
    from privcheck.accounting import PoissonGaussianEvent, epsilon
    nominal = epsilon(PoissonGaussianEvent(0.5, 1.0, 20), 1e-5).value
    assert report.method == "steinke_one_run" and report.claim["epsilon"] == nominal
    assert report.canaries["m"] == 64 and report.canaries["membership_sealed"] is True
    assert report.guessing["k_plus"] == audit.design.preregistration.k_plus
    assert report.diagnostics["realized_inclusions_logged"] is True
    assert report.diagnostics["absent_canaries_ever_sampled"] == 0
    assert oct(os.stat(scope["log"]).st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("mask_real", [True, False])
def test_canaries_numpy_and_torch_paths_agree(tmp_path, mask_real):
    """On CPU the hook writes the per-sample rows through numpy; the torch path (any device) must give the same
    log entries and the same trained parameters on a seeded run: canaries on coordinates in no particular order
    across all four parameters, batches of about 4 with empty ones possible."""
    import numpy as np

    results = []
    for numpy_path in (True, False):
        _, model, opt, loader, step = tiny_run(sigma=0.5, batch_size=4, records=N)
        dim = private_dimension(opt)
        rng = np.random.default_rng(3)
        J = rng.choice(dim, 40, replace=False).tolist()           # unsorted: the slot order is not the row order
        log = tmp_path / f"log-{numpy_path}-{mask_real}"
        with GradientCanaries(opt, coordinates=J, presence=rng.integers(0, 2, 40), log_path=log, records=N,
                              seed=2, mask_real=mask_real) as hook:
            assert hook._numpy is True                           # a float64 CPU model takes the numpy path
            hook._numpy = numpy_path
            for _ in range(3):
                for batch in loader:
                    step(batch)
        results.append((read_auditor_log(log), [p.detach().clone() for p in model.parameters()]))
    (log_np, params_np), (log_torch, params_torch) = results
    assert log_np == log_torch and len(log_np) == 2 * 3 * len(loader)
    assert any(sum(e["diagnostics"]["canary_included"]) for e in log_np if e["kind"] == "diagnostics")
    assert all(torch.equal(a, b) for a, b in zip(params_np, params_torch))
