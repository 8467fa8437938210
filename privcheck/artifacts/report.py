"""Render a verification artifact as Markdown (and PNG plots of its figures when matplotlib is installed)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from privcheck.artifacts.writer import ArtifactDirectory, verify_seal

__all__ = ["render_markdown", "render_plots", "render_report", "write_report"]


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.10g}"
    if isinstance(x, (dict, list)):
        text = json.dumps(x, sort_keys=True)
        return text if len(text) <= 80 else text[:77] + "..."
    return str(x)


def render_markdown(doc: dict, plots: list[str] = ()) -> str:
    s = doc["summary"]
    out = io.StringIO()
    w = out.write
    w("# privcheck verification report\n\n")
    w(f"- status: **{doc['status'].upper()}** ({s['passed']}/{s['checks']} checks passed, "
      f"{s['seconds']:.1f} s)\n")
    w(f"- suites: {', '.join(doc['suites'])}\n")
    w(f"- run: `{doc['run_id']}`, {doc['created_utc']} → {doc['finished_utc']}\n")
    r = doc["randomness"]
    release = "yes" if doc["privacy_release"] else "no — not a privacy release"
    w(f"- randomness: {r['mode']}{' (seed ' + str(r.get('seed')) + ')' if r.get('seed') is not None else ''}; "
      f"privacy release: {release}\n")
    w(f"- sha256: `{doc['sha256']}` ({'intact' if verify_seal(doc) else 'MISMATCH: edited after sealing'})\n\n")

    if doc["claims"]:
        w("## Claims\n\n| mechanism | ε | δ | neighbouring | accountant | parameters |\n|---|---|---|---|---|---|\n")
        for c in doc["claims"]:
            w(f"| {c['mechanism']} | {_fmt(c['epsilon'])} | {_fmt(c['delta'])} | {c['neighboring']} | "
              f"{c.get('accountant', '')} | {_fmt(c.get('parameters', {}))} |\n")
        assumptions = sorted({a for c in doc["claims"] for a in c["assumptions"]})
        if assumptions:
            w("\nAssumptions:\n\n" + "".join(f"- {a}\n" for a in assumptions))
        w("\n")

    w("## Checks\n\n| | check | observed | expected | tolerance | reference |\n|---|---|---|---|---|---|\n")
    for c in doc["checks"]:
        status = c.get("status") or ("pass" if c["passed"] else "fail")
        mark = "pass" if status == "pass" else f"**{status.upper()}**"
        w(f"| {mark} | `{c['name']}` | {_fmt(c['observed'])} | {_fmt(c['expected'])} | {_fmt(c['tolerance'])} "
          f"| {c['reference']} |\n")
    failed = [c for c in doc["checks"] if not c["passed"]]
    if failed:
        w("\n### Failures\n\n" + "".join(f"- `{c['name']}`: {c.get('message', '')}\n" for c in failed))

    if doc["accounting_records"]:
        w("\n## Accounting records\n\n| quantity | value | method | inputs | enclosure |\n|---|---|---|---|---|\n")
        for rec in doc["accounting_records"]:
            if "quantity" in rec:
                cert = rec.get("certified")
                enc = f"[{cert['lower']:.12g}, {cert['upper']:.12g}]" if cert else "—"
                w(f"| {rec['quantity']} | {_fmt(rec['value'])} | {rec['method']} | {_fmt(rec['inputs'])} | {enc} |\n")
            else:
                w(f"| {rec['parameter']} (calibrated) | {_fmt(rec['value'])} | bisection on PLD | "
                  f"{_fmt(rec['inputs'])} | bracket {rec['bracket']} |\n")

    for name in plots:
        w(f"\n![{name}]({name})\n")
    env = doc["environment"]
    w("\n## Environment\n\n")
    w(f"- python {env['python']} on {env['platform']}, device {env['device']}\n")
    w(f"- precision: {env['precision']}\n- git commit: {env.get('git_commit') or 'unknown'}\n")
    w("- packages: " + ", ".join(f"{k} {v}" for k, v in sorted(env["packages"].items())) + "\n")
    return out.getvalue()


def render_plots(doc: dict) -> dict[str, bytes]:
    """One PNG per figure, in memory: {file name: PNG bytes} (empty without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    images = {}
    for key, fig in sorted(doc.get("figures", {}).items()):
        f, ax = plt.subplots(figsize=(6, 4))
        for label, ys in fig["series"].items():
            pts = [(x, y) for x, y in zip(fig["x"], ys) if isinstance(y, (int, float))]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xlabel(fig["x_label"])
        ax.set_ylabel(fig["y_label"])
        ax.set_title(fig["title"])
        if fig.get("log_x"):
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
        buf = io.BytesIO()
        f.tight_layout()
        f.savefig(buf, format="png", dpi=110)
        plt.close(f)
        images[f"{key}.png"] = buf.getvalue()
    return images


def write_report(doc: dict, staging: ArtifactDirectory) -> list[str]:
    """Stage report.md and the plots of `doc` in `staging`; returns the plot file names."""
    images = render_plots(doc)
    for name, data in images.items():
        staging.write_bytes(name, data)
    staging.write_text("report.md", render_markdown(doc, list(images)))
    return list(images)


def render_report(directory: str | Path) -> Path:
    """Read DIR/verification.json and (re)write DIR/report.md and its plots together; returns the report path."""
    directory = Path(directory)
    doc = json.loads((directory / "verification.json").read_text("utf-8"))
    with ArtifactDirectory(directory) as staging:
        write_report(doc, staging)
    return directory / "report.md"
