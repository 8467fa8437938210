"""The DP-GRPO gradient-canary audit (audits/dpgrpo/gradient_canary.py, audits/cli/dpgrpo.py; docs/audits.md, "Auditing
DP-GRPO in one run").

One seeded end-to-end audit (tiny-cpu model and task with 2 public pretraining steps, 4 real records, q = 0.5,
T = 10, 300 added Dirac canaries, ε = 8 at δ = 1/(10·n′)) is run once per module and inspected from several sides.
Expected values are recomputed here, independently of the code under test: the commitment by hand from its byte
layout sha256(salt ‖ ids ‖ bits), the LLR as the log-ratio of the two Gaussian mixtures with scipy's `norm.logpdf`,
the AUROC by counting pairs, the divisor from public numbers, realised inclusions from the log, the certified ε from
the accountant's entry point.

Why the seeded assertions are not fragile: the audit's ε_lower can never exceed the ceiling ε_max(300) = 4.32 at
this δ (the bound with every guess correct) while the certified ε is 8, and with the power plan's score model
(which the masked Dirac canaries follow exactly) ε_lower = 0 needs the top-k* guesses to be right about as often as
coin flips, against a planned precision above 0.9 (the plan's Monte Carlo found no zero in its audits); any seed
passes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat

import numpy as np
import pytest
import torch
from scipy import stats

from audits import canary as cn
from audits.dpgrpo import gradient_canary as dc
from audits.statistics.report import FDP_BLOCK
from privcheck.accounting import DPSGDPlan, PoissonGaussianEvent, epsilon
from privcheck.cli import build_parser
from privcheck.errors import CalibrationMismatch, CanariesNotObserved, InvalidParameter, PrivcheckError
from tests.audits.fdp_block import assert_block_recomputes, block_event

SEED, M, T, Q, N_REAL = 11, 300, 10, 0.5, 4
CLI_M = 16           # canaries of the command-line test
TARGET_EPS = 8.0


def light_preset():
    """tiny-cpu with 2 public pretraining steps instead of 100: the masked Dirac canaries' statistic does not read
    the weights (the full pretraining is audited in tests/bug_zoo/test_dpgrpo_audits.py and by the input-space
    audit, whose canaries do read them)."""
    from mechanisms.dpgrpo import presets

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(presets.PRESETS, "tiny-cpu-light", dataclasses.replace(presets.TINY_CPU, name="tiny-cpu-light",
                                                                          pretrain_steps=2))
        return dc.audit_preset("tiny-cpu-light")


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("dpgrpo_audit")
    try:
        yield dc.run_gradient_canary_audit(preset=light_preset(), canaries=M, out_dir=out, seed=SEED, rounds=T,
                                           q=Q, n_real=N_REAL, plan_sims=50)
    finally:
        torch.set_num_threads(threads)


def _log(res):
    with open(res.log_path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


# ------------------------------------------------------------------------------------------ the end-to-end figure

def test_bound_is_positive_and_below_the_certified_epsilon(audit):
    rep = audit.report
    eps = rep.claim["epsilon"]
    assert 7.9 < eps <= TARGET_EPS                      # calibrated for ε = 8, never above it
    assert rep.claim["delta"] == 1 / (10 * (N_REAL + M))
    assert 0 < audit.eps_lower <= eps
    assert audit.eps_lower <= rep.power["eps_ceiling"] < eps
    assert rep.result["rejects_nominal"] is False and rep.result["p_value_at_nominal"] > 0.05
    assert rep.method == "steinke_one_run"
    assert (rep.canaries["type"], rep.canaries["score"], rep.canaries["added_slots"]) == \
        ("gradient_dirac", "whitebox_step_llr", True)
    assert rep.canaries["m"] == M and rep.canaries["n_in"] + rep.canaries["n_out"] == M
    assert rep.claim["accountant"] == "pld" and rep.claim["neighboring"] == "add_remove"
    assert rep.randomness["membership"] == "seeded" and rep.randomness["audit_release"] is False


def test_both_bounds_of_the_same_counts(audit):
    """The report carries the assumption-free Steinke bound (the headline) and the claim-curve f-DP bound of the
    same counts against the audit plan's own event, with its claim_family assumption beside it; the block is
    `claim_eps_lower` of the recorded counts. On this seeded run (61 of 64 guesses correct) the f-DP bound is the
    higher, 2.850 against Steinke's 1.913, and below the certified ε 8 (the run is honest: the claim is not
    rejected). Not a theorem for every count: the f-DP test reads the whole trade-off curve of the subsampled
    Gaussian composed over T = 10 rounds, the Steinke test one (ε, δ) pair of it; the audit is seeded, so the counts
    and both figures are fixed."""
    rep = audit.report
    block, steinke = rep.result[FDP_BLOCK], rep.result["eps_lower"]
    assert rep.extra_assumptions == () and audit.eps_lower == steinke         # the headline needs no assumption
    assert block["assumption"] == "claim_family:" + audit.design.plan.event.canonical()
    assert block_event(audit.document) == PoissonGaussianEvent(Q, rep.claim["mechanism"]["params"]["sigma"], T)
    assert 0 < steinke < block["eps_lower"] < rep.claim["epsilon"]
    assert block["rejects_nominal"] is False and block["search_capped"] is False
    assert audit.document["result"][FDP_BLOCK] == dict(block)
    assert_block_recomputes(audit.document)


def test_power_plan_made_before_training_fixes_the_guess_rule(audit):
    rep, design = audit.report, audit.design
    power = design.power
    assert power.score_model.startswith(f"dpsgd_dirac(q={Q!r}, sigma={design.plan.noise_multiplier!r}, T={T}, "
                                        "stat=llr")
    assert (rep.guessing["k_plus"], rep.guessing["k_minus"]) == (power.k_plus, power.k_minus)
    assert rep.result["guesses"] == power.k_plus + power.k_minus
    assert rep.guessing["preregistration"] == design.preregistration.digest
    assert rep.power["planned_eps_lower"] == power.planned_eps_lower > 0
    assert power.eps_nominal == rep.claim["epsilon"] and power.delta == rep.claim["delta"]
    assert design.preregistration.registered_at < audit.membership_revealed_at
    assert audit.headline()["planned_eps_lower"] == power.planned_eps_lower


# ------------------------------------------------------------------------------------------ the privacy plan

def test_certified_epsilon_is_the_accountant_epsilon_of_the_audit_plan(audit):
    plan, claim = audit.design.plan, audit.report.claim
    params = claim["mechanism"]["params"]
    assert isinstance(plan, DPSGDPlan) and (plan.records, plan.canaries) == (N_REAL, M)
    assert (params["q"], params["sigma"], params["steps"], params["C"], claim["delta"]) == \
        (plan.sampling_rate, plan.noise_multiplier, plan.steps, plan.clip_norm, plan.delta) == \
        (Q, audit.design.config.sigma, T, 1.0, 1 / (10 * (N_REAL + M)))
    expected = epsilon(PoissonGaussianEvent(plan.sampling_rate, plan.noise_multiplier, plan.steps), plan.delta).value
    assert claim["epsilon"] == expected == audit.epsilon_with_canaries == audit.privacy_claim["epsilon"]
    assert plan.calibration is not None and plan.calibration.event == plan.event
    assert params["target_epsilon"] == plan.target_epsilon == TARGET_EPS
    assert audit.design.config.plan == plan.replace(canaries=0)          # the trainer adds the canary slots


def test_a_forged_or_stale_calibration_is_refused(audit):
    spec, plan = dc.resolve_preset("tiny-cpu"), audit.design.plan
    with pytest.raises(CalibrationMismatch):             # σ edited after calibration
        dataclasses.replace(plan, noise_multiplier=plan.noise_multiplier / 2)
    with pytest.raises(CalibrationMismatch):             # the calibration of T rounds kept for T + 1
        dataclasses.replace(plan, steps=T + 1)
    longer = plan.replace(steps=T + 1)                   # replace() drops it: ε recomputed from the new event
    assert longer.calibration is None and longer.epsilon().value > claim_epsilon(audit)
    # A plan the configuration cannot represent exactly (q·n/n ≠ q in floating point) is refused, not rounded.
    odd = DPSGDPlan(records=3, sampling_rate=0.1, noise_multiplier=1.0, clip_norm=1.0, steps=2, delta=1e-3,
                    canaries=2)
    assert 0.1 * 3 / 3 != 0.1
    with pytest.raises(CalibrationMismatch):
        dc.audit_config(spec, odd, seed=0)


def claim_epsilon(audit) -> float:
    return audit.report.claim["epsilon"]


class _ForgedPlan:
    """Mixin of trainers whose privacy claim does not belong to the audit's plan (checked before training)."""

    def train(self):
        raise AssertionError("trained although the claim does not match the audit's plan")


@pytest.mark.parametrize("forgery", ["plan", "epsilon"])
def test_a_trainer_claim_that_differs_from_the_plan_is_refused_before_training(forgery, tmp_path,
                                                                                lightly_pretrained):
    from mechanisms.dpgrpo.trainer import DPTrainer

    class Forged(_ForgedPlan, DPTrainer):
        @property
        def plan(self):
            plan = super().plan
            if forgery == "plan":                     # a σ the accountant was never asked about
                return plan.replace(noise_multiplier=plan.noise_multiplier * 1.5)
            return plan

        @property
        def privacy_claim(self):
            claim = dict(super().privacy_claim)
            if forgery == "epsilon":                  # the target stated as if it were the plan's ε
                claim["epsilon"] = 0.001
            return claim

    out = tmp_path / "out"
    with pytest.raises(PrivcheckError, match="plan" if forgery == "plan" else "claims"):
        dc.run_gradient_canary_audit(preset=lightly_pretrained(), canaries=M, out_dir=out, seed=SEED,
                                     rounds=T, q=Q, n_real=N_REAL, plan_sims=2, trainer_cls=Forged)
    assert not (out / "audit.json").exists()


# ------------------------------------------------------------------------------------------ protocol

def test_commitment_recomputed_by_hand(audit):
    reveal = json.loads((audit.log_path.parent / "reveal.json").read_text())
    ids = reveal["canary_ids"]
    assert ids == [f"dirac:{j}" for j in audit.design.reserved]
    bits = reveal["bits"].encode("ascii")
    payload = bytes.fromhex(reveal["salt_hex"]) + json.dumps(ids, separators=(",", ":")).encode() + bits
    expected = "sha256:" + hashlib.sha256(payload).hexdigest()
    assert reveal["commitment"] == expected == audit.report.canaries["membership_commitment"]
    assert audit.privacy_claim["canary_commitment"] == expected
    assert reveal["bits"] == "".join("1" if s == 1 else "0" for s in audit.membership)
    assert cn.verify(expected, audit.membership, ids, bytes.fromhex(reveal["salt_hex"]))
    assert not cn.verify(expected, -audit.membership, ids, bytes.fromhex(reveal["salt_hex"]))


def test_canaries_are_added_slots_with_public_divisor(audit):
    claim, params = audit.privacy_claim, audit.report.claim["mechanism"]["params"]
    assert (claim["n"], claim["n_canary"]) == (N_REAL, M) == (params["n"], params["n_canary"])
    assert claim["divisor"] == params["divisor"] == Q * (N_REAL + M) == 152.0
    rounds = [e for e in _log(audit) if e["kind"] == "round"]
    assert [e["t"] for e in rounds] == list(range(1, T + 1))
    assert all(e["divisor"] == 152.0 and e["reserved"] == list(audit.design.reserved) for e in rounds)
    dim = 8192                      # the tiny-cpu LoRA ParamSpace has 8,192 entries (docs/audits.md)
    assert audit.design.reserved == tuple(range(dim - M, dim))      # the public "last m coordinates" rule


def test_epsilon_identical_with_and_without_canaries(audit):
    from mechanisms.dpgrpo.models import build_tiny_qwen2_policy
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.tasks import CharTokenizer
    from mechanisms.dpgrpo.trainer import DPTrainer

    spec = dc.resolve_preset("tiny-cpu")
    tok = CharTokenizer()
    model = build_tiny_qwen2_policy(0, tokenizer=tok)       # any LoRA policy: the claim does not read the model
    cfg = audit.design.config
    plain = DPTrainer(model, tok, SlotUniverse(N_REAL, torch.ones(N_REAL, dtype=torch.bool),
                                               spec.records(N_REAL, 0)), cfg, spec.verifier).privacy_claim
    with_canaries = audit.privacy_claim
    for key in ("q", "sigma", "T", "delta", "C", "epsilon"):
        assert plain[key] == with_canaries[key], key
    eps_plain = epsilon(PoissonGaussianEvent(plain["q"], plain["sigma"], plain["T"]), plain["delta"]).value
    params = audit.report.claim["mechanism"]["params"]
    assert eps_plain == params["epsilon_without_canaries"] == params["epsilon_with_canaries"] \
        == audit.epsilon_with_canaries == audit.report.claim["epsilon"]
    assert plain["n_canary"] == 0 and plain["divisor"] == Q * N_REAL


def test_scores_are_the_step_llr_of_the_logged_noisy_sums(audit):
    rounds = [e for e in _log(audit) if e["kind"] == "round"]
    U = np.array([e["U"] for e in rounds], dtype=np.float64)
    sigma, C = audit.design.config.sigma, audit.design.config.C
    y = U / (sigma * C)
    # log of the in/out likelihood ratio of y_t: ((1−q)·φ(y) + q·φ(y − 1/σ)) / φ(y), summed over the steps
    mix = np.logaddexp(np.log1p(-Q) + stats.norm.logpdf(y), np.log(Q) + stats.norm.logpdf(y - 1 / sigma))
    expected = np.sum(mix - stats.norm.logpdf(y), axis=0)
    np.testing.assert_allclose(audit.scores, expected, rtol=1e-9, atol=1e-9)


def test_scorer_never_receives_the_membership(audit, monkeypatch, tmp_path):
    seen = []
    real = cn.score_canaries

    def spy(score_fn, output, canaries):
        seen.append((score_fn, output, tuple(canaries)))
        return real(score_fn, output, canaries)

    monkeypatch.setattr(cn, "score_canaries", spy)
    membership = cn.draw_membership(M, seed=dc.membership_seed(SEED))      # the same coins, sealed again
    salt = bytes.fromhex(json.loads((audit.log_path.parent / "reveal.json").read_text())["salt_hex"])
    rep, frozen, signs = dc.analyse_log(audit.log_path, audit.design, membership, salt)
    (score_fn, view, canaries), = seen
    assert isinstance(score_fn, dc.StepLLR) and isinstance(view, dc.AuditorView)
    assert all(isinstance(c, dc.DiracCanary) for c in canaries)
    assert {f.name for f in dataclasses.fields(view)} == {"y", "reserved", "column"}     # no S, no diagnostics
    assert frozen.frozen_at < membership.revealed_at
    assert audit.scores_frozen_at < audit.membership_revealed_at
    np.testing.assert_array_equal(frozen.values, audit.scores)
    assert rep.result["eps_lower"] == audit.eps_lower and np.array_equal(signs, audit.membership)


def test_diagnostics_do_not_enter_the_statistic(audit, tmp_path):
    salt = bytes.fromhex(json.loads((audit.log_path.parent / "reveal.json").read_text())["salt_hex"])
    tampered = tmp_path / "tampered.jsonl"
    lines = []
    for e in _log(audit):
        if e["kind"] == "diagnostics":
            d = e["diagnostics"]
            d["canary_included"] = [1] * M
            d["canary_pre_clip_norms"] = {str(k): 123.0 for k in range(M)}
            d["cross_talk_reserved"] = [9.0] * M
        lines.append(json.dumps(e))
    tampered.write_text("\n".join(lines) + "\n")
    membership = cn.draw_membership(M, seed=dc.membership_seed(SEED))
    rep, frozen, _ = dc.analyse_log(tampered, audit.design, membership, salt)
    assert rep.result == audit.report.result
    np.testing.assert_array_equal(frozen.values, audit.scores)
    assert rep.diagnostics["canary_pre_clip_norm_max"] == 123.0 != audit.report.diagnostics["canary_pre_clip_norm_max"]
    # whereas the noisy sums do enter it: perturbing U changes the scores
    rounds_changed = tmp_path / "rounds.jsonl"
    changed = []
    for e in _log(audit):
        if e["kind"] == "round":
            e["U"] = [u + 5.0 for u in e["U"]]
        changed.append(json.dumps(e))
    rounds_changed.write_text("\n".join(changed) + "\n")
    _, frozen2, _ = dc.analyse_log(rounds_changed, audit.design, cn.draw_membership(M, seed=dc.membership_seed(SEED)),
                                   salt)
    assert not np.allclose(frozen2.values, audit.scores)


def _write(path, entries):
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def _edit_diagnostics(audit, edit):
    out = []
    for e in _log(audit):
        if e["kind"] == "diagnostics":
            edit(e["t"], e["diagnostics"])
        out.append(e)
    return out


def test_a_log_in_which_the_canaries_were_never_observed_is_refused(audit, tmp_path):
    """Each way the log can show unobserved canaries is a CanariesNotObserved naming what was not observed, raised
    before any score is frozen (docs/audits.md, "When the audit cannot see"); the untampered log is analysed."""
    salt = bytes.fromhex(json.loads((audit.log_path.parent / "reveal.json").read_text())["salt_hex"])
    first_included = next(e for e in _log(audit) if e["kind"] == "diagnostics" and any(
        e["diagnostics"]["canary_included"]))
    t0 = first_included["t"]
    k0 = first_included["diagnostics"]["canary_included"].index(1)

    def lost_norm(t, d):                  # what a trainer that lost the canary's slot reports: no canary norm
        if t == t0:
            d["canary_pre_clip_norms"].pop(str(k0))

    def masked(t, d):                     # a canary masked on J: its pre-clip norm is 0
        if t == t0:
            d["canary_pre_clip_norms"][str(k0)] = 0.0

    cases = {
        "missing": (None, "auditor log"),
        "no rounds": ([e for e in _log(audit) if e["kind"] != "round"], "round line"),
        "no diagnostics": ([e for e in _log(audit) if e["kind"] != "diagnostics"], "realised inclusions"),
        "lost slot": (_edit_diagnostics(audit, lost_norm), f"canary {k0} in round {t0}"),
        "masked canary": (_edit_diagnostics(audit, masked), f"canary {k0} in round {t0}"),
        "never included": (_edit_diagnostics(audit, lambda t, d: d.update(
            canary_included=[0] * M, canary_pre_clip_norms={})), "any canary in any round"),
        "all U zero": ([{**e, "U": [0.0] * M} if e["kind"] == "round" else e for e in _log(audit)],
                       "nonzero U_t[J]"),
    }
    for name, (entries, what) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        if entries is not None:
            _write(path, entries)
        membership = cn.draw_membership(M, seed=dc.membership_seed(SEED))
        with pytest.raises(CanariesNotObserved) as err:
            dc.analyse_log(path, audit.design, membership, salt)
        assert what in err.value.what, (name, str(err.value))
        assert membership.revealed_at is None                    # refused before S was revealed
        if name == "lost slot":
            assert "contributions" in err.value.why and "micro-batches" in err.value.why
    rep, _, _ = dc.analyse_log(_write(tmp_path / "as_logged.jsonl", _log(audit)), audit.design,
                               cn.draw_membership(M, seed=dc.membership_seed(SEED)), salt)
    assert rep.result == audit.report.result


def test_diagnostics_match_the_log(audit):
    diag = audit.report.diagnostics
    entries = [e["diagnostics"] for e in _log(audit) if e["kind"] == "diagnostics"]
    counts = np.sum([e["canary_included"] for e in entries], axis=0)
    present = audit.membership == 1
    assert diag["realized_inclusions_logged"] is True
    assert diag["never_sampled_in_canaries"] == int(np.sum(present & (counts == 0)))
    assert diag["absent_canaries_ever_sampled"] == 0 and not np.any(counts[~present])
    assert diag["inclusions_present_mean"] == pytest.approx(counts[present].mean())
    assert diag["inclusions_expected"] == Q * T
    assert diag["canary_pre_clip_norm_min"] == diag["canary_pre_clip_norm_max"] == 1.0     # = C: never clipped away
    assert diag["cross_talk_max_abs_over_sigma_C"] == 0.0                                  # masked real records
    assert diag["constant_reward_canary_groups_frac"] is None
    s_in, s_out = audit.scores[present], audit.scores[~present]
    pairs = (s_in[:, None] > s_out[None, :]).sum() + 0.5 * (s_in[:, None] == s_out[None, :]).sum()
    assert diag["auroc"] == pytest.approx(pairs / (s_in.size * s_out.size), rel=1e-12)


def test_artifact_and_private_files(audit):
    from privcheck.artifacts.schema import validate
    from privcheck.artifacts.writer import verify_seal

    doc = json.loads(audit.artifact.read_text())
    assert doc == audit.document and verify_seal(doc)
    validate(doc, name="audit.schema.json")
    assert doc["result"]["eps_lower"] == audit.eps_lower
    private = audit.log_path.parent
    assert private.name == "private" and private.parent == audit.artifact.parent
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    for name in ("auditor_log.jsonl", "reveal.json"):
        assert stat.S_IMODE(os.stat(private / name).st_mode) == 0o600
    with pytest.raises(InvalidParameter) as err:            # one audit per directory: the log is never appended to
        dc.run_gradient_canary_audit(canaries=M, out_dir=audit.artifact.parent, seed=SEED)
    assert err.value.name == "out"


# ------------------------------------------------------------------------------------------ bad input

@pytest.fixture
def no_work(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before validation")
    preset = dc.AUDIT_PRESETS["tiny-cpu"]
    monkeypatch.setitem(dc.AUDIT_PRESETS, "tiny-cpu", lambda: dataclasses.replace(preset(), build_policy=forbidden))
    monkeypatch.setattr(dc, "design_gradient_audit", forbidden)


@pytest.mark.parametrize("kwargs, name", [
    (dict(canaries=0), "canaries"), (dict(canaries=-3), "canaries"), (dict(canaries=2.5), "canaries"),
    (dict(canaries=10, q=0.0), "q"), (dict(canaries=10, q=1.5), "q"), (dict(canaries=10, q=float("nan")), "q"),
    (dict(canaries=10, preset="gpt-9"), "preset"), (dict(canaries=10, preset=None), "preset"),
    (dict(canaries=10, rounds=0), "rounds"), (dict(canaries=10, confidence=1.0), "confidence"),
    (dict(canaries=10, seed=-1), "seed"), (dict(canaries=10, reserved_rule="random"), "reserved_rule"),
    (dict(canaries=10, trainer_cls=object), "trainer_cls"),
])
def test_bad_input_raises_before_work_and_writes_nothing(no_work, tmp_path, kwargs, name):
    out = tmp_path / "out"
    with pytest.raises(InvalidParameter) as err:
        dc.run_gradient_canary_audit(out_dir=out, **kwargs)
    assert err.value.name == name
    assert not out.exists()


def test_more_canaries_than_coordinates_writes_nothing(tmp_path, monkeypatch, lightly_pretrained):
    monkeypatch.setattr(dc, "design_gradient_audit", lambda *a, **k: pytest.fail("planned before the check"))
    out = tmp_path / "out"
    with pytest.raises(InvalidParameter) as err:
        # tiny-cpu's LoRA ParamSpace has 8,192 entries (the lightly pretrained preset has the same model)
        dc.run_gradient_canary_audit(preset=lightly_pretrained(), canaries=8193, out_dir=out)
    assert err.value.name == "canaries" and not out.exists()


# ------------------------------------------------------------------------------------------ command line

def _parser():
    """The installed `privcheck` command line (the audit commands come from the entry point)."""
    return build_parser()


def test_cli_json_artifact_private_log_and_plots(tmp_path, capsys, lightly_pretrained, steinke_only):
    # n = 4 real records (m = 1 keeps the preset's q = 1/4 valid; the audit sets its own q), 16 canaries and a
    # lightly pretrained policy: the command line is tested here, the bounds by the module's audit (and how the
    # command prints them by test_cli_prints_both_bounds)
    lightly_pretrained("tiny-cpu-4", n=4, m=1)
    out = tmp_path / "run"
    args = _parser().parse_args(["audit", "dp-grpo", "--preset", "tiny-cpu-4", "--canaries", str(CLI_M), "--out",
                                 str(out), "--seed", "3", "--rounds", "4", "--q", "1", "--json"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert args.func(args) == 0
    finally:
        torch.set_num_threads(threads)
    doc = json.loads(capsys.readouterr().out)              # exactly one JSON object
    for key in ("eps_lower", "p_value_at_nominal", "rejects_nominal", "planned_eps_lower"):
        assert key in doc
    assert doc["eps_lower"] == doc["result"]["eps_lower"] and doc["planned_eps_lower"] == doc["power"][
        "planned_eps_lower"]
    assert doc["claim"]["mechanism"]["params"]["n_canary"] == CLI_M and doc["claim"]["mechanism"]["params"]["q"] == 1.0
    assert doc["claim"]["mechanism"]["params"]["steps"] == 4 and doc["canaries"]["m"] == CLI_M
    saved = json.loads((out / "audit.json").read_text())
    assert saved == {k: v for k, v in doc.items() if k in saved}
    for name in ("scores.png", "bound_vs_m.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert stat.S_IMODE(os.stat(out / "private" / "auditor_log.jsonl").st_mode) == 0o600


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_prints_both_bounds(audit, tmp_path, capsys, monkeypatch, as_json):
    """The command's output of the module's audit (its audit function replaced by one returning that result): the
    text table shows the Steinke bound with "none beyond one run", then the f-DP bound with its assumption; --json
    carries both, at the top level and in the sealed report."""
    from audits.cli import dpgrpo as cli

    monkeypatch.setattr(cli, "_audit_function", lambda canary_type: lambda **kwargs: audit)
    argv = ["audit", "dp-grpo", "--preset", "tiny-cpu", "--canaries", str(M), "--rounds", str(T), "--out",
            str(tmp_path / "run"), *(["--json"] if as_json else [])]
    args = _parser().parse_args(argv)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    block = audit.report.result[FDP_BLOCK]
    if as_json:
        doc = json.loads(out)
        assert doc["eps_lower"] == doc["result"]["eps_lower"] == audit.eps_lower
        assert doc[FDP_BLOCK] == doc["result"][FDP_BLOCK] == dict(block)
        return
    rows = {k.strip(): v.strip() for k, v in (line.split("  ", 1) for line in out.splitlines() if "  " in line)}
    assert float(rows["eps_lower"]) == pytest.approx(audit.eps_lower, rel=1e-9)
    assert rows["assumption"] == "none beyond one run"
    assert float(rows["eps_lower_fdp_claim_curve"]) == pytest.approx(block["eps_lower"], rel=1e-9)
    assert rows["assumption (fdp_claim_curve)"] == block["assumption"]
    labels = list(rows)
    assert labels.index("eps_lower") < labels.index("eps_lower_fdp_claim_curve")   # the Steinke bound first


@pytest.mark.parametrize("argv, name", [
    (["--preset", "nope", "--canaries", "10"], "preset"),
    (["--preset", "tiny-cpu", "--canaries", "0"], "canaries"),
    (["--preset", "tiny-cpu", "--canaries", "10", "--q", "2"], "q"),
])
def test_cli_bad_input_writes_nothing(no_work, tmp_path, argv, name):
    out = tmp_path / "run"
    args = _parser().parse_args(["audit", "dp-grpo", *argv, "--out", str(out)])
    with pytest.raises(InvalidParameter) as err:
        args.func(args)
    assert err.value.name == name and not out.exists()


# ------------------------------------------------------------------------------------------ runs without noise

def _noiseless_trainer():
    from mechanisms.dpgrpo.trainer import DPTrainer

    class NoNoise(DPTrainer):
        """The planted bug: the clipped sum is released without noise (public divisor kept, σ still claimed)."""

        def privatize(self, S):
            return S / self.divisor

    return NoNoise


@pytest.mark.slow
@pytest.mark.parametrize("noise", [False, True])
def test_a_tiny_cpu_run_without_noise_is_rejected_at_the_default_plan(noise, tmp_path):
    """tiny-cpu (light pretraining), the preset's own q = 0.25, T = 12, 4 real records, m = 1,000 canaries, ε = 3
    claimed at δ = 1/(10·n′) (below the ceiling ≈ 5.7): (3/4)^12 ≈ 3.2% of the present canaries are never sampled. The
    default (guarded) plan rejects the run whose noise was removed; the honest run with the same seed is not
    rejected. Seeded (trainer, membership, plan): deterministic."""
    torch.set_num_threads(1)
    res = dc.run_gradient_canary_audit(preset=light_preset(), canaries=1000, out_dir=None, seed=SEED, rounds=12,
                                       q=0.25, n_real=N_REAL, target_epsilon=3.0, plan_sims=20,
                                       trainer_cls=None if noise else _noiseless_trainer())
    power, rep = res.design.power, res.report
    assert power.noiseless["guarded"] is True and power.noiseless["miss_bound"] <= 1e-6
    assert rep.power["eps_ceiling"] > rep.claim["epsilon"] > 2.9
    assert rep.result["rejects_nominal"] is (not noise)
