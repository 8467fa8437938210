"""The DP-GRPO input-space canary audit (audits/dpgrpo/input_*.py, `--canary-type input_binary` of
audits/cli/dpgrpo.py; docs/audits.md, "Input-space binary canaries").

One seeded end-to-end audit (tiny-cpu model and task with the public binary-choice pretraining, 4 real records,
q = 0.5, T = 6, 48 added binary canaries, a 32-canary public pilot, ε = 8 at δ = 1/(10·n′)) runs once per module
and is inspected from several sides; a second one without the binary-choice phase measures the constant-reward
diagnostic. Expected values are recomputed here independently of the code under test: the two commitments from
their byte layout sha256(salt ‖ ids ‖ bits) with hashlib, the scores from the model's logits with PEFT's own
`disable_adapter()` (not the trainer's fast adapter switch), the constant-reward fraction and inclusion counts from
the raw log, the AUROC by counting pairs, ε with and without canaries from the accountant's entry point.

Why the seeded assertions are not fragile: at this scale the canaries carry almost no signal (the pilot's plan has
planned bound 0), so the test asserts validity — ε_lower ≤ ceiling ε_max(48) ≈ 2.6 < certified 8 whatever the
scores — and the protocol, never a positive bound. The constant-reward comparison is ≈ 0.15 with the binary phase
against ≈ 0.98 without (tiny-cpu, G = 4): the two arms would need to swap for the test to fail.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import stat

import numpy as np
import pytest
import torch

from audits import canary as cn
from audits.dpgrpo import gradient_canary as dc
from audits.dpgrpo import input_canary as ic
from privcheck.accounting import DPSGDPlan, PoissonGaussianEvent, epsilon
from privcheck.cli import build_parser
from privcheck.errors import CanariesNotObserved, InvalidParameter

SEED, M, T, Q, N_REAL, PILOT = 5, 48, 6, 0.5, 4, 32
CLI_M, CLI_T = 16, 2      # canaries and rounds of the command-line test
TARGET_EPS = 8.0


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def audit(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("dpgrpo_input_audit")
    return ic.run_input_canary_audit(preset="tiny-cpu", canaries=M, out_dir=out, seed=SEED, rounds=T, q=Q,
                                     n_real=N_REAL, pilot_canaries=PILOT, plan_sims=50)


@pytest.fixture(scope="module")
def audit_without_binary_pretraining(one_torch_thread):
    # same (q, T, δ, ε) as `audit`, so σ's calibration is shared; a 2-canary pilot keeps it cheap
    return ic.run_input_canary_audit(preset="tiny-cpu", canaries=M, seed=SEED + 1, rounds=T, q=Q, n_real=N_REAL,
                                     pilot_canaries=2, pretraining=None, plan_sims=20)


def _log(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _reveal(res):
    return json.loads((res.log_path.parent / "reveal.json").read_text())


# ------------------------------------------------------------------------------------------ the end-to-end figure

def test_bound_is_valid_and_below_the_certified_epsilon(audit):
    rep = audit.report
    eps = rep.claim["epsilon"]
    assert 7.9 < eps <= TARGET_EPS                      # calibrated for ε = 8, never above it
    assert rep.claim["delta"] == 1 / (10 * (N_REAL + M))
    assert 0 <= audit.eps_lower <= rep.power["eps_ceiling"] < eps
    assert rep.result["rejects_nominal"] is False and rep.result["p_value_at_nominal"] > 0.05
    assert rep.method == "steinke_one_run"
    assert (rep.canaries["type"], rep.canaries["score"], rep.canaries["added_slots"]) == \
        ("input_space", "loss_delta_vs_base", True)
    assert rep.canaries["m"] == M and rep.canaries["n_in"] + rep.canaries["n_out"] == M
    assert rep.claim["accountant"] == "pld" and rep.claim["neighboring"] == "add_remove"
    assert rep.randomness["membership"] == "seeded" and rep.randomness["audit_release"] is False
    assert rep.claim["mechanism"]["params"]["privacy_release"] is False


def test_guess_rule_comes_from_a_public_pilot_before_training(audit):
    rep, design = audit.report, audit.design
    pilot, power = design.pilot, design.power
    # the pilot's scores with the run's public q and T (the noiseless guard's never-sampled fraction (1 − q)^T)
    assert power.score_model == f"empirical(n_in={PILOT // 2}, n_out={PILOT // 2}, q={Q!r}, T={T})" \
        == rep.power["score_model"]
    assert power.noiseless is not None
    assert pilot.in_scores.size == pilot.out_scores.size == PILOT // 2          # balanced pilot coins
    assert not set(pilot.prompts) & {c.prompt for c in design.canaries}         # public prompts apart
    assert (rep.guessing["k_plus"], rep.guessing["k_minus"]) == (power.k_plus, power.k_minus)
    assert rep.result["guesses"] == power.k_plus + power.k_minus
    assert rep.guessing["preregistration"] == design.preregistration.digest
    assert design.preregistration.registered_at < audit.membership_revealed_at
    assert rep.power["planned_eps_lower"] == power.planned_eps_lower
    assert power.eps_nominal == rep.claim["epsilon"] and power.delta == rep.claim["delta"]
    summary = rep.claim["mechanism"]["params"]["pilot"]
    assert summary["canaries"] == PILOT and summary["auroc"] == pytest.approx(pilot.auroc)
    # ceiling < claim: the plan promises nothing about a noiseless run, so no noiseless pilot is trained
    assert power.noiseless["guarded"] is False and power.noiseless["assumption"] is None
    assert design.noiseless_check is None and rep.claim["mechanism"]["params"]["noiseless_pilot"] is None
    assert not (audit.log_path.parent / "noiseless_pilot_log.jsonl").exists()
    assert audit.headline()["planned_eps_lower"] == power.planned_eps_lower


# ------------------------------------------------------------------------------------------ protocol

def _commitment(salt_hex, ids, bits):
    payload = bytes.fromhex(salt_hex) + json.dumps(ids, separators=(",", ":")).encode() + bits.encode("ascii")
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def test_both_commitments_recomputed_by_hand(audit):
    reveal = _reveal(audit)
    ids = reveal["canary_ids"]
    assert ids == [f"input:{c.prompt}" for c in audit.design.canaries]
    s_commitment = _commitment(reveal["salt_hex"], ids, reveal["bits"])
    assert reveal["commitment"] == s_commitment == audit.report.canaries["membership_commitment"]
    assert audit.privacy_claim["canary_commitment"] == s_commitment
    assert reveal["bits"] == "".join("1" if s == 1 else "0" for s in audit.membership)
    label_commitment = _commitment(reveal["label_salt_hex"], ids, "".join(reveal["labels"]))   # "0"/"1" bytes
    params = audit.report.claim["mechanism"]["params"]
    assert reveal["label_commitment"] == label_commitment == params["canary_labels_commitment"]
    assert reveal["labels"] == list(audit.labels)
    assert label_commitment != s_commitment


def test_secret_labels_are_drawn_apart_from_the_membership(audit):
    assert list(inspect.signature(ic.draw_labels).parameters) == ["m", "seed"]      # S is not an input
    assert ic.label_seed(SEED) != dc.membership_seed(SEED)
    assert audit.labels == ic.draw_labels(M, seed=ic.label_seed(SEED))             # a function of its seed alone
    assert [c.record().answer for c in audit.design.canaries] == list(audit.labels)  # the verifier's reference
    assert set(audit.labels) == {"0", "1"}
    unseeded = np.array([int(x) for x in ic.draw_labels(2000)])                     # OS entropy
    assert 850 <= unseeded.sum() <= 1150                                            # P(outside) < 1e-11


def test_canaries_are_added_slots_with_the_public_divisor(audit):
    claim, params = audit.privacy_claim, audit.report.claim["mechanism"]["params"]
    assert (claim["n"], claim["n_canary"]) == (N_REAL, M) == (params["n"], params["n_canary"])
    assert claim["divisor"] == params["divisor"] == params["trainer_divisor"] == Q * (N_REAL + M) == 26.0
    entries = _log(audit.log_path)
    assert [e["t"] for e in entries if e["kind"] == "round"] == list(range(1, T + 1))
    assert all(e["divisor"] == 26.0 for e in entries if e["kind"] == "round")
    assert all(len(e["diagnostics"]["canary_included"]) == M for e in entries if e["kind"] == "diagnostics")
    assert all(c.prompt.endswith("=") and len(c.prompt) == 7 for c in audit.design.canaries)
    assert len({c.prompt for c in audit.design.canaries}) == M


def test_epsilon_identical_with_and_without_canaries(audit):
    from mechanisms.dpgrpo.models import build_tiny_qwen2_policy
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.tasks import CharTokenizer
    from mechanisms.dpgrpo.trainer import DPTrainer

    spec = dc.resolve_preset("tiny-cpu")
    tok = CharTokenizer()
    cfg = audit.design.config
    plain = DPTrainer(build_tiny_qwen2_policy(0, tokenizer=tok), tok,
                      SlotUniverse(N_REAL, torch.ones(N_REAL, dtype=torch.bool), spec.records(N_REAL, 0)), cfg,
                      spec.verifier).privacy_claim
    for key in ("q", "sigma", "T", "delta", "C", "epsilon"):
        assert plain[key] == audit.privacy_claim[key], key
    eps_plain = epsilon(PoissonGaussianEvent(plain["q"], plain["sigma"], plain["T"]), plain["delta"]).value
    params = audit.report.claim["mechanism"]["params"]
    assert eps_plain == params["epsilon_without_canaries"] == params["epsilon_with_canaries"] \
        == audit.epsilon_with_canaries == audit.report.claim["epsilon"]
    assert plain["n_canary"] == 0 and plain["divisor"] == Q * N_REAL


def test_certified_epsilon_is_the_accountant_epsilon_of_the_audit_plan(audit):
    plan, claim = audit.design.plan, audit.report.claim
    params = claim["mechanism"]["params"]
    assert isinstance(plan, DPSGDPlan) and (plan.records, plan.canaries) == (N_REAL, M)
    assert (params["q"], params["sigma"], params["steps"], params["C"], claim["delta"]) == \
        (plan.sampling_rate, plan.noise_multiplier, plan.steps, plan.clip_norm, plan.delta)
    expected = epsilon(PoissonGaussianEvent(plan.sampling_rate, plan.noise_multiplier, plan.steps), plan.delta).value
    assert claim["epsilon"] == expected == audit.epsilon_with_canaries == audit.privacy_claim["epsilon"]
    assert audit.design.config.plan == plan.replace(canaries=0)
    assert params["divisor"] == plan.divisor == audit.privacy_claim["divisor"]


def _option_logprobs_by_hand(model, tok, prompt, adapter: bool):
    """log π(o⏎ | prompt) for o = "0", "1" from a full forward pass and log_softmax (PEFT's disable_adapter)."""
    out = []
    for option in ic.OPTIONS:
        ids = tok.encode(prompt) + tok.encode(option) + [tok.eos_id]
        x = torch.tensor([ids])
        with torch.no_grad():
            if adapter:
                logits = model(input_ids=x).logits
            else:
                with model.disable_adapter():
                    logits = model(input_ids=x).logits
        logp = torch.log_softmax(logits[0].double(), dim=-1)
        P = len(tok.encode(prompt))
        out.append(float(logp[P - 1, ids[P]] + logp[P, ids[P + 1]]))
    return np.array(out)


def test_scores_are_the_label_log_odds_against_the_public_base(audit):
    model, tok = audit.model, audit.tokenizer
    model.eval()
    expected = []
    for c in audit.design.canaries:
        k = ic.OPTIONS.index(c.label)
        trained = _option_logprobs_by_hand(model, tok, c.prompt, adapter=True)
        base = _option_logprobs_by_hand(model, tok, c.prompt, adapter=False)
        expected.append((trained[k] - trained[1 - k]) - (base[k] - base[1 - k]))
    np.testing.assert_allclose(audit.scores, expected, rtol=1e-4, atol=1e-5)     # float32 model, two code paths
    assert np.ptp(audit.scores) > 0                                                # training moved the policy


def _reanalyse(audit, log_path=None):
    reveal = _reveal(audit)
    membership = cn.draw_membership(M, seed=dc.membership_seed(SEED))              # the same coins, sealed again
    return ic.analyse(audit.model, audit.tokenizer, log_path or audit.log_path, audit.design, membership,
                      bytes.fromhex(reveal["salt_hex"]), bytes.fromhex(reveal["label_salt_hex"])), membership


def test_scorer_never_receives_the_membership(audit, monkeypatch):
    seen = []
    real = cn.score_canaries

    def spy(score_fn, output, canaries):
        seen.append((score_fn, output, tuple(canaries)))
        return real(score_fn, output, canaries)

    monkeypatch.setattr(cn, "score_canaries", spy)
    (rep, frozen, signs), membership = _reanalyse(audit)
    (score_fn, view, canaries), = seen
    assert isinstance(score_fn, ic.LogOddsDelta) and isinstance(view, ic.PolicyView)
    assert {f.name for f in dataclasses.fields(view)} == {"model", "tokenizer", "max_prompt_len"}
    assert all(isinstance(c, ic.InputCanary) for c in canaries)
    assert {f.name for f in dataclasses.fields(ic.InputCanary)} == {"id", "prompt", "label"}
    assert frozen.frozen_at < membership.revealed_at and audit.scores_frozen_at < audit.membership_revealed_at
    np.testing.assert_array_equal(frozen.values, audit.scores)
    assert rep.result == audit.report.result and np.array_equal(signs, audit.membership)


def test_diagnostics_match_the_log_and_stay_out_of_the_statistic(audit, tmp_path):
    diag = audit.report.diagnostics
    lines = [e["diagnostics"] for e in _log(audit.log_path) if e["kind"] == "diagnostics"]
    counts = np.sum([d["canary_included"] for d in lines], axis=0)
    present = audit.membership == 1
    groups = [sum(d["canary_included"]) for d in lines]
    constant = [d["canary_constant_group_fraction"] or 0.0 for d in lines]
    assert diag["realized_inclusions_logged"] is True
    assert diag["canary_groups_sampled"] == sum(groups) == counts.sum()
    assert diag["constant_reward_canary_groups_frac"] == pytest.approx(
        sum(g * f for g, f in zip(groups, constant)) / sum(groups), rel=1e-12)
    assert diag["never_sampled_in_canaries"] == int(np.sum(present & (counts == 0)))
    assert diag["absent_canaries_ever_sampled"] == 0 and not np.any(counts[~present])
    assert diag["inclusions_expected"] == Q * T
    assert diag["inclusions_present_mean"] == pytest.approx(counts[present].mean())
    s_in, s_out = audit.scores[present], audit.scores[~present]
    pairs = (s_in[:, None] > s_out[None, :]).sum() + 0.5 * (s_in[:, None] == s_out[None, :]).sum()
    assert diag["auroc"] == pytest.approx(pairs / (s_in.size * s_out.size), rel=1e-12)
    tampered = tmp_path / "tampered.jsonl"
    rows = []
    for e in _log(audit.log_path):
        if e["kind"] == "diagnostics":
            e["diagnostics"]["canary_included"] = [1] * M
            e["diagnostics"]["canary_constant_group_fraction"] = 1.0
        rows.append(json.dumps(e))
    tampered.write_text("\n".join(rows) + "\n")
    (rep, frozen, _), _ = _reanalyse(audit, tampered)
    assert rep.result == audit.report.result
    np.testing.assert_array_equal(frozen.values, audit.scores)
    assert rep.diagnostics["constant_reward_canary_groups_frac"] == 1.0 != diag["constant_reward_canary_groups_frac"]


def test_a_log_without_any_canary_inclusion_is_refused(audit, tmp_path):
    """Canaries never included (or a log without the hooks' inclusions) leave the trained policy no trace to score:
    CanariesNotObserved before any score is frozen, not ε_lower = 0 (docs/audits.md, "When the audit cannot
    see")."""
    cases = {"never included": ("any canary in any round", lambda e: e["diagnostics"].update(
                 canary_included=[0] * M, canary_pre_clip_norms={})),
             "no inclusion bits": ("realised inclusions", lambda e: e["diagnostics"].pop("canary_included"))}
    for name, (what, edit) in cases.items():
        rows = []
        for e in _log(audit.log_path):
            if e["kind"] == "diagnostics":
                edit(e)
            rows.append(json.dumps(e))
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(rows) + "\n")
        membership = cn.draw_membership(M, seed=dc.membership_seed(SEED))
        with pytest.raises(CanariesNotObserved) as err:
            ic.analyse(audit.model, audit.tokenizer, path, audit.design, membership, b"", b"")
        assert what in err.value.what and membership.revealed_at is None


def test_binary_choice_pretraining_lowers_the_constant_reward_fraction(audit, audit_without_binary_pretraining):
    with_phase = audit.report
    without = audit_without_binary_pretraining.report
    frac_with = with_phase.diagnostics["constant_reward_canary_groups_frac"]
    frac_without = without.diagnostics["constant_reward_canary_groups_frac"]
    assert 0 <= frac_with < frac_without <= 1
    assert with_phase.diagnostics["canary_groups_sampled"] > 50 and without.diagnostics["canary_groups_sampled"] > 50
    assert with_phase.diagnostics["base_option_mass_mean"] > without.diagnostics["base_option_mass_mean"]
    phase = with_phase.claim["mechanism"]["params"]["public_pretraining"]["binary_choice"]
    assert (phase["steps"], phase["batch"], phase["binary_fraction"]) == (60, 64, 0.5)
    assert "independent of the secret canary labels" in phase["labels"]
    assert without.claim["mechanism"]["params"]["public_pretraining"]["binary_choice"] is None
    assert 0 <= audit_without_binary_pretraining.eps_lower <= without.claim["epsilon"]


def test_artifact_and_private_files(audit):
    from privcheck.artifacts.schema import validate
    from privcheck.artifacts.writer import verify_seal

    doc = json.loads(audit.artifact.read_text())
    assert doc == audit.document and verify_seal(doc)
    validate(doc, name="audit.schema.json")
    private = audit.log_path.parent
    assert private.name == "private" and private.parent == audit.artifact.parent
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    for name in ("auditor_log.jsonl", "pilot_log.jsonl", "reveal.json"):
        assert stat.S_IMODE(os.stat(private / name).st_mode) == 0o600
    with pytest.raises(InvalidParameter) as err:            # one audit per directory
        ic.run_input_canary_audit(canaries=M, out_dir=audit.artifact.parent, seed=SEED)
    assert err.value.name == "out"


def test_public_prompts_and_pretraining_examples():
    import random

    prompts = ic.public_prompts(500, 3, random.Random(1))
    assert len(set(prompts)) == 500 and all(len(p) == 4 and p[:3].isdigit() and p[3] == "=" for p in prompts)
    examples = ic.BinaryPretraining(binary_fraction=1.0).examples(6)(random.Random(2), 400)
    labels = [e.answer for e in examples]
    assert all("+" not in e.prompt and len(e.prompt) == 7 for e in examples)
    assert 140 <= labels.count("0") <= 260 and set(labels) == {"0", "1"}     # public labels, ~uniform
    mixed = ic.BinaryPretraining().examples(6)(random.Random(3), 400)
    assert 100 <= sum("+" in e.prompt for e in mixed) <= 300                   # addition examples kept


# ------------------------------------------------------------------------------------------ runs without noise

def _pilot_run(scores, present, inclusions):
    from audits.dpgrpo.input_pilot import PilotRun
    return PilotRun(np.array(scores, dtype=float), np.array(present, dtype=bool), np.array(inclusions), None)


def test_noiseless_check_counts_sampled_included_canaries_above_all_others():
    from audits.dpgrpo.input_noiseless import NoiselessCheck

    # canaries 0–2 sampled and included, 3 included but never sampled, 4–5 excluded
    present, inclusions = [1, 1, 1, 1, 0, 0], [2, 1, 3, 0, 0, 0]
    full = NoiselessCheck.from_run(_pilot_run([9, 8, 7, 1, 2, 0], present, inclusions), k_plus=2, k_minus=1, m=6)
    assert (full.sampled_included, full.top_pure, full.auroc) == (3, 3, 1.0)
    assert full.separated and full.assumption_met and full.top_pure_needed == 3
    # one sampled included canary (score 1) below an excluded one (2): top-only rules up to 2 of 6 still hold
    part = _pilot_run([9, 8, 1, 0, 2, 0], present, inclusions)
    top2 = NoiselessCheck.from_run(part, k_plus=2, k_minus=0, m=6)
    assert (top2.top_pure, top2.top_pure_needed, top2.separated, top2.assumption_met) == (2, 2, False, True)
    assert top2.auroc == pytest.approx((3 + 3 + 2) / 9)     # by hand: rest = {0, 2, 0}; 9, 8 beat all, 1 beats two
    assert NoiselessCheck.from_run(part, k_plus=3, k_minus=0, m=6).assumption_met is False
    assert NoiselessCheck.from_run(part, k_plus=2, k_minus=1, m=6).assumption_met is False   # bottom: needs all
    # the pilot's scale: k₊ = 20 of m = 60 audit canaries needs the top 2 of 6 pilot canaries
    assert NoiselessCheck.from_run(part, k_plus=20, k_minus=0, m=60).assumption_met is True
    # a tie with a non-sampled canary counts against the assumption
    tied = NoiselessCheck.from_run(_pilot_run([9, 2, 7, 1, 2, 0], present, inclusions), k_plus=3, k_minus=0, m=6)
    assert tied.top_pure == 2 and tied.assumption_met is False and "NOT MET" in tied.sentence()
    assert "supports" in full.sentence() and full.to_json()["assumption_met"] is True


def test_noiseless_check_is_added_to_the_plan_without_changing_its_rule():
    from audits.dpgrpo.input_noiseless import NoiselessCheck, with_noiseless_check
    from audits.statistics.power import plan
    from audits.statistics.score_models import Empirical

    rng = np.random.default_rng(0)
    model = Empirical(rng.normal(1, 1, 400), rng.normal(0, 1, 400), 0.5, 10)
    power = plan(200, delta=1e-4, confidence=0.95, eps_nominal=1.0, score_model=model, sims=5, seed=1)
    assert power.noiseless["guarded"] is True
    check = NoiselessCheck.from_run(_pilot_run([1, 0], [1, 0], [1, 0]), k_plus=power.k_plus, k_minus=0, m=200)
    checked = with_noiseless_check(power, check)
    assert checked.noiseless == {**power.noiseless, "assumption": check.to_json()}
    assert (checked.k_plus, checked.k_minus, checked.planned_eps_lower) == \
        (power.k_plus, power.k_minus, power.planned_eps_lower)
    assert checked.message == power.message + check.sentence()
    assert with_noiseless_check(power, None).noiseless["assumption"] is None
    unguarded = plan(200, delta=1e-4, confidence=0.95, eps_nominal=1.0, score_model=Empirical(
        rng.normal(1, 1, 400), rng.normal(0, 1, 400)), sims=5, seed=1)
    assert unguarded.noiseless is None and with_noiseless_check(unguarded, check) is unguarded


def test_noiseless_trainer_releases_the_clipped_sum_over_the_divisor():
    from audits.dpgrpo.input_noiseless import noiseless_trainer
    from mechanisms.dpgrpo.trainer import DPTrainer

    cls = noiseless_trainer(DPTrainer)
    assert issubclass(cls, DPTrainer) and cls.__name__ == "NoiselessDPTrainer"
    fake = type("Fake", (), {"divisor": 4.0})()
    S = torch.tensor([1.0, -2.0, 8.0])
    assert torch.equal(cls.privatize(fake, S), torch.tensor([0.25, -0.5, 2.0]))


def _no_noise():
    from mechanisms.dpgrpo.trainer import DPTrainer

    class NoNoise(DPTrainer):
        """The planted bug: the clipped sum is released without noise (public divisor kept, σ still claimed)."""

        def privatize(self, S):
            return S / self.divisor

    return NoNoise


NL_M, NL_T, NL_EPS, NL_SEED = 200, 10, 2.0, 1     # the guarded configuration (ceiling ≈ 3.9 > ε = 2)


@pytest.mark.slow
@pytest.mark.parametrize("noise", [False, True])
def test_a_tiny_cpu_input_space_run_without_noise_is_flagged_by_the_noiseless_pilot(noise):
    """tiny-cpu, 4 real records, q = 0.5, T = 10, m = 200 input-space canaries, a 200-canary pilot, ε = 2 claimed
    at δ = 1/(10·n′) (σ calibrated; below the ceiling ≈ 3.9, so the plan is guarded). The tiny policy does not
    memorise its canaries even without noise (docs/audits.md, "Pilot score models"), so the guard's assumption fails:
    the public pilot retrained without noise says so, and indeed neither the noiseless run (NoNoise, same seed) nor
    the honest one is rejected. Seeded (trainers, membership, labels, prompts, pilot, plan): deterministic."""
    res = ic.run_input_canary_audit(preset="tiny-cpu", canaries=NL_M, seed=NL_SEED, rounds=NL_T, q=Q,
                                    n_real=N_REAL, pilot_canaries=NL_M, target_epsilon=NL_EPS, plan_sims=20,
                                    trainer_cls=None if noise else _no_noise())
    power, rep, check = res.design.power, res.report, res.design.noiseless_check
    plan = res.design.plan
    certified = epsilon(PoissonGaussianEvent(plan.sampling_rate, plan.noise_multiplier, plan.steps), plan.delta).value
    assert rep.claim["epsilon"] == certified and NL_EPS - 1e-3 < certified <= NL_EPS
    assert power.noiseless["guarded"] is True and power.noiseless["miss_bound"] <= 1e-6
    assert rep.power["eps_ceiling"] > rep.claim["epsilon"] and power.k_minus == 0
    # the check: the public pilot without noise, ranked here from its own log and scores
    assert check is not None and power.noiseless["assumption"] == check.to_json() \
        == rep.claim["mechanism"]["params"]["noiseless_pilot"]
    assert check.pilot_canaries == NL_M and check.top_pure_needed == power.k_plus      # pilot as large as the audit
    assert check.top_pure < check.top_pure_needed and check.assumption_met is False
    assert "NOISELESS GUARD ASSUMPTION NOT MET" in power.message
    if not noise:                   # this arm's own pilot had no noise: the check retrained exactly that pilot
        assert check.auroc == pytest.approx(res.design.pilot.auroc, abs=1e-12)
    # the warning is borne out: the run without noise separates no better than chance-level and escapes the rule
    present = res.membership == 1
    s_in, s_out = res.scores[present], res.scores[~present]
    auroc = ((s_in[:, None] > s_out[None, :]).sum() + 0.5 * (s_in[:, None] == s_out[None, :]).sum()) / (
        s_in.size * s_out.size)
    assert 0.4 < auroc < 0.65
    assert rep.result["rejects_nominal"] is False and rep.result["guesses"] == power.k_plus


# ------------------------------------------------------------------------------------------ bad input

@pytest.fixture
def no_work(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before validation")
    preset = dc.AUDIT_PRESETS["tiny-cpu"]
    monkeypatch.setitem(dc.AUDIT_PRESETS, "tiny-cpu", lambda: dataclasses.replace(preset(), build_policy=forbidden))
    monkeypatch.setattr(ic, "audit_plan", forbidden)
    monkeypatch.setattr(dc, "design_gradient_audit", forbidden)


@pytest.mark.parametrize("kwargs, name", [
    (dict(canaries=1), "canaries"), (dict(canaries=0), "canaries"), (dict(canaries=2.5), "canaries"),
    (dict(canaries=10, q=0.0), "q"), (dict(canaries=10, q=1.5), "q"), (dict(canaries=10, preset="gpt-9"), "preset"),
    (dict(canaries=10, rounds=0), "rounds"), (dict(canaries=10, confidence=1.0), "confidence"),
    (dict(canaries=10, seed=-1), "seed"), (dict(canaries=10, n_real=0), "n_real"),
    (dict(canaries=10, target_epsilon=-1.0), "target_epsilon"), (dict(canaries=10, C=0.0), "C"),
    (dict(canaries=10, pilot_canaries=1), "pilot_canaries"), (dict(canaries=10, prompt_digits=0), "prompt_digits"),
    (dict(canaries=10, prompt_digits=16), "prompt_digits"), (dict(canaries=10, prompt_digits=1), "prompt_digits"),
    (dict(canaries=10, pretraining="yes"), "pretraining"), (dict(canaries=10, plan_sims=0), "plan_sims"),
    (dict(canaries=10, trainer_cls=object), "trainer_cls"),
])
def test_bad_input_raises_before_work_and_writes_nothing(no_work, tmp_path, kwargs, name):
    out = tmp_path / "out"
    with pytest.raises(InvalidParameter) as err:
        ic.run_input_canary_audit(out_dir=out, **kwargs)
    assert err.value.name == name
    assert not out.exists()


@pytest.mark.parametrize("kwargs, name", [
    (dict(steps=0), "pretraining.steps"), (dict(lr=0.0), "pretraining.lr"), (dict(batch=0), "pretraining.batch"),
    (dict(binary_fraction=0.0), "pretraining.binary_fraction"),
    (dict(binary_fraction=1.5), "pretraining.binary_fraction"),
])
def test_bad_pretraining_raises(kwargs, name):
    with pytest.raises(InvalidParameter) as err:
        ic.BinaryPretraining(**kwargs)
    assert err.value.name == name


# ------------------------------------------------------------------------------------------ command line

def _parser():
    """The installed `privcheck` command line (the audit commands come from the entry point)."""
    return build_parser()


def test_cli_input_binary_json_artifact_and_plots(tmp_path, capsys, lightly_pretrained):
    # n = N_REAL real records (m = 1 keeps the preset's q = 1/4 valid; the audit sets its own q), fewer canaries
    # and rounds, a lightly pretrained policy: the command line is tested here, the audit by the module's fixture
    lightly_pretrained("tiny-cpu-4", n=N_REAL, m=1)
    out = tmp_path / "run"
    args = _parser().parse_args(["audit", "dp-grpo", "--preset", "tiny-cpu-4", "--canaries", str(CLI_M),
                                 "--canary-type", "input_binary", "--out", str(out), "--seed", "3",
                                 "--rounds", str(CLI_T), "--q", str(Q), "--json"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)              # exactly one JSON object
    for key in ("eps_lower", "p_value_at_nominal", "rejects_nominal", "planned_eps_lower"):
        assert key in doc
    assert (doc["canaries"]["type"], doc["canaries"]["score"], doc["canaries"]["m"]) == \
        ("input_space", "loss_delta_vs_base", CLI_M)
    assert doc["claim"]["mechanism"]["params"]["n_canary"] == CLI_M and doc["claim"]["mechanism"]["params"]["q"] == Q
    assert doc["claim"]["mechanism"]["params"]["steps"] == CLI_T
    assert doc["power"]["score_model"] == (f"empirical(n_in={CLI_M // 2}, n_out={CLI_M // 2}, "
                                          f"q={Q!r}, T={CLI_T})")   # pilot = --canaries; the run's q, T
    saved = json.loads((out / "audit.json").read_text())
    assert saved == {k: v for k, v in doc.items() if k in saved}
    for name in ("scores.png", "bound_vs_m.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert stat.S_IMODE(os.stat(out / "private" / "pilot_log.jsonl").st_mode) == 0o600


@pytest.mark.parametrize("argv, name", [
    (["--canary-type", "input"], "canary_type"),
    (["--canary-type", "input_binary", "--canaries", "1"], "canaries"),
])
def test_cli_bad_input_writes_nothing(no_work, tmp_path, argv, name):
    out = tmp_path / "run"
    base = ["audit", "dp-grpo", "--preset", "tiny-cpu", "--canaries", "10", "--out", str(out)]
    args = _parser().parse_args(base + argv)
    with pytest.raises(InvalidParameter) as err:
        args.func(args)
    assert err.value.name == name and not out.exists()
