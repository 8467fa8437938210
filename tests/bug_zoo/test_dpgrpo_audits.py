"""Gradient-canary audits of the DP-GRPO bug zoo (docs/audits.md, "What the audit catches in the bug zoo").

`audits.dpgrpo.gradient_canary.run_gradient_canary_audit` audits a `DPTrainer` subclass from
tests/bug_zoo/dpgrpo_variants.py exactly as it audits the production trainer: m Dirac canaries added as slots, the
pre-registered white-box per-step LLR, the one-run bound. A variant is *caught by the audit* when its ε_lower exceeds
the ε the implementation claims (its plan's ε: the accountant at the public (q, σ, T, δ)), i.e. the test rejects the
claim.

`noise_sigma_only` draws z ~ N(0, σ²I) instead of N(0, σ²C²I): at C = 4 the noise on every coordinate is 4 times
too small, so each canary's per-step signal-to-noise ratio is 4 times the claimed one. Configuration: ε = 2
certified at δ = 1/(10·n′), q = 1, T = 4, C = 4, m = 500 canaries, 4 real records. The audit is planned at the
claimed σ (it does not know the bug): planned 0.66 (Monte Carlo p90 0.92), which the reference meets (ε_lower 0.40 to
0.96 over six other seeds); the variant's scores separate almost perfectly, so nearly all of the pre-registered k*
guesses are right and ε_lower is 2.82 to 2.96 (k* caps it near 3; a plan at σ/4 gives p10 3.05 with its own k).
Both assertions hold with margins of about a unit of ε. Figures over seeds, and the variants no gradient-canary
audit can see:
docs/audits.md (`python -m tests.bug_zoo.test_dpgrpo_audits [N] [--backend ray] [--ray-address ADDR]` prints the
measurements; each (variant, seed) audit is one task of `audits.backends.run_tasks`).

The variants are canary-aware (they keep the trainer's `n_slots` and `divisor`), so the audits run on them
unmodified; `test_every_variant_hosts_canary_slots` checks that for every trainer row in one cheap round.
"""

from __future__ import annotations

import sys

import mpmath as mp
import pytest
import torch

from audits.dpgrpo.gradient_canary import run_gradient_canary_audit
from mechanisms.dpgrpo.trainer import DPTrainer
from tests.bug_zoo.dpgrpo_variants import DPGRPO_ZOO

ZOO = {e.name: e for e in DPGRPO_ZOO}
SEED = 20260917
CAUGHT = dict(canaries=500, rounds=4, q=1.0, C=4.0, target_epsilon=2.0, n_real=4)


def _audit(trainer_cls, seed=SEED, **kwargs):
    return run_gradient_canary_audit(preset="tiny-cpu", seed=seed, trainer_cls=trainer_cls, plan_sims=50,
                                     **{**CAUGHT, **kwargs})


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_reference_trainer_is_not_rejected(steinke_only):
    res = _audit(DPTrainer)
    eps = res.report.claim["epsilon"]
    params, delta = res.report.claim["mechanism"]["params"], res.report.claim["delta"]
    assert params["q"] == 1.0
    # At q = 1 the mechanism is T Gaussian steps, i.e. μ-GDP with μ = √T/σ; its exact ε(δ) solves the closed form
    # δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle–Wang), evaluated here in mpmath. The claim must be on the safe
    # side of it (PLD is pessimistic) and at most the calibration target 2.
    mp.mp.dps = 50
    mu = mp.sqrt(params["steps"]) / mp.mpf(params["sigma"])
    exact = mp.findroot(lambda e: mp.ncdf(-e / mu + mu / 2) - mp.e ** e * mp.ncdf(-e / mu - mu / 2) - mp.mpf(delta),
                        2.0)
    assert float(exact) - 1e-9 <= eps <= 2.0
    assert eps - float(exact) < 1e-3          # and PLD is tight to its discretisation interval
    assert res.report.result["rejects_nominal"] is False and res.eps_lower <= eps
    assert res.report.diagnostics["cross_talk_max_abs_over_sigma_C"] == 0.0


def test_noise_sigma_only_is_caught_by_the_audit(steinke_only):
    entry = ZOO["noise_sigma_only"]
    res = _audit(entry.trainer_cls)
    eps = res.report.claim["epsilon"]
    assert res.report.claim["mechanism"]["params"]["trainer"] == entry.trainer_cls.__name__
    assert res.report.claim["mechanism"]["params"]["C"] == 4.0
    assert res.report.result["rejects_nominal"] is True and res.eps_lower > eps
    assert res.report.result["p_value_at_nominal"] < 0.05


# ------------------------------------------------------------------------------------------ canary slots

TRAINER_ROWS = [e for e in DPGRPO_ZOO if e.wrap_calibration is None]


@pytest.mark.parametrize("entry", TRAINER_ROWS, ids=[e.name for e in TRAINER_ROWS])
def test_every_variant_hosts_canary_slots(entry, tmp_path):
    """Each variant runs one round with 3 Dirac canary slots appended (q = 1, σ ≈ 0, real slots absent) and
    hands the auditor U_t[J] = ĝ_t[J]·q·(n + m_c) = C on every canary coordinate: coins cover all n + m_c slots
    and the update is divided by the public q·(n + m_c). The one designed exception is realised_batch_divisor,
    whose U_t[J] is C·(n + m_c)/|B| with |B| = 3 sampled slots."""
    from mechanisms.dpgrpo.audit_hooks import AuditHooks, read_log
    from mechanisms.dpgrpo.config import DPGRPOConfig
    from mechanisms.dpgrpo.core import ParamSpace
    from mechanisms.dpgrpo.models import build_tiny_qwen2_policy
    from mechanisms.dpgrpo.presets import QWEN2_LORA_TARGETS
    from mechanisms.dpgrpo.records import SlotUniverse, dirac_canary
    from mechanisms.dpgrpo.tasks import CharTokenizer, reward

    n, C, reserved = 2, 0.5, (5, 700, 8000)
    tok = CharTokenizer()
    model = build_tiny_qwen2_policy(0, tokenizer=tok)
    dim = ParamSpace(model).dim
    universe = SlotUniverse(n, torch.zeros(n, dtype=torch.bool), [None] * n).append_canaries(
        [dirac_canary(j, C, dim, dtype=torch.float32) for j in reserved], torch.ones(3, dtype=torch.bool),
        "sha256:" + "ab" * 32)
    config = DPGRPOConfig(n=n, m=n, T=1, sigma=1e-9, C=C, lora_targets=QWEN2_LORA_TARGETS, randomness=7)
    hooks = AuditHooks(torch.tensor(reserved), tmp_path / "log.jsonl", mask_reserved_for_real_records=True)
    trainer = entry.trainer_cls(model, tok, universe, config, reward, audit_hooks=hooks)
    assert trainer.sample_coins().shape == (n + 3,)
    trainer.step()
    (line,) = [e for e in read_log(tmp_path / "log.jsonl") if e["kind"] == "round"]
    assert line["divisor"] == trainer.divisor == 1.0 * (n + 3)
    expected = C * (n + 3) / 3 if entry.name == "realised_batch_divisor" else C
    assert line["U"] == pytest.approx([expected] * 3, rel=1e-5)


# ------------------------------------------------------------------------------------------ measurements

MEASURED = [  # (row, trainer class, audit overrides): subsampled rows at q = 0.5, where sampling defects matter
    ("reference (C = 4)", DPTrainer, {}),
    ("noise_sigma_only (C = 4)", ZOO["noise_sigma_only"].trainer_cls, {}),
    ("reference (q = 0.5)", DPTrainer, dict(q=0.5, rounds=8, C=1.0)),
    ("realised_batch_divisor", ZOO["realised_batch_divisor"].trainer_cls, dict(q=0.5, rounds=8, C=1.0)),
    ("shuffled_fixed_batches", ZOO["shuffled_fixed_batches"].trainer_cls, dict(q=0.5, rounds=8, C=1.0)),
    ("reused_seeded_noise", ZOO["reused_seeded_noise"].trainer_cls, dict(q=0.5, rounds=8, C=1.0)),
    ("per_tensor_clip", ZOO["per_tensor_clip"].trainer_cls, dict(q=0.5, rounds=8, C=1.0)),
]


def measure_one(item) -> tuple[float, bool, float, float]:
    """One (row, seed) audit of the sweep, a task of `audits.backends.run_tasks`: (ε_lower, rejected, claimed ε,
    planned ε_lower). The row is an index into MEASURED, so the task input pickles as two integers."""
    row, seed = item
    torch.set_num_threads(1)                 # one thread per task, whichever process runs it
    _, cls, overrides = MEASURED[row]
    res = _audit(cls, seed=seed, **overrides)
    return (res.eps_lower, bool(res.report.result["rejects_nominal"]), res.report.claim["epsilon"],
            res.report.power["planned_eps_lower"])


def measure(seeds=range(10), rows=None, *, backend="serial", address=None, max_retries=1) -> list[str]:
    """Print (and return) ε_lower over seeds 1000 + s, s in `seeds`, for each measured row (markdown table rows).

    Each (row, seed) audit is one task of `audits.backends.run_tasks` (`backend="ray"`: Ray tasks, same figures).
    A failed audit is listed after the table and left out of its row's counts ("rejected" is out of the finished
    audits, shown as k/finished of requested when some failed)."""
    from audits.backends import run_tasks

    rows = range(len(MEASURED)) if rows is None else rows
    items = [(r, 1000 + s) for r in rows for s in seeds]
    run = run_tasks(measure_one, items, backend=backend, address=address, max_retries=max_retries,
                    desc="bug-zoo audits")
    lines = ["| variant | certified ε | planned | ε_lower over seeds (min / median / max) | rejected |",
             "|---|---|---|---|---|"]
    for r in rows:
        done = [run.results[i] for i in run.finished if items[i][0] == r]
        requested = sum(item[0] == r for item in items)
        if not done:
            lines.append(f"| {MEASURED[r][0]} | — | — | no audit finished | 0/0 of {requested} |")
            continue
        bounds = sorted(d[0] for d in done)
        rejected = sum(d[1] for d in done)
        eps, planned = done[-1][2], done[-1][3]
        count = f"{rejected}/{len(done)}" + ("" if len(done) == requested else f" of {requested}")
        lines.append(f"| {MEASURED[r][0]} | {eps:.4f} | {planned:.3f} | {bounds[0]:.3f} / "
                     f"{bounds[len(bounds) // 2]:.3f} / {bounds[-1]:.3f} | {count} |")
    lines += [f"failed: {MEASURED[items[f.index][0]][0]}, seed {items[f.index][1]}: {f.error} "
              f"({f.attempts} attempts)" for f in run.failures]
    print("\n".join(lines), flush=True)
    return lines


def sweep_main(argv) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.bug_zoo.test_dpgrpo_audits",
                                     description="Bug-zoo audit sweep over seeds 1000, 1001, ... (docs/audits.md)")
    parser.add_argument("seeds", nargs="?", type=int, default=10, help="number of seeds (default 10)")
    parser.add_argument("--backend", default="serial", help="serial (default) or ray")
    parser.add_argument("--ray-address", default=None, help="address of an existing Ray cluster (with --backend ray)")
    parser.add_argument("--max-retries", type=int, default=1, help="retries of a failed audit (default 1)")
    args = parser.parse_args(argv)
    from audits.backends import check_backend
    from privcheck.errors import InvalidParameter

    try:
        check_backend(args.backend, args.ray_address, args.max_retries)
    except InvalidParameter as exc:
        parser.error(str(exc))                # exit 2 before any audit
    measure(range(args.seeds), backend=args.backend, address=args.ray_address, max_retries=args.max_retries)


if __name__ == "__main__":
    sweep_main(sys.argv[1:])
