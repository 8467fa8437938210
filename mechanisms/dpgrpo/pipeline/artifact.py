"""The run artifact (`privcheck.dpgrpo.run/1`, schema `dpgrpo_run`): one document per arm and replicate.

`run_document(...)` assembles it from the public configuration and inputs, the privacy entry, public telemetry
(functions of the noisy updates and released weights only), public evaluations, timing (outside the guarantee),
the environment and the verification results. The privacy entry (`privacy_block`) takes ε only from the
privacy plan (`plan.epsilon()`), and its RDP cross-check and conversions from `privcheck.accounting` on the
plan's event and ε; it never computes an ε itself. `privacy_release` is true only for a complete OS-entropy run
of a private arm whose verification suite ran and passed; otherwise `release_blockers` says why.
"""

from __future__ import annotations

import math
import uuid

from mechanisms.dpgrpo.pipeline.inputs import verifier_sha256
from mechanisms.dpgrpo.pipeline.setup import RunSetup
from privcheck.serialization import jsonable, utc_now

__all__ = ["RUN_SCHEMA", "RUN_SCHEMA_ID", "assumptions_block", "environment_block", "finite_or_none",
           "identity_block", "privacy_block", "run_document"]

RUN_SCHEMA_ID = "privcheck.dpgrpo.run/1"
RUN_SCHEMA = "dpgrpo_run"            # privcheck/schemas/dpgrpo_run.schema.json


def finite_or_none(x):
    """`x` when it is a finite number, else None (the artifact's convention for a missing measurement)."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def privacy_block(plan, preset, *, target_epsilon=None) -> dict | None:
    """The artifact's `privacy` entry from the privacy plan (None for the non-private arm, which has none).

    ε is `plan.epsilon()` (PLD at the plan's event and δ); the RDP figure is
    `privcheck.accounting.epsilon(plan.event, δ, method="rdp")`; the replace-one and group pairs convert the
    plan's ε with `privcheck.accounting.replace_one` / `group_privacy`."""
    if plan is None:
        return None
    from privcheck.accounting import epsilon, group_privacy, replace_one
    from privcheck.environment import package_version
    from privcheck.errors import InvalidParameter

    pld = plan.epsilon()
    rdp = epsilon(plan.event, plan.delta, method="rdp")
    eps = pld.value
    derived = {"replace_one": None, "group": []}
    if math.isfinite(eps) and eps > 0:
        try:
            r1 = replace_one(eps, plan.delta)
            derived["replace_one"] = [r1.value, r1.details["delta"]]
        except InvalidParameter as err:       # (1 + e^ε)·δ ≥ 1: no replace-one guarantee at this (ε, δ)
            derived["replace_one_refused"] = err.allowed
        for k in (2,):
            try:
                g = group_privacy(eps, plan.delta, k)
            except InvalidParameter as err:   # k·e^{(k−1)ε}·δ ≥ 1: no group guarantee at this (ε, δ)
                derived["group"].append({"k": k, "epsilon": None, "delta": None, "refused": err.allowed})
                continue
            derived["group"].append({"k": k, "epsilon": g.value, "delta": g.details["delta"]})
    derived["note"] = "certified conversions (Corollary 1, Proposition 1); a converted δ ≥ 1 is refused (vacuous)"
    cal = plan.calibration
    calibration = None
    if cal is not None:
        calibration = {"target": cal.target_epsilon, "bracket": list(cal.bracket), "epsilon": cal.epsilon,
                       "source": "calibrated (privcheck.accounting.calibrate)"}
    elif preset.sigma_bracket is not None:
        # A precomputed σ carries its bracket, never an ε: the achieved ε is the plan's, recomputed here.
        calibration = {"target": target_epsilon, "bracket": list(preset.sigma_bracket), "epsilon": eps,
                       "source": preset.sigma_source}
    version = package_version("dp-accounting")
    return {
        "unit": "prompt_group", "neighboring": plan.relation.value, "n": plan.records, "n_canary": plan.canaries,
        "q": plan.sampling_rate, "sigma": plan.noise_multiplier, "T": plan.steps, "delta": plan.delta,
        "C": plan.clip_norm, "epsilon": eps, "target_epsilon": target_epsilon, "covered_output": "lora_trajectory",
        "event": plan.event.to_json(),
        "accountant": {"method": "pld", "library": "dp-accounting", "version": version,
                       "interval": pld.details["interval"], "pessimistic": True, "connect_dots": True,
                       "record": jsonable(pld.to_json())},
        "rdp_cross_check": {"epsilon": finite_or_none(rdp.value), "order": finite_or_none(rdp.details.get("order")),
                            "library": "dp-accounting", "version": version,
                            "consistent": bool(rdp.value >= eps - 1e-6)},
        "calibration": calibration,
        "derived": derived,
        "tuning_on_private_data": preset.tuning_on_private_data, "tuning_note": preset.tuning_note,
        "assumptions": {}}


def environment_block(setup: RunSetup, trainer, deterministic: bool) -> dict:
    import torch

    from privcheck.environment import environment, package_version
    env = environment()
    base_dtype = next(t.dtype for k, t in trainer.model.named_parameters() if "lora_" not in k)
    lora_dtype = trainer.space.params[0].dtype
    name = lambda dt: str(dt).removeprefix("torch.")  # noqa: E731
    env.update({"torch": torch.__version__, "transformers": package_version("transformers"),
                "peft": package_version("peft"), "dp_accounting": package_version("dp-accounting"),
                "device": setup.device, "cpu_threads": torch.get_num_threads(),
                "dtype_policy": {"base": name(base_dtype), "lora": name(lora_dtype), "gradients": name(lora_dtype),
                                 "clip_norm": "float64 accumulation", "noise": name(lora_dtype),
                                 "optimizer": name(lora_dtype)},
                "deterministic": deterministic, "library_commit": env.get("git_commit")})
    if setup.device == "cuda":
        env["device_name"] = torch.cuda.get_device_name(0)
    launch = getattr(setup, "launch", None)   # the TRL integration's setup has none: a plain process
    if launch is not None:                     # a launched run (docs/scaling.md); a plain process has no entry
        env["distributed"] = {"world_size": trainer.world_size, "backend": trainer.backend,
                              "launcher": launch.launcher, "writer_rank": 0,
                              "trainer": type(trainer).__name__}
    return env


def assumptions_block(trainer) -> dict:
    """How (A1)–(A4) stand in this run (docs/dpgrpo.md, the assumption table)."""
    backend = trainer.rollout_backend
    isolated = getattr(backend, "mode", "isolated") == "isolated"
    out = {"A1": "enforced: public configuration frozen and hashed before the run; T fixed; divisor q·n",
           "A2": "isolated rollouts" if isolated else getattr(backend, "A2_ASSUMPTION", "batch-invariance not "
                                                                                         "guaranteed"),
           "A3": trainer.randomness.mode if trainer.randomness.privacy_release
           else "seeded randomness (not a privacy release)",
           "A4": "gap: floating point (the theorem certifies the real-valued mechanism)"}
    if not isolated:
        out["A2_caveat"] = getattr(backend, "A2_CAVEAT", "batched generation is not batch-invariant")
    return out


def identity_block(trainer, ver: dict, *, launched: bool = False) -> dict:
    """The artifact's `identity` entry: the arm's trained identity, the identity the suite verified (the
    reference fixture's trainer) and their differences, declared as the reference fixture's check mode
    (`REFERENCE_FIXTURE_CHECK_MODE`; under a launcher also the trainer class, the distributed subclass, which
    tests/dpgrpo/test_launch.py checks equal to one process). Recorded, never raised: a difference outside them
    leaves `bound` false with the reason, and the run is not a release."""
    from mechanisms.dpgrpo.identity import REFERENCE_FIXTURE_CHECK_MODE, dptrainer_identity
    from privcheck.artifacts.identity import RunIdentity, identity_differences
    from privcheck.checks.catalogue import CHECKS, SELF_CHECKS

    trained = dptrainer_identity(trainer)
    out = {"trained": trained.to_json(), "verified": None, "check_mode_differences": [], "missing_checks": [],
           "bound": False, "reason": "verification suite skipped"}
    if ver["status"] == "skipped":
        return out
    if ver.get("identity") is None:
        return {**out, "reason": "the suite's results carry no single identity"}
    verified = RunIdentity.from_json(ver["identity"])
    allowed = REFERENCE_FIXTURE_CHECK_MODE + (("trainer",) if launched else ())
    diffs = identity_differences(trained, verified)
    declared = [d for d in diffs if any(d.field == p or d.field.startswith(p + ".") for p in allowed)]
    undeclared = [d for d in diffs if d not in declared]
    ran = {c["name"] for c in ver["float64"] if c["status"] != "skipped"}
    missing = [n for n in (*CHECKS, *SELF_CHECKS) if n not in ran]
    reason = "; ".join(d.describe() for d in undeclared) or None
    return {**out, "verified": verified.to_json(), "check_mode_differences": [d.to_json() for d in declared],
            "missing_checks": missing, "bound": not undeclared, "reason": reason}


def run_document(setup: RunSetup, arm, label, config, built, trainer, pretrain, lora_init_sha, public_telemetry,
                 curve, evaluator, status, stop_reason, *, timing) -> dict:
    """The unsealed run document of one arm (the private telemetry and weights references are added when the
    files are rendered, by `run.run_dpgrpo`)."""
    import torch
    p = setup.preset
    privacy = privacy_block(trainer.plan, p, target_epsilon=config.target_epsilon)
    if privacy is not None:
        privacy["assumptions"] = assumptions_block(trainer)
    blockers = list(trainer.release_blockers)
    if status != "complete":
        blockers.append("incomplete: the wall-clock guard stopped the run, so the stopping round depends on "
                        "wall-clock time (accounting still covers the planned T)")
    ver = setup.verification
    if ver["status"] == "skipped":
        blockers.append("verification suite skipped")
    elif ver["status"] != "pass":
        blockers.append("verification suite did not pass")
    identity = identity_block(trainer, ver, launched=getattr(setup, "launch", None) is not None)
    if ver["status"] != "skipped" and not identity["bound"]:
        blockers.append("verification not bound to this run: " + identity["reason"])
    preset_public = {k: v for k, v in p.to_json().items() if k != "records_seed"}
    public_inputs = {
        "preset": preset_public, "preset_name": p.name, "reduced": p.is_reduced,
        "base_model": built.base_model, "tokenizer_sha256": built.tokenizer_sha256,
        "lora_init": "peft default (A kaiming-uniform under a public seed, B = 0: π_θ1 = π_ref)",
        "lora_init_sha256": lora_init_sha, "param_layout_sha256": trainer.space.layout_sha256,
        "trainable_parameters": trainer.space.dim, "trainable_tensors": len(trainer.space),
        "verifier": getattr(setup.verifier, "__qualname__", repr(setup.verifier)),
        "verifier_sha256": verifier_sha256(setup.verifier), "public_pretraining": pretrain,
        "slot_universe": {"n": p.n, "content": "private (not recorded)"},
        "rollout_mode": {"requested": p.rollout_mode, "used": getattr(trainer.rollout_backend, "mode", None),
                         "note": setup.rollout_note}}
    evaluation = {**evaluator.describe(), "before": curve[0]["accuracy"], "after": curve[-1]["accuracy"],
                  "every": p.eval_every, "curve": curve}
    return {
        "schema": RUN_SCHEMA_ID, "run_id": uuid.uuid4().hex, "created_utc": utc_now(), "status": status,
        "stop_reason": stop_reason, "arm": arm, "replicate": label,
        "privacy_release": bool(trainer.privacy_release and status == "complete" and ver["status"] == "pass"
                                and identity["bound"] and not identity["missing_checks"]),
        "release_blockers": blockers,
        "config": {**config.to_json(), "sha256": config.sha256()},
        "public_inputs": public_inputs, "privacy": privacy, "public_telemetry": public_telemetry,
        "private_telemetry_ref": None, "released_weights": None, "evaluation": evaluation, "timing": timing,
        "environment": environment_block(setup, trainer, torch.are_deterministic_algorithms_enabled()),
        "verification": {k: v for k, v in ver.items() if k != "identity"}, "identity": identity,
        "randomness": trainer.randomness.to_json()}
