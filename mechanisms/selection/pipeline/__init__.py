"""LLM selection pipeline: sample candidates from a causal LM, score them, and run BoN, PrivBoN, ITP, PrivITP.

One module per job:

* `presets`  — public run configurations (model shapes, selector constants, presets, synthetic prompts);
* `models`   — models built from configs (no downloads) and torch device helpers;
* `sampling` — candidate sampling from the public base policy π0;
* `scoring`  — the PRIVATE reward (reward model or reward function), clipped to the public range;
* `run`      — the pipeline run (`run_pipeline`, `run_selection`);
* `artifact` — the selection_run artifact (schema privcheck/schemas/selection_run.schema.json).

The command line (`privcheck run selection`) lives in `mechanisms.selection.cli`. Privacy boundary and
guarantees: `mechanisms.selection.pipeline.run` and docs/selection.md ("LM pipeline").
"""

from mechanisms.selection.pipeline.artifact import (
                                                    ARTIFACT_KIND,
                                                    ARTIFACT_NAME,
                                                    SCHEMA,
                                                    SCHEMA_ID,
                                                    SCHEMA_VERSION,
                                                    build_artifact,
                                                    validate_artifact,
                                                    write_run_artifact,
)
from mechanisms.selection.pipeline.models import (
                                                    DEVICES,
                                                    build_policy,
                                                    build_reward_model,
                                                    build_tokenizer,
                                                    check_device,
                                                    count_parameters,
                                                    parameter_count,
)
from mechanisms.selection.pipeline.presets import (
                                                    DTYPES,
                                                    FALLBACK_SELECTORS,
                                                    PRESETS,
                                                    PRIVATE_SELECTORS,
                                                    PROMPT_SEED,
                                                    SELECTORS,
                                                    ModelShape,
                                                    Preset,
                                                    SelectionConstants,
                                                    get_preset,
                                                    parse_selectors,
                                                    synthetic_prompts,
)
from mechanisms.selection.pipeline.run import PipelineResult, run_pipeline, run_selection, run_selectors
from mechanisms.selection.pipeline.sampling import CandidateSampler
from mechanisms.selection.pipeline.scoring import RewardFunctionScorer, RewardModelScorer, clip_scores

__all__ = [
    "ARTIFACT_KIND", "ARTIFACT_NAME", "CandidateSampler", "DEVICES", "DTYPES", "FALLBACK_SELECTORS", "ModelShape",
    "PRESETS", "PRIVATE_SELECTORS", "PROMPT_SEED", "PipelineResult", "Preset", "RewardFunctionScorer",
    "RewardModelScorer", "SCHEMA", "SCHEMA_ID", "SCHEMA_VERSION", "SELECTORS", "SelectionConstants",
    "build_artifact", "build_policy", "build_reward_model", "build_tokenizer", "check_device", "clip_scores",
    "count_parameters", "get_preset", "parameter_count", "parse_selectors", "run_pipeline", "run_selection",
    "run_selectors", "synthetic_prompts", "validate_artifact", "write_run_artifact",
]
