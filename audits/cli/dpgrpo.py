"""`privcheck audit dp-grpo`: the one-run canary audit of DP-GRPO (docs/audits.md, "Auditing DP-GRPO in one run").

    privcheck audit dp-grpo [--preset NAME] [--model DIR [--tokenizer DIR] [--lora-targets A,B]] --canaries M
        --out DIR [--canary-type gradient_dirac|input_binary] [--seed S] [--rounds T] [--q Q] [--confidence C]
        [--json]

`--model DIR` audits the user's own causal LM (a local transformers directory, `local_files_only`; the tokenizer
from `--tokenizer DIR`, default the same directory) on the preset's task and mechanism constants, without the
preset's public pretraining (`audits.dpgrpo.gradient_canary.local_audit_preset`; docs/audit_your_model.md).

`--canary-type gradient_dirac` (default): added gradient-space Dirac canaries with white-box per-step LLR scores
(audits.dpgrpo.gradient_canary). `input_binary`: added input-space binary canaries scored by the log-odds of their
secret label against the public base, planned from a public pilot (audits.dpgrpo.input_canary; the pilot's log is
`private/pilot_log.jsonl`).

Writes, under DIR: `audit.json` (the sealed audit artifact, schema-validated, atomic), `private/auditor_log.jsonl`
and `private/reveal.json` (the auditor's private log and the revealed coins with the salt; mode 0600 in a 0700
directory), `scores.png` (in/out score distributions after the reveal, with the pre-registered guess thresholds) and
`bound_vs_m.png` (the power plan's ceiling, planned bound and Monte Carlo band against the number of canaries, from
`audits.statistics.power.plot_bound_vs_canaries`; matplotlib's Agg backend). The plots are staged with the audit's other
files (`before_commit` of the audit functions) and every file reaches DIR in one commit
(`privcheck.artifacts.ArtifactDirectory`): all of them or none. That commit is the command's last act, so an
interrupted audit leaves nothing and can be rerun (docs/artifacts.md, "Interrupted audits"). The text table prints
the assumption-free Steinke `eps_lower` first and, for gradient canaries, the claim-curve f-DP bound of the same
counts with its `claim_family:<event>` assumption beside it. With --json it prints one JSON object: the sealed report
with `eps_lower`, `p_value_at_nominal`, `rejects_nominal`, `planned_eps_lower` and (gradient canaries)
`fdp_claim_curve` at the top level, plus `artifact`, `plots` and `runtime_s`. Every argument is validated before
any work and before anything is written (InvalidParameter, exit 2 through `privcheck.cli.main`).
`audits.cli` adds the command with `add_dpgrpo_parser`.
"""

from __future__ import annotations

import io
import sys
import time

from privcheck.cli_args import integer, number, seed

__all__ = ["BOUND_PLOT_FACTORS", "BOUND_PLOT_SIMS", "CANARY_TYPES", "PRESET_NAMES", "add_dpgrpo_parser",
           "cmd_audit_dpgrpo", "plot_grid", "preset_from_args", "scores_png", "stage_plots", "write_plots"]

CANARY_TYPES = ("gradient_dirac", "input_binary")
# the names of audits.dpgrpo.gradient_canary.AUDIT_PRESETS, listed here so that `--help` imports neither that module nor
# torch (tests/test_cli_grammar.py checks that the two agree)
PRESET_NAMES = ("tiny-cpu",)
BOUND_PLOT_SIMS = 20                       # Monte Carlo audits per point of bound_vs_m.png
BOUND_PLOT_FACTORS = (0.1, 0.3, 1.0, 3.0, 10.0)


def _preset_names() -> tuple:
    """The registered presets: `AUDIT_PRESETS` when audits.dpgrpo.gradient_canary is loaded (a preset registered by a
    plug-in is listed), else `PRESET_NAMES` (building `--help` imports neither that module nor torch)."""
    module = sys.modules.get("audits.dpgrpo.gradient_canary")
    return tuple(sorted(module.AUDIT_PRESETS)) if module is not None else PRESET_NAMES


def add_dpgrpo_parser(audit_subparsers, common) -> None:
    """Add `dp-grpo` under the `audit` verb (`audit_subparsers` is the verb's subparsers action)."""
    p = audit_subparsers.add_parser(
        "dp-grpo", parents=[common],
        help="one-run audit of DP-GRPO with added canaries (gradient-space Dirac or input-space binary)")
    p.add_argument("--preset", default="tiny-cpu",
                   help="audit preset (task, records and mechanism constants; with --model, the model is yours): "
                        + ", ".join(_preset_names()) + " (default tiny-cpu)")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="your causal LM: a local transformers directory (save_pretrained; nothing is downloaded)")
    p.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="with --model: a local transformers tokenizer directory (default: the --model directory)")
    p.add_argument("--lora-targets", default=None, metavar="NAMES",
                   help="with --model: comma-separated module names for LoRA (default: PEFT's for the model type)")
    p.add_argument("--canaries", type=integer, required=True,
                   help="m, canaries added as extra slots (>= 1; >= 2 for input_binary)")
    p.add_argument("--canary-type", default=CANARY_TYPES[0],
                   help="gradient_dirac (default; white-box per-step LLR) or input_binary (end to end, log-odds of "
                        "a secret binary label vs the public base)")
    p.add_argument("--out", required=True, help="directory for audit.json, the plots and private/ (auditor log)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seeded test run (trainer, coins, plan), in [0, 2^63 − 1]; default OS entropy (an audit "
                        "release)")
    p.add_argument("--rounds", type=integer, default=None, help="T, training rounds (default: the preset's)")
    p.add_argument("--q", type=number, default=None, help="Poisson sampling rate in (0, 1] (default: the preset's)")
    p.add_argument("--confidence", type=number, default=0.95, help="1 − p, in (0, 1) (default 0.95)")
    p.set_defaults(func=cmd_audit_dpgrpo)


def _audit_function(canary_type):
    """The audit entry point of a canary type (InvalidParameter for an unknown one, before any work)."""
    if canary_type == "gradient_dirac":
        from audits.dpgrpo.gradient_canary import run_gradient_canary_audit
        return run_gradient_canary_audit
    if canary_type == "input_binary":
        from audits.dpgrpo.input_canary import run_input_canary_audit
        return run_input_canary_audit
    from privcheck.errors import InvalidParameter
    raise InvalidParameter("canary_type", canary_type, " or ".join(CANARY_TYPES))


def preset_from_args(args):
    """The registered preset's name, or with --model an AuditPreset for the user's local model (paths checked)."""
    from privcheck.errors import InvalidParameter

    model = getattr(args, "model", None)
    if model is None:
        for name in ("tokenizer", "lora_targets"):
            if getattr(args, name, None) is not None:
                raise InvalidParameter(name, getattr(args, name), "only with --model PATH")
        return args.preset
    from audits.dpgrpo.gradient_canary import local_audit_preset
    return local_audit_preset(model, args.tokenizer, base=args.preset, lora_targets=args.lora_targets)


def plot_grid(m: int) -> list[int]:
    """The numbers of canaries of bound_vs_m.png for an audit of m canaries."""
    return sorted({max(2, round(m * f)) for f in BOUND_PLOT_FACTORS})


def _check_plot_cost(m: int, rounds: int) -> None:
    """bound_vs_m.png plans BOUND_PLOT_SIMS audits per grid point with the white-box score, T normals per score:
    checked with the audit's other inputs, before any work (`audits.statistics.power.max_draws_per_score`)."""
    from audits.statistics.power import max_draws_per_score
    from privcheck.errors import InvalidParameter

    most = min(max_draws_per_score(size, BOUND_PLOT_SIMS) for size in plot_grid(m))
    if rounds > most:
        raise InvalidParameter("rounds", rounds, f"an integer in [1, {most}] (bound_vs_m.png simulates "
                                                 f"{BOUND_PLOT_SIMS} audits of up to {max(plot_grid(m))} canaries "
                                                 f"per point, T normals per score)")


def cmd_audit_dpgrpo(args) -> int:
    from privcheck.artifacts import claim_output_directory

    with claim_output_directory(args.out, name="out") as out:
        return _audit_dpgrpo(args, out)


def _audit_dpgrpo(args, out) -> int:
    from audits.cli import emit_with_plan
    from audits.dpgrpo.gradient_canary import check_counts, resolve_preset

    start = time.perf_counter()
    canary_type = getattr(args, "canary_type", CANARY_TYPES[0])
    run_audit = _audit_function(canary_type)
    m, rounds = check_counts(args.canaries, args.rounds, minimum=2 if canary_type == "input_binary" else 1)
    preset = preset_from_args(args)
    if canary_type == "gradient_dirac":
        _check_plot_cost(m, resolve_preset(preset).T if rounds is None else rounds)
    plots = []                             # staged with the audit's files: one commit, the command's last act
    res = run_audit(preset=preset, canaries=m, out_dir=out, seed=args.seed, rounds=rounds, q=args.q,
                    confidence=args.confidence, before_commit=lambda r, staging: plots.extend(stage_plots(r, staging)))
    runtime = time.perf_counter() - start
    rep, design = res.report, res.design
    plan = design.plan
    payload = dict(res.document, artifact=str(res.artifact), plots=[str(p) for p in plots], runtime_s=runtime,
                   private_log=str(res.log_path))
    payload.update(res.headline())
    r, power = rep.result, rep.power
    rows = [("eps_lower", r["eps_lower"]), ("assumption", "none beyond one run")]
    fdp = r.get("fdp_claim_curve")          # the second bound of the same counts (gradient canaries)
    if fdp is not None:
        rows += [("eps_lower_fdp_claim_curve", fdp["eps_lower"]), ("assumption (fdp_claim_curve)", fdp["assumption"]),
                 ("rejects_nominal (fdp_claim_curve)", fdp["rejects_nominal"])]
    rows += [("certified epsilon (PLD)", rep.claim["epsilon"]),
            ("planned_eps_lower", power["planned_eps_lower"]),
            ("ceiling", power["eps_ceiling"]),
            ("p_value_at_nominal", r["p_value_at_nominal"]),
            ("rejects_nominal", r["rejects_nominal"]),
            ("canaries / guesses / correct", f"{design.m} / {r['guesses']} / {r['correct']}"),
            ("q / sigma / T / C", (f"{plan.sampling_rate:g} / {plan.noise_multiplier:.6g} / {plan.steps} / "
                                   f"{plan.clip_norm:g}")),
            ("n real + canary slots", f"{plan.records} + {plan.canaries}"),
            ("delta", plan.delta),
            ("canary type / score", f"{rep.canaries['type']} / {rep.canaries['score']}"),
            ("never-sampled present canaries", rep.diagnostics["never_sampled_in_canaries"]),
            ("constant-reward canary groups", rep.diagnostics["constant_reward_canary_groups_frac"]),
            ("auroc (diagnostic)", rep.diagnostics["auroc"]),
            ("artifact", str(res.artifact)),
            ("runtime (s)", round(runtime, 1))]
    emit_with_plan(args, payload, rows, power)
    return 0


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:      # optional dependency (extra "plots")
        from privcheck.errors import PrivcheckError
        raise PrivcheckError(f"matplotlib is required for the plots (pip install 'privcheck[plots]'): {exc}") from exc
    return plt


def scores_png(scores, signs, k_plus: int, k_minus: int, title: str,
               xlabel: str = "white-box per-step LLR score") -> bytes:
    """Histogram of in/out canary scores (numpy arrays) with the pre-registered top-k₊ / bottom-k₋ thresholds
    (after reveal)."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    bins = np.histogram_bin_edges(scores, bins=40)
    ax.hist(scores[signs == 1], bins=bins, alpha=0.6, color="tab:red",
            label=f"included (n = {int(np.sum(signs == 1))})")
    ax.hist(scores[signs == -1], bins=bins, alpha=0.6, color="tab:blue",
            label=f"excluded (n = {int(np.sum(signs == -1))})")
    ordered = np.sort(scores)[::-1]
    if k_plus:
        ax.axvline(ordered[k_plus - 1], color="tab:red", ls="--", lw=1, label=f"top k+ = {k_plus} guessed in")
    if k_minus:
        ax.axvline(ordered[-k_minus], color="tab:blue", ls="--", lw=1, label=f"bottom k- = {k_minus} guessed out")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("canaries")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def write_plots(res, out_dir) -> list:
    """DIR/scores.png and DIR/bound_vs_m.png, moved into DIR together (both or neither)."""
    from privcheck.artifacts import ArtifactDirectory

    with ArtifactDirectory(out_dir) as staging:
        return stage_plots(res, staging)


def stage_plots(res, staging) -> list:
    """Stage scores.png and bound_vs_m.png in `staging` (an `ArtifactDirectory`); returns their final paths."""
    from audits.statistics.power import plot_bound_vs_canaries

    rep, design = res.report, res.design
    plan, r = design.plan, rep.result
    dirac = rep.canaries["type"] == "gradient_dirac"
    title = (f"DP-GRPO {'Dirac' if dirac else 'input-space binary'} canaries: m = {design.m}, "
             f"q = {plan.sampling_rate:g}, σ = {plan.noise_multiplier:.4g}, "
             f"T = {plan.steps}; ε_lower = {r['eps_lower']:.3f} ({r['correct']}/{r['guesses']} correct), "
             f"certified ε = {rep.claim['epsilon']:.3f}")
    xlabel = ("white-box per-step LLR score" if dirac
              else "log-odds of the secret label, trained minus public base")
    model = design.score_model if hasattr(design, "score_model") else design.score.model
    scores_path = staging.write_bytes("scores.png", scores_png(
        res.scores, res.membership, design.preregistration.k_plus, design.preregistration.k_minus, title, xlabel))
    plot_bound_vs_canaries(model, plot_grid(design.m), delta=plan.delta, confidence=design.confidence,
                           eps_nominal=design.epsilon, sims=BOUND_PLOT_SIMS, seed=0,
                           path=staging.path / "bound_vs_m.png")
    return [scores_path, staging.target / "bound_vs_m.png"]
