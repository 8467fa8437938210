"""The compare artifact (`privcheck.dpgrpo.compare/1`, schema `dpgrpo_compare`), the report and the plots of
one invocation.

The compare document lists every run artifact (file name and seal), the public evaluation accuracies per arm
and replicate, the contrast of the DP-GRPO arm against each control arm, and the check that every private arm
shares (q, σ, T, δ), hence one privacy claim. The report and the accuracy plot read public values only; the
reward plot is private (it goes next to the private telemetry).
"""

from __future__ import annotations

import io

from mechanisms.dpgrpo.pipeline.setup import RunSetup
from privcheck.serialization import utc_now

__all__ = ["COMPARE_SCHEMA", "COMPARE_SCHEMA_ID", "build_compare", "plot_png", "render_report",
           "shared_privacy_check"]

COMPARE_SCHEMA_ID = "privcheck.dpgrpo.compare/1"
COMPARE_SCHEMA = "dpgrpo_compare"     # privcheck/schemas/dpgrpo_compare.schema.json
_GRPO_ARM = "dp_grpo"


def shared_privacy_check(docs) -> dict:
    """Every private arm's (q, σ, T, δ) must be identical (the arms' claims are then the same ε)."""
    keys = ("q", "sigma", "T", "delta")
    private = [(d["arm"], d["replicate"], d["privacy"]) for d in docs if d.get("privacy") is not None]
    if not private:
        return {"passed": False, "reason": "no private arm", "values": None, "mismatches": [], "arms": []}
    ref = {k: private[0][2][k] for k in keys}
    mismatches = [{"arm": a, "replicate": r, **{k: pv[k] for k in keys}} for a, r, pv in private
                  if any(pv[k] != ref[k] for k in keys)]
    return {"passed": not mismatches, "values": ref, "mismatches": mismatches,
            "arms": sorted({a for a, _, _ in private})}


def build_compare(setup: RunSetup, entries) -> dict:
    """The unsealed compare document from (path, sealed run document) pairs."""
    docs = [d for _, d in entries]
    runs = [{"arm": d["arm"], "replicate": d["replicate"], "path": str(path.name), "sha256": d["sha256"],
             "status": d["status"], "privacy_release": d["privacy_release"],
             "before": d["evaluation"]["before"], "after": d["evaluation"]["after"]} for path, d in entries]
    accuracy: dict = {}
    for d in docs:
        accuracy.setdefault(d["arm"], {})[d["replicate"]] = {"before": d["evaluation"]["before"],
                                                             "after": d["evaluation"]["after"]}
    contrast = []
    if _GRPO_ARM in accuracy:
        for control in (a for a in accuracy if a != _GRPO_ARM):
            for label, acc in accuracy[_GRPO_ARM].items():
                if label in accuracy[control]:
                    contrast.append({"replicate": label, "control": control, "dp_grpo_after": acc["after"],
                                     "control_after": accuracy[control][label]["after"],
                                     "difference": acc["after"] - accuracy[control][label]["after"]})
    return {"schema": COMPARE_SCHEMA_ID, "created_utc": utc_now(), "preset": setup.preset.name,
            "reduced": setup.preset.is_reduced, "arms": list(setup.arms),
            "replicates": [r for r, _ in setup.replicates],
            "status": "complete" if all(d["status"] == "complete" for d in docs) else "incomplete",
            "runs": runs, "accuracy": accuracy, "contrast": contrast, "shared_privacy": shared_privacy_check(docs)}


def plot_png(series: dict, title: str, ylabel: str) -> bytes | None:
    """A line plot of {name: [(round, value), ...]} as PNG bytes (None without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, pts in sorted(series.items()):
        pts = [(x, y) for x, y in pts if isinstance(y, (int, float))]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3, label=name)
    ax.set_xlabel("round t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_report(setup: RunSetup, compare: dict, docs: list, plot_name: str | None) -> str:
    """report.md: the privacy claim shared by the private arms, the per-run table and the contrasts."""
    p = setup.preset
    lines = [f"# DP-GRPO run: preset `{p.name}`" + (" (reduced)" if p.is_reduced else ""), ""]
    first = next((d["privacy"] for d in docs if d.get("privacy")), None)
    if first:
        lines += [f"Privacy (every private arm): prompt-level (ε = {first['epsilon']:.6g}, δ = {first['delta']:.6g}), "
                  f"q = {first['q']:.6g}, σ = {first['sigma']!r}, T = {first['T']}, add/remove one prompt group "
                  "(PLD, dp-accounting). Shared (q, σ, T, δ): "
                  f"{'yes' if compare['shared_privacy']['passed'] else 'NO'}.", ""]
    lines += ["| arm | replicate | status | privacy release | accuracy before | accuracy after |",
              "|---|---|---|---|---|---|"]
    for r in compare["runs"]:
        lines.append(f"| {r['arm']} | {r['replicate']} | {r['status']} | {r['privacy_release']} | "
                     f"{r['before']:.4f} | {r['after']:.4f} |")
    if compare["contrast"]:
        lines += ["", "| replicate | control | DP-GRPO after − control after |", "|---|---|---|"]
        lines += [f"| {c['replicate']} | {c['control']} | {c['difference']:+.4f} |" for c in compare["contrast"]]
    if plot_name:
        lines += ["", f"![public evaluation accuracy per round]({plot_name})", ""]
    lines += ["", "Accuracy is sampled accuracy (mean verifier reward at τ) of released checkpoints on public "
              "prompts. Rewards during training are private: their plot is in `private/` next to the private "
              "telemetry and is not part of a release. Timing is outside the guarantee.", ""]
    return "\n".join(lines)
