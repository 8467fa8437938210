"""The selection-run artifact `DIR/selection_run.json`: built from a pipeline result, validated against
privcheck/schemas/selection_run.schema.json, sealed and written atomically by `privcheck.artifacts.write_artifact`.

The document holds public configuration, model shapes, throughput, timing (outside every guarantee), peak
memory, environment, the randomness mode and, per selector, its privacy-loss records (`record.to_json()` of
`privcheck.accounting.epsilon` on the query's event). Scores are private and never written.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from mechanisms.selection.pipeline.presets import PRIVATE_SELECTORS, Preset, SelectionConstants
from privcheck.accounting import basic_composition
from privcheck.artifacts import load_schema, verify_seal, write_artifact
from privcheck.errors import InvalidParameter
from privcheck.serialization import jsonable

__all__ = ["ARTIFACT_KIND", "ARTIFACT_NAME", "SCHEMA", "SCHEMA_ID", "SCHEMA_VERSION", "build_artifact", "check_out",
           "validate_artifact", "write_run_artifact"]

ARTIFACT_NAME = "selection_run.json"
ARTIFACT_KIND = "selection_run"
SCHEMA = "selection_run"                       # privcheck/schemas/selection_run.schema.json
SCHEMA_ID = "privcheck.selection_run/1"
SCHEMA_VERSION = 1


def _rate(count: float, seconds: float):
    return count / seconds if seconds > 0 else None


def _selector_entry(name: str, res, seconds: float, fallbacks: int) -> dict:
    entry = {"private": name in PRIVATE_SELECTORS, "seconds": seconds, "randomness_mode": res.randomness_mode,
             "privacy_release": bool(res.privacy_release), "fallbacks": fallbacks}
    if name == "privbon":
        entry["records"] = [res.record.to_json()]
        entry["epsilon"] = {"per_prompt": res.record.value, "prompts": res.prompts,
                            "total_basic_composition": res.record.details["total_epsilon"]}
    elif name == "privitp":
        eps = [r.value for r in res.records]
        entry["records"] = [r.to_json() for r in res.records]
        accepted = [int(t) for t in res.halting_times.tolist() if t > 0]
        entry["epsilon"] = {"per_prompt_min": min(eps), "per_prompt_max": max(eps), "prompts": len(eps),
                            "total_basic_composition": basic_composition(eps)[0],
                            "delta_per_prompt": res.records[0].details["delta"]}
        entry["halting"] = {"accepted": len(accepted), "mean_round": (sum(accepted) / len(accepted)) if accepted
                            else None, "max_round": max(accepted) if accepted else None}
    else:
        entry["records"] = []
        entry["note"] = "non-private baseline: no privacy record, never a private release"
    return entry


def _environment(device: str) -> dict:
    import torch
    import transformers

    from privcheck.environment import environment
    env = environment()
    if device == "cuda":
        env["device"] = "cuda"
        env["device_name"] = torch.cuda.get_device_name(0)
    else:
        env["device"] = "cpu"
        env["device_name"] = platform.processor() or platform.machine()
    env["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads()}
    env["transformers"] = transformers.__version__
    env["precision"] = "models in the preset dtype; scores float64; mechanisms float64; ε certified (Arb)"
    return env


def build_artifact(result, *, preset: Preset, device: str, models: dict, constants: SelectionConstants,
                   n: int, prompt_info: dict, build_s: float, total_s: float) -> dict:
    """The unsealed artifact document of a `PipelineResult` (layout: privcheck/schemas/selection_run.schema.json)."""
    t, c = result.timing, result.counters
    selection = {name: _selector_entry(name, result.results[name], result.selection_s[name],
                                       int(result.fallback[name].sum())) for name in result.selectors}
    return {
        "schema": SCHEMA_ID, "kind": ARTIFACT_KIND, "schema_version": SCHEMA_VERSION,
        "docs": "docs/selection.md (LM pipeline)",
        "preset": preset.name, "device": device, "status": result.status, "incomplete_reason": result.stop_reason,
        "models": models, "n": n,
        "prompts": {**prompt_info, "requested": result.prompts_requested, "completed": result.prompts_completed},
        "generation": {**result.generation, "candidates_per_prompt": c["candidates_per_prompt"],
                       "batches": "shared batch (n; BoN, PrivBoN, ITP, PrivITP Phase 2) + independent PrivITP "
                                  "Phase-1 batch (n) + one reserve fresh π0 sample per fallback-capable selector"},
        "scoring": result.scoring,
        "public_constants": constants.to_json(),
        "throughput": {
            "generation": {"sequences": c["sequences"], "new_tokens": c["new_tokens"],
                           "prompt_tokens_in": c["prompt_tokens_in"], "seconds": t["generation_s"],
                           "tokens_per_s": _rate(c["new_tokens"], t["generation_s"]),
                           "candidates_per_s": _rate(c["sequences"], t["generation_s"])},
            "scoring": {"candidates": c["scored_candidates"], "tokens": c["scored_tokens"], "seconds": t["scoring_s"],
                        "tokens_per_s": _rate(c["scored_tokens"], t["scoring_s"]),
                        "candidates_per_s": _rate(c["scored_candidates"], t["scoring_s"])}},
        "selection": selection,
        "composition_note": "each selector is a separate query on the same public candidates; releasing the "
                            "outputs of several private selectors composes (basic composition of their ε)",
        "peak_memory": result.peak_memory,
        "environment": _environment(device),
        "randomness": {"mode": result.randomness.mode, "seed": result.randomness.seed,
                       "privacy_release": result.randomness.privacy_release,
                       "mechanism_noise": "numpy PCG64 via mechanisms.selection.make_rng",
                       "candidate_sampling": {"public": True, "seed": result.sampling_seed,
                                              "source": "torch global RNG (forked), seeded once per run"},
                       "model_init_seeds": {"policy": preset.policy_seed, "reward": preset.reward_seed},
                       "prompt_seed": prompt_info.get("seed")},
        "privacy_release": result.randomness.privacy_release,
        "timing": {**t, "model_build_s": build_s, "total_s": total_s, "chunks": c["chunks"],
                   "covered_by_guarantee": False,
                   "note": "wall-clock measurements; timing side channels are outside every privacy guarantee"},
    }


def validate_artifact(doc: dict) -> None:
    """Raise InvalidParameter('artifact', ...) unless `doc` is sealed (its sha256 matches the content) and valid
    against the selection_run schema (required keys, status, timing not covered by the guarantee,
    privacy_release false unless the mechanism noise came from OS entropy, ...)."""
    import jsonschema

    if not isinstance(doc, dict):
        raise InvalidParameter("artifact", type(doc).__name__, "a selection_run document (a dict)")
    validator = jsonschema.Draft202012Validator(load_schema(SCHEMA), format_checker=jsonschema.FormatChecker())
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}"
                for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]
    if not verify_seal(doc):
        problems.append("sha256 does not match the content")
    if problems:
        raise InvalidParameter("artifact", "; ".join(problems[:5]),
                               "a sealed selection_run document valid against selection_run.schema.json")


def check_out(out) -> Path:
    """The output directory, checked before anything is built (a path that is not an existing file)."""
    if out is None or (isinstance(out, str) and not out.strip()):
        raise InvalidParameter("out", out, "an output directory")
    if not isinstance(out, (str, os.PathLike)):
        raise InvalidParameter("out", type(out).__name__, "an output directory (a path)")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InvalidParameter("out", str(out), "a directory (a file exists at this path)")
    return path


def write_run_artifact(doc: dict, out) -> tuple[dict, Path]:
    """Seal, schema-validate and atomically write DIR/selection_run.json; returns (sealed document, path).
    On any failure nothing is written."""
    path = check_out(out) / ARTIFACT_NAME
    return write_artifact(path, jsonable(doc), schema=SCHEMA), path
