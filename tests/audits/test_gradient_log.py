"""audits.gradient_log: the one-run audit of a DP-SGD model from a Dirac gradient-canary log (Opacus hook)."""

from __future__ import annotations

import json

import pytest

from audits import gradient_log
from audits.statistics.report import FDP_BLOCK
from audits.visibility import read_auditor_log
from privcheck.errors import CanariesNotObserved, InvalidParameter, PrivcheckError
from tests.audits.fdp_block import assert_block_recomputes


def test_prepare_validates_before_any_work():
    base = dict(dim=100, canaries=8, sampling_rate=0.5, noise_multiplier=1.0, steps=3, clip_norm=1.0, delta=1e-5)
    for key, bad in (("dim", 0), ("canaries", 0), ("canaries", 101), ("sampling_rate", 1.5),
                     ("noise_multiplier", 0.0), ("steps", 0), ("clip_norm", float("inf")), ("delta", 0.0),
                     ("k_plus", 9), ("k_minus", -1), ("fraction", 0.0), ("fraction", 1.5), ("search_canaries", 1)):
        with pytest.raises(InvalidParameter):
            gradient_log.prepare(**{**base, key: bad})


OPACUS_SETTING = dict(sampling_rate=1 / 32, noise_multiplier=0.875, steps=96, clip_norm=1.0, delta=1e-5)


def test_prepare_returns_an_underpowered_plan_before_training():
    """The Opacus setting q = 1/32, T = 96, σ = 0.875 (PLD ε ≈ 2.99 at δ = 1e-5) with m = 32 canaries: each canary
    is expected in q·T = 3 steps, and the planned bound is below a quarter of ε, so the plan is UNDERPOWERED before
    any training.
    The same design with the rule fixed by k_plus: the plan keeps it."""
    audit = gradient_log.prepare(dim=100, canaries=32, plan_sims=20, seed=4, search_canaries=False,
                                 **OPACUS_SETTING)
    plan = audit.plan
    assert plan.underpowered is True and audit.warning.startswith("UNDERPOWERED: planned ε_lower ")
    assert plan.eps_claim == pytest.approx(2.988, abs=1e-3) and plan.fraction == 0.5
    assert plan.eps_planned < 0.25 * plan.eps_claim
    assert "below 0.5 × the claim's ε = 2.988" in audit.warning
    fixed = gradient_log.prepare(dim=100, canaries=32, plan_sims=5, seed=4, search_canaries=False, k_plus=3,
                                 **OPACUS_SETTING)
    assert (fixed.design.power.k_plus, fixed.design.power.k_minus) == (3, 0)
    assert (fixed.design.preregistration.k_plus, fixed.design.preregistration.k_minus) == (3, 0)


@pytest.mark.slow
def test_prepare_searches_the_canary_count():
    """With the search (the default), an underpowered plan names a canary count: here the planned bound of the
    white-box LLR score grows too slowly in m (0.58 at 1,000, 1.45 at 160,000 canaries) to reach 0.5·ε ≈ 1.49 by
    m·2^10, and the verdict says so; at fraction 0.25 the search finds a count, whose own plan reaches 0.747."""
    from audits.statistics.power import plan as power_plan
    from audits.statistics.score_models import DPSGDDirac

    audit = gradient_log.prepare(dim=200, canaries=100, plan_sims=20, seed=4, fraction=0.25, **OPACUS_SETTING)
    needed = audit.plan.canaries_needed
    assert audit.plan.underpowered and audit.plan.canaries_basis == "score_model" and needed > 100
    assert f"about {needed} canaries would plan" in audit.warning
    model = DPSGDDirac(1 / 32, 0.875, 96, "llr")
    assert power_plan(needed, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=model, sims=1,
                      seed=4).planned_eps_lower >= 0.25 * audit.plan.eps_claim
    assert power_plan(needed // 2, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=model, sims=1,
                      seed=4).planned_eps_lower < 0.25 * audit.plan.eps_claim


def _log(path, rounds):
    path.write_text("".join(json.dumps(r) + "\n" for r in rounds))


def _included(t, bits):
    """The hook's diagnostics line of round t (realised inclusions)."""
    return {"kind": "diagnostics", "t": t, "diagnostics": {"canary_included": list(bits)}}


def test_analyse_refuses_a_log_that_does_not_match_the_design(tmp_path):
    audit = gradient_log.prepare(dim=40, canaries=8, sampling_rate=0.5, noise_multiplier=1.0, steps=2,
                                 clip_norm=1.0, delta=1e-5, plan_sims=5, seed=1, search_canaries=False)
    J = list(audit.design.reserved)
    assert J == list(range(32, 40))                        # the public "last" rule, not the membership
    good = [{"kind": "round", "t": t, "reserved": J, "U": [0.5 * t] * 8, "sigma_C": 1.0, "divisor": 4.0}
            for t in (1, 2)]
    diags = [_included(t, [1, 0, 0, 1, 0, 0, 0, 0]) for t in (1, 2)]
    for broken in ([good[0], diags[0]],                                         # a round missing
                   [good[0], {**good[1], "sigma_C": 0.5}, *diags],             # noise std not the claim's
                   [good[0], {**good[1], "reserved": J[::-1]}, *diags]):       # other coordinates
        _log(tmp_path / "log.jsonl", broken)
        with pytest.raises(PrivcheckError) as err:
            gradient_log.analyse(tmp_path / "log.jsonl", audit)
        assert not isinstance(err.value, CanariesNotObserved)
    _log(tmp_path / "ok.jsonl", good + diags)
    report = gradient_log.analyse(tmp_path / "ok.jsonl", audit)
    assert report.method == "steinke_one_run" and report.canaries["m"] == 8
    # the second bound: the same counts against the design's own event (audits.statistics.both_bounds)
    assert report.result[FDP_BLOCK]["assumption"] == "claim_family:" + audit.design.event.canonical()
    assert_block_recomputes(report.to_json())
    assert report.power["plan_note"] == audit.plan.line and report.power["underpowered"] == audit.plan.underpowered
    assert report.power["planned_eps_lower"] == audit.design.power.planned_eps_lower


def test_a_run_without_noise_is_rejected(tmp_path, steinke_only):
    """An Opacus run whose optimizer skips the noise (σ = 8 claimed, nothing added): every present canary's score
    separates, and the one-run bound rejects the claimed ε = PLD(q = 0.5, σ = 8, T = 30) ≈ 1.34. Seeded
    (membership, canary coins, model): deterministic, no false failure."""
    import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
    import torch

    from privcheck.integrations.opacus import private_dimension
    from tests.integrations.opacus_fixture import tiny_run

    torch.set_num_threads(1)
    T, m = 30, 200
    engine, model, opt, loader, step = tiny_run(sigma=8.0)
    audit = gradient_log.prepare(dim=private_dimension(opt), canaries=m, sampling_rate=loader.sample_rate,
                                 noise_multiplier=opt.noise_multiplier, steps=T, clip_norm=opt.max_grad_norm,
                                 delta=1e-5, seed=3, plan_sims=50, search_canaries=False)

    report = _train_audited(tmp_path, opt, loader, step, audit, T, noise=False)
    assert report.result["rejects_nominal"] is True
    assert report.result["eps_lower"] > report.claim["epsilon"]


class _JsonLinesLog:
    """The hook's previous log format, two JSON lines a step (`privcheck.integrations.auditor_log.append_lines`),
    written from the values the hook hands its binary writer: the reference for the binary log."""

    def __init__(self, path, reserved, *, clip_norm, mask_real):
        self.path, self.reserved, self.C, self.mask = path, [int(j) for j in reserved], clip_norm, mask_real

    def write_round(self, t, U, *, sigma_C, divisor, included):
        from privcheck.integrations.auditor_log import append_lines

        inc = [] if included is None else [int(b) for b in included]
        append_lines(self.path, [
            {"kind": "round", "t": t, "reserved": self.reserved, "U": [float(u) for u in U], "sigma_C": sigma_C,
             "divisor": divisor},
            {"kind": "diagnostics", "t": t, "diagnostics": {
                "canary_included": inc,
                "canary_pre_clip_norms": {f"dirac:{j}": self.C for j, b in zip(self.reserved, inc) if b},
                "cross_talk_reserved": None, "real_records_masked_on_reserved": self.mask}}])


def test_the_binary_log_gives_the_analysis_of_the_json_lines_log(tmp_path, monkeypatch):
    """The same seeded run (no noise, so the bound is far from 0) logged in the binary format and, through the
    previous writer, as JSON lines: the same entries, the same trained model, and the same report (ε_lower, the
    counts of the test and of the realised inclusions; only the commitment's fresh salt differs)."""
    import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
    import torch

    from privcheck.integrations import opacus_canaries
    from tests.integrations.opacus_fixture import tiny_run

    torch.set_num_threads(1)
    T = 12
    runs = {}
    for name in ("auditor_log.bin", "auditor_log.jsonl"):
        with monkeypatch.context() as mp:
            if name.endswith(".jsonl"):
                mp.setattr(opacus_canaries, "CanaryLogWriter", _JsonLinesLog)
            _, model, opt, loader, step = tiny_run(sigma=2.0)
            audit = _opacus_audit(opt, loader, T, m=300)
            report = _train_audited(tmp_path, opt, loader, step, audit, T, noise=False, log_name=name)
        runs[name] = (report, [p.detach().clone() for p in model.parameters()])
    (binary, p_bin), (lines, p_json) = runs["auditor_log.bin"], runs["auditor_log.jsonl"]
    assert (tmp_path / "auditor_log.bin").read_bytes()[:1] == b"\x89"            # not JSON: the binary format
    assert read_auditor_log(tmp_path / "auditor_log.bin") == read_auditor_log(tmp_path / "auditor_log.jsonl")
    assert all(torch.equal(a, b) for a, b in zip(p_bin, p_json))
    assert binary.result["eps_lower"] > 0
    for section in ("result", "guessing"):   # the same but for the preregistration's digest (a fresh salt each)
        ours, theirs = getattr(binary, section), getattr(lines, section)
        assert {**ours, "preregistration": None} == {**theirs, "preregistration": None}, section
    assert binary.diagnostics == lines.diagnostics
    assert binary.diagnostics["inclusions_present_mean"] > 0


def _opacus_small_q_run(tmp_path, *, noise: bool):
    """The issue-24 Opacus setting: q = 1/32 (batch 1 of 32 records), T = 96, σ = 0.875 (ε ≈ 2.99 at δ = 1e-5),
    m = 1,000 Dirac canaries, the default (guarded) power plan. `noise=False` removes the noise from the optimizer
    while the audit still claims σ = 0.875. Seeded: membership, plan, canary coins and model."""
    import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
    import torch

    from privcheck.integrations.opacus import private_dimension
    from tests.integrations.opacus_fixture import tiny_run

    torch.set_num_threads(1)
    T, m = 96, 1000
    _, _, opt, loader, step = tiny_run(sigma=0.875, batch_size=1, records=32)
    assert loader.sample_rate == 1 / 32
    audit = gradient_log.prepare(dim=private_dimension(opt), canaries=m, sampling_rate=loader.sample_rate,
                                 noise_multiplier=opt.noise_multiplier, steps=T, clip_norm=opt.max_grad_norm,
                                 delta=1e-5, seed=3, plan_sims=20)
    return audit, _train_audited(tmp_path, opt, loader, step, audit, T, noise=noise)


def _train_audited(tmp_path, opt, loader, step, audit, T: int, *, noise: bool, log_name: str = "auditor_log.bin"):
    """Train T steps under the audit's gradient canaries (without noise: the planted bug of releasing the clipped
    sum as it is) and analyse the auditor's log."""
    from privcheck.integrations.opacus import GradientCanaries

    if not noise:
        def no_noise():
            for p in opt.params:
                p.grad = p.summed_grad.view_as(p).clone()

        opt.add_noise = no_noise
    log = tmp_path / log_name
    with GradientCanaries(opt, coordinates=audit.design.reserved, presence=audit.presence(), log_path=log,
                          records=len(loader.dataset), seed=5):
        for _ in range(T // len(loader)):
            for batch in loader:
                step(batch)
    return gradient_log.analyse(log, audit)


def test_a_run_without_noise_is_rejected_at_small_q(tmp_path, steinke_only):
    """q = 1/32, T = 96: (1 − q)^T ≈ 4.75% of the present canaries are never sampled and tie with the absent ones at
    the bottom, so an even top/bottom split (the old default plan, k₊ = k₋ = 74) could not get every guess right and
    did not reject (ε_lower ≈ 2.6–2.7 < 2.99). The guarded default plan guesses the top only, with k₊ below what a
    noiseless run samples except with probability < 1e-6, and rejects. Expected values: the claim's ε is the
    accountant's; the guard's miss bound is checked against a direct simulation in tests/audits/test_power.py."""
    audit, report = _opacus_small_q_run(tmp_path, noise=False)
    power = audit.design.power
    assert power.noiseless["guarded"] is True and power.noiseless["miss_bound"] <= 1e-6
    assert power.k_minus == 0 and power.k_plus > 0
    never = report.diagnostics["never_sampled_in_canaries"]
    assert never > 0                                          # the tie the old plan tripped over is there
    assert report.result["rejects_nominal"] is True
    assert report.result["eps_lower"] > report.claim["epsilon"] > 2.98


def test_an_honest_run_at_small_q_is_not_rejected(tmp_path, steinke_only):
    """The same run with its noise: the bound stays below the claim (a valid audit rejects an honest run with
    probability ≤ 0.05; this seed does not, and the planned bound ≈ 0.55 is far below 2.99)."""
    _, report = _opacus_small_q_run(tmp_path, noise=True)
    assert report.result["rejects_nominal"] is False
    assert report.result["eps_lower"] < report.claim["epsilon"]


@pytest.mark.slow
def test_an_honest_run_at_small_q_reports_both_bounds(tmp_path):
    """The same honest run with its second bound (docs/integrations/opacus.md, "Audit an Opacus model"): the
    claim-curve f-DP ε_lower of the same counts is the `claim_eps_lower` of the recorded counts against the design's
    event, and on this seeded run it lies above the Steinke bound and below the claim (measured: 56 of 78 guesses
    correct, Steinke 0.496, f-DP 0.698 at noise scale 2.158, claimed ε 2.988). Not a theorem for
    every count: the f-DP test reads the whole trade-off curve of the subsampled Gaussian composed over 96 steps,
    the Steinke test one (ε, δ) pair of it; the run is seeded, so the counts and both figures are fixed."""
    audit, report = _opacus_small_q_run(tmp_path, noise=True)
    block, steinke = report.result[FDP_BLOCK], report.result["eps_lower"]
    assert block["assumption"] == "claim_family:" + audit.design.event.canonical()
    assert steinke < block["eps_lower"] < report.claim["epsilon"]
    assert block["rejects_nominal"] is False and report.result["rejects_nominal"] is False
    assert_block_recomputes(report.to_json())


# ------------------------------------------------------------------------------------------ cannot see

def test_a_log_that_never_saw_a_canary_is_refused(tmp_path):
    """Each way a log can show that no canary was observed is a CanariesNotObserved naming what is missing, never a
    report with ε_lower = 0 (docs/integrations/opacus.md, "When the audit cannot see")."""
    audit = gradient_log.prepare(dim=40, canaries=8, sampling_rate=0.5, noise_multiplier=1.0, steps=2,
                                 clip_norm=1.0, delta=1e-5, plan_sims=5, seed=1, search_canaries=False)
    J = list(audit.design.reserved)
    rounds = [{"kind": "round", "t": t, "reserved": J, "U": [0.25, -1.0] * 4, "sigma_C": 1.0, "divisor": 4.0}
              for t in (1, 2)]
    some = [_included(t, [0, 1, 0, 0, 0, 0, 1, 0]) for t in (1, 2)]
    cases = {
        "missing": (None, "auditor log"),
        "empty": ([], "round line"),
        "no diagnostics": (rounds, "realised inclusions"),
        "hook not run": (rounds + [_included(t, []) for t in (1, 2)], "realised inclusions"),
        "one round without bits": (rounds + [some[0], _included(2, [])], "rounds 2 (1 of 2"),
        "never included": (rounds + [_included(t, [0] * 8) for t in (1, 2)], "any canary in any round"),
        "all U zero": ([{**r, "U": [0.0] * 8} for r in rounds] + some, "nonzero U_t[J]"),
    }
    for name, (lines, what) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        if lines is not None:
            _log(path, lines)
        with pytest.raises(CanariesNotObserved) as err:
            gradient_log.analyse(path, audit)
        assert what in err.value.what, (name, str(err.value))
        assert "cannot see" in str(err.value) and err.value.why
    _log(tmp_path / "seen.jsonl", rounds + some)
    assert gradient_log.analyse(tmp_path / "seen.jsonl", audit).canaries["m"] == 8


def _opacus_audit(opt, loader, T, m=20):
    from privcheck.integrations.opacus import private_dimension

    return gradient_log.prepare(dim=private_dimension(opt), canaries=m, sampling_rate=loader.sample_rate,
                                noise_multiplier=opt.noise_multiplier, steps=T, clip_norm=opt.max_grad_norm,
                                delta=1e-5, seed=3, plan_sims=5, search_canaries=False)


def test_a_loop_that_never_steps_the_hooked_optimizer_cannot_see(tmp_path):
    """GradientCanaries on the DPOptimizer of one run while the loop steps another run's optimizer: the hooked
    optimizer never steps, no line is written, and the audit says so instead of scoring nothing."""
    import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
    import torch

    from privcheck.integrations.opacus import GradientCanaries
    from tests.integrations.opacus_fixture import tiny_run

    torch.set_num_threads(1)
    _, _, hooked, loader, _ = tiny_run(seed=0)
    _, _, _, other_loader, other_step = tiny_run(seed=1)
    T = 3
    audit = _opacus_audit(hooked, loader, T)
    log = tmp_path / "auditor_log.bin"
    with GradientCanaries(hooked, coordinates=audit.design.reserved, presence=audit.presence(), log_path=log,
                          seed=5):
        for _, batch in zip(range(T), other_loader):
            other_step(batch)
    with pytest.raises(CanariesNotObserved) as err:
        gradient_log.analyse(log, audit)
    assert "auditor log" in err.value.what and "never stepped" in err.value.why


def test_canaries_on_another_dpoptimizer_of_the_same_optimizer_cannot_see(tmp_path):
    """GradientCanaries installed on a second DPOptimizer over the loop's torch optimizer: the step pre-hook fires
    when the loop steps, so U_t[J] is logged every round, but the canaries never joined the per-sample gradients
    (the hooked clip_and_accumulate never ran). Such a log used to be scored as if they had; now it is refused."""
    import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
    import torch
    from opacus.optimizers import DPOptimizer

    from privcheck.integrations.opacus import GradientCanaries
    from tests.integrations.opacus_fixture import tiny_run

    torch.set_num_threads(1)
    _, _, opt, loader, step = tiny_run(seed=0)
    twin = DPOptimizer(opt.original_optimizer, noise_multiplier=opt.noise_multiplier,
                       max_grad_norm=opt.max_grad_norm, expected_batch_size=opt.expected_batch_size)
    T = 3
    audit = _opacus_audit(opt, loader, T)
    log = tmp_path / "auditor_log.bin"
    with GradientCanaries(twin, coordinates=audit.design.reserved, presence=audit.presence(), log_path=log,
                          sample_rate=loader.sample_rate, seed=5):
        for _, batch in zip(range(T), loader):
            step(batch)
    steps = sum(e["kind"] == "round" for e in read_auditor_log(log))
    assert steps >= 1                                           # the pre-hook saw the loop's steps
    with pytest.raises(CanariesNotObserved) as err:
        gradient_log.analyse(log, audit)
    assert "realised inclusions" in err.value.what and f"({steps} of {steps} logged rounds)" in err.value.what
