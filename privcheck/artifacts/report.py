"""Render a verification artifact as Markdown (and PNG plots of its figures when matplotlib is installed).

Every number a report shows about the checks (status, passed / total, per-suite counts) is recomputed from the
checks themselves, never read from the stored summary, and the seal is recomputed. A document that does not check
out (`privcheck.artifacts.integrity.check_artifact`) gets a warning as the report's first line, its problems
listed under it; one that fails its schema is not rendered beyond that. `render_report(DIR)` is
`privcheck report DIR` (exit `EXIT_PROBLEMS` when the artifact does not check out; docs/artifacts.md).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

from privcheck.artifacts.integrity import (
    check_artifact,
    count_checks,
    load_artifact,
    rederivable,
    schema_problems,
    verdict_problems,
)
from privcheck.artifacts.outdir import hold_output_directory, refuse_planted
from privcheck.artifacts.seal import sha256_of
from privcheck.artifacts.writer import ArtifactDirectory
from privcheck.errors import InvalidParameter

__all__ = ["ARTIFACT", "EXIT_PROBLEMS", "KIND", "RUN_ARTIFACTS", "RenderedReport", "check_run_artifacts",
           "render_markdown", "render_plots", "render_report", "warning_line", "write_report"]

ARTIFACT = "verification.json"
KIND = "verification"
EXIT_PROBLEMS = 1       # `privcheck report`: the artifact does not check out, a negative result like a failed check
RUN_ARTIFACTS = "run-*.json"   # DP-GRPO run artifacts (`privcheck run dp-grpo`, `save_run_artifact`): checked only


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.10g}"
    if isinstance(x, (dict, list)):
        text = json.dumps(x, sort_keys=True)
        return text if len(text) <= 80 else text[:77] + "..."
    return str(x)


def warning_line(problems: list[str], artifact: str = ARTIFACT) -> str:
    """The one-line warning shown first for a document with problems."""
    n = len(problems)
    return (f"WARNING: {artifact} does not check out ({n} problem{'s' if n != 1 else ''}): its contents are NOT "
            f"verified and may have been edited after sealing")


def render_markdown(doc: dict, plots: list[str] = (), problems: list[str] | None = None,
                    signature: str | None = None) -> str:
    """report.md for a verification artifact; `problems` defaults to `check_artifact(doc, "verification")`;
    `signature` is the one-line account of its signature (`privcheck.artifacts.signature`), when one was looked at."""
    problems = check_artifact(doc, KIND) if problems is None else problems
    out = io.StringIO()
    w = out.write
    if problems:
        w(f"> **{warning_line(problems)}**\n>\n" + "".join(f"> - {p}\n" for p in problems) + "\n")
    w("# privcheck verification report\n\n")
    if schema_problems(doc, KIND):
        w("The document does not match the verification schema, so nothing more of it is shown.\n")
        return out.getvalue()
    counts = count_checks(doc["checks"])
    unverified = " — NOT verified, see the warning above" if problems else ""
    w(f"- status: **{counts['status'].upper()}** ({counts['passed']}/{counts['checks']} checks passed, counted "
      f"from the checks below{unverified}); wall time {doc['summary']['seconds']:.1f} s\n")
    w(f"- suites: {', '.join(doc['suites'])}\n")
    w(f"- run: `{doc['run_id']}`, {doc['created_utc']} → {doc['finished_utc']}\n")
    r = doc["randomness"]
    release = "yes" if doc["privacy_release"] else "no — not a privacy release"
    w(f"- randomness: {r['mode']}{' (seed ' + str(r.get('seed')) + ')' if r.get('seed') is not None else ''}; "
      f"privacy release: {release}\n")
    recomputed = sha256_of(doc)
    seal_state = "intact, recomputed" if recomputed == doc["sha256"] else \
        f"MISMATCH: recomputed `{recomputed}`, the document was edited after sealing"
    w(f"- sha256: `{doc['sha256']}` ({seal_state})\n")
    if signature is not None:
        w(f"- signature: {signature}\n")
    done, not_done = rederivable(doc["checks"])
    w(f"- verdicts re-derived from the recorded figures: {len(done)} of {len(doc['checks'])} checks"
      + (" (see the warning above)" if verdict_problems(doc["checks"]) else " (every one agrees with its figures)")
      + "\n")
    if not_done:
        w(f"- not re-derivable ({len(not_done)}: no verdict rule recorded, or an error or skip): "
          + ", ".join(f"`{n}`" for n in not_done) + "\n")
    w("\n")

    w("## Suites\n\n| suite | checks | passed | failed |\n|---|---|---|---|\n")
    for name, c in counts["suites"].items():
        w(f"| {name} | {c['checks']} | {c['passed']} | {c['failed']} |\n")
    w("\n")

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
            # the schema requires only some fields of a record: a hand-made one is shown, never trusted to have more
            if "quantity" in rec:
                cert = rec.get("certified")
                enc = f"[{_fmt(cert.get('lower'))}, {_fmt(cert.get('upper'))}]" if isinstance(cert, dict) else "—"
                w(f"| {rec['quantity']} | {_fmt(rec['value'])} | {rec['method']} | {_fmt(rec['inputs'])} | {enc} |\n")
            else:
                w(f"| {rec['parameter']} (calibrated) | {_fmt(rec['value'])} | bisection on PLD | "
                  f"{_fmt(rec.get('inputs'))} | bracket {_fmt(rec['bracket'])} |\n")

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


def write_report(doc: dict, staging: ArtifactDirectory, problems: list[str] | None = None,
                 signature: str | None = None) -> list[str]:
    """Stage report.md and the plots of `doc` in `staging` (no plots for a document that fails its schema);
    returns the plot file names."""
    problems = check_artifact(doc, KIND) if problems is None else problems
    images = {} if schema_problems(doc, KIND) else render_plots(doc)
    for name, data in images.items():
        staging.write_bytes(name, data)
    staging.write_text("report.md", render_markdown(doc, list(images), problems, signature))
    return list(images)


@dataclass(frozen=True)
class RenderedReport:
    """What `render_report` wrote and found: `problems` is empty iff the artifact checks out; `counts` is
    `count_checks` of its checks (None when the document fails its schema)."""

    report: Path
    artifact: Path
    problems: list[str]
    counts: dict | None
    sha256: str
    sha256_recomputed: str
    rederived: list[str] = ()           # names of the checks whose verdict was re-derived from their figures
    not_rederived: list[str] = ()       # names of those that could not be (no rule, or an error or skip)
    signature: str | None = None        # the account of its signature, when one was present or required


def render_report(directory: str | Path, trust: str | Path | None = None) -> RenderedReport:
    """Check DIR/verification.json (and its signature: required, by the key in the file `trust`, when given) and
    (re)write DIR/report.md and its plots together, under the directory's lock.

    Raises InvalidParameter (no DIR/verification.json, DIR not writable, `trust` not an ed25519 public key file),
    OutputBusy, or ArtifactUnreadable (not a sealed JSON document) before anything is written."""
    from privcheck.artifacts import signature as sg

    if isinstance(directory, str) and not directory.strip():
        raise InvalidParameter("dir", directory, "a directory containing verification.json")
    directory = Path(directory)
    artifact = directory / ARTIFACT
    trusted = None if trust is None else sg.load_public_key(trust, "trust")
    refuse_planted(directory, [ARTIFACT, sg.SIGNATURE], name="dir")   # a link, FIFO, device or directory: never read
    if not artifact.is_file():
        raise InvalidParameter("dir", str(directory), "a directory containing verification.json")
    with hold_output_directory(directory, name="dir"):
        doc = load_artifact(artifact)
        problems = check_artifact(doc, KIND)
        signature = None
        sig_path = directory / sg.SIGNATURE
        if trusted is not None or sig_path.exists():
            try:
                sig = sg.read_signature(sig_path) if sig_path.exists() else None
            except InvalidParameter as exc:     # not JSON, too large, duplicate keys: a broken signature
                sig_problems, signature = [f"{sg.SIGNATURE} cannot be read: {exc.value} (allowed: {exc.allowed})"], \
                    "unreadable"
            else:
                sig_problems, signature = sg.signature_problems(doc, sig, ARTIFACT, trusted)
            problems = problems + sig_problems
        with ArtifactDirectory(directory, head=ARTIFACT) as staging:
            write_report(doc, staging, problems, signature)
    valid = not schema_problems(doc, KIND)
    counts = count_checks(doc["checks"]) if valid else None
    done, not_done = rederivable(doc["checks"]) if valid else ([], [])
    return RenderedReport(report=directory / "report.md", artifact=artifact, problems=problems, counts=counts,
                          sha256=doc["sha256"], sha256_recomputed=sha256_of(doc), rederived=done,
                          not_rederived=not_done, signature=signature)


def check_run_artifacts(directory: str | Path) -> list[tuple[Path, dict, list[str]]]:
    """(path, document, problems) of every run artifact DIR/run-*.json: seal, schema and consistency, which for a
    DP-GRPO run includes the binding of its verification to the trained run (docs/artifacts.md, "Run identity").
    Nothing is written (the run's own report.md is the run's). Raises InvalidParameter when DIR has none and
    ArtifactUnreadable for a file that is not a sealed JSON document."""
    directory = Path(directory)
    paths = sorted(directory.glob(RUN_ARTIFACTS)) if directory.is_dir() else []
    if not paths:
        raise InvalidParameter("dir", str(directory), "a directory containing verification.json or run-*.json")
    refuse_planted(directory, [p.name for p in paths], name="dir")     # a FIFO would block the read; links: no
    out = []
    for path in paths:
        doc = load_artifact(path)
        out.append((path, doc, check_artifact(doc)))
    return out
