"""The LLM selection pipeline run: sample candidates from a causal LM, score them, run BoN, PrivBoN, ITP, PrivITP.

What it does (discussion in docs/selection.md, "LM pipeline"):

* samples n candidates per prompt from a transformers causal LM π0 by plain tempered sampling
  (`do_sample=True`, `temperature`, `top_k=0`, `top_p=1.0` set explicitly, fixed-length completions of
  `max_new_tokens` tokens: no EOS stop, no other logits processor);
* scores each (prompt, completion) with either a Python reward function `reward(prompt, completion) ->
  float` (on decoded text) or a sequence-classification reward model whose last-position logit is mapped
  to the public range by the public squash `R_max·sigmoid(logit)`; every score is checked finite and then
  clipped to [0, R_max];
* runs any subset of the four selectors on the scores. BoN, PrivBoN and ITP use the shared batch; PrivITP
  uses the shared batch as its Phase-2 list and a SECOND, independently sampled batch for Phase 1 (the two
  phases never share candidates or score arrays). A fallback (ITP/PrivITP, t = ⊥) returns a fresh π0
  sample: one reserve completion per prompt and per fallback-capable selector, drawn with the candidates
  but never looked at by any selector;
* writes `DIR/selection_run.json` (`mechanisms.selection.pipeline.artifact`: sealed, schema-validated,
  atomic): model shapes and sizes, throughput, selection time per selector, peak memory, the privacy-loss
  records of the private selectors, environment, randomness mode and status (complete | incomplete: a
  wall-clock guard stops between prompt chunks and the selectors then run on the prompts finished so far).

Privacy boundary. The reward model (or reward function) is the private part: it stands for r̂_D, trained
on the private data D, and enters only through clipped scores. π0 (the LM), the prompts and candidate
sampling are public: they never depend on D, so the candidate lists are public randomness and may be
recorded. Δ is a public *assumption* about the reward model (sup over candidates and neighbouring D of the
score change); the library cannot verify it. R_max, Δ, σ, β, σ_X = σ_Z = σ/2, L and δ are public
constants fixed before any score is seen; nothing computed from scores enters a noise scale, a normaliser
or the range. Every ε comes from the mechanisms' events through `privcheck.accounting.epsilon`; this
module computes none. Each selector is a separate query on the same public candidates: releasing the
outputs of several selectors composes (basic composition). Only runs without `seed` (OS-entropy noise)
have `privacy_release: true`; wall-clock timings are measurements outside every guarantee
(`timing.covered_by_guarantee: false`).

    privcheck run selection --preset cpu-tiny --out DIR [--seed N] [--selectors bon privitp] [--json]
    run_selection("cpu-tiny", out=DIR, seed=0) -> (artifact dict, path, PipelineResult)

torch and transformers are imported lazily (the CLI starts without them).
"""

from __future__ import annotations

import dataclasses
import math
import resource
import time
from dataclasses import dataclass
from typing import Callable

from mechanisms.selection.bon import best_of_n
from mechanisms.selection.itp import ITP
from mechanisms.selection.pipeline.artifact import build_artifact, check_out, write_run_artifact
from mechanisms.selection.pipeline.models import (
    build_policy,
    build_reward_model,
    build_tokenizer,
    check_device,
    count_parameters,
    fork_devices,
    synchronize,
)
from mechanisms.selection.pipeline.presets import (
    FALLBACK_SELECTORS,
    PROMPT_SEED,
    SELECTORS,
    ModelShape,
    SelectionConstants,
    get_preset,
    parse_selectors,
    synthetic_prompts,
)
from mechanisms.selection.pipeline.sampling import CandidateSampler
from mechanisms.selection.pipeline.scoring import RewardFunctionScorer, RewardModelScorer, clip_scores
from mechanisms.selection.privbon import PrivBoN
from mechanisms.selection.privitp import PrivITP
from mechanisms.selection.randomness import make_rng
from mechanisms.selection.results import FRESH_PI0
from privcheck import validation as v
from privcheck.errors import InvalidParameter
from privcheck.randomness import entropy_seed

__all__ = ["PipelineResult", "run_pipeline", "run_selection", "run_selectors"]


@dataclass
class PipelineResult:
    """Everything one run produced. Scores are PRIVATE (functions of r̂_D): they are never written out."""

    selectors: tuple[str, ...]
    prompts_requested: int
    prompt_ids: object                 # numpy int64 [P_done, L]
    candidates: object                 # numpy int32 [P_done, n, T]: shared batch (PrivITP Phase 2)
    phase1_candidates: object | None   # numpy int32 [P_done, n, T]: PrivITP Phase 1 (independent batch)
    reserve: object                    # numpy int32 [P_done, #fallback selectors, T]: fresh π0 samples
    scores: object                     # numpy float64 [P_done, n], clipped (private)
    phase1_scores: object | None       # numpy float64 [P_done, n], clipped (private, separate array)
    results: dict                      # selector -> SelectionResult / RejectionResult
    selected: dict                     # selector -> numpy int32 [P_done, T] (fresh π0 sample on fallback)
    fallback: dict                     # selector -> numpy bool [P_done]
    selection_s: dict                  # selector -> seconds (selection + accounting)
    counters: dict
    timing: dict
    status: str
    stop_reason: str | None
    randomness: object                 # mechanisms.selection.NumpyRandomness (mechanism noise)
    sampling_seed: int
    generation: dict
    scoring: dict
    peak_memory: dict

    @property
    def prompts_completed(self) -> int:
        return int(self.scores.shape[0])

    @property
    def records(self) -> dict:
        """selector -> tuple of the mechanism's AccountingRecords (empty for the non-private baselines)."""
        out = {}
        for name, res in self.results.items():
            if name == "privbon":
                out[name] = (res.record,)
            elif name == "privitp":
                out[name] = tuple(res.records)
            else:
                out[name] = ()
        return out

    def selected_text(self, selector: str, tokenizer) -> list[str]:
        """The selected completions of `selector`, decoded."""
        return [tokenizer.decode(row.tolist(), skip_special_tokens=True) for row in self.selected[selector]]


def _peak_memory(device: str) -> dict:
    import torch
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux
    out = {"device": device, "rss_peak_bytes": int(rss_kib) * 1024,
           "rss_note": "peak resident set size of the whole process (getrusage ru_maxrss)"}
    if device == "cuda":
        out["cuda_max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        out["cuda_max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        out["cuda_total_memory_bytes"] = int(torch.cuda.get_device_properties(0).total_memory)
    return out


def run_selectors(scores, phase1_scores, selectors, constants: SelectionConstants, rng) -> tuple[dict, dict]:
    """Run the selectors on clipped scores [P, n]; PrivITP gets (phase1_scores, scores) as its two phases.

    Returns (results, seconds): every timing includes the mechanism's own accounting."""
    r_max = constants.r_max
    runs = {
        "bon": lambda: best_of_n(scores, r_lo=0.0, r_max=r_max),
        "privbon": lambda: PrivBoN(constants.sensitivity, constants.sigma, r_max).select(scores, rng),
        "itp": lambda: ITP(constants.beta, r_max).select(scores, rng),
        "privitp": lambda: PrivITP(constants.privitp_params(scores.shape[1])).select(phase1_scores, scores, rng),
    }
    results, seconds = {}, {}
    for name in selectors:
        t0 = time.perf_counter()
        results[name] = runs[name]()
        seconds[name] = time.perf_counter() - t0
    return results, seconds


def run_pipeline(policy, scorer, prompt_ids, *, n: int, constants: SelectionConstants, selectors=SELECTORS,
                 max_new_tokens: int = 16, temperature: float = 1.0, generation_batch: int = 256,
                 prompts_per_chunk: int | None = None, time_limit_s: float = math.inf, seed: int | None = None,
                 tokenizer=None, warmup: bool = True) -> PipelineResult:
    """Sample, score and select for a batch of prompts (see the module docstring).

    `policy`: a causal LM without EOS (e.g. `build_policy`); `scorer`: `RewardModelScorer` or
    `RewardFunctionScorer` (the latter needs `tokenizer`); `prompt_ids`: int array [P, L] of public
    prompts. `seed` None: OS-entropy mechanism noise (privacy_release possible) and a random candidate-
    sampling seed (public, recorded); an integer seeds both (privacy_release False).
    The wall-clock guard runs before each chunk of `prompts_per_chunk` prompts: it stops when the time
    spent plus the slowest chunk so far would pass `time_limit_s` (status "incomplete").
    `warmup` runs one untimed generate (and reward-model forward) first, on its own forked RNG, so that
    one-off start-up costs (CUDA context, kernel selection) stay out of the throughput figures.
    """
    import numpy as np
    import torch


    n = v.count("n", n)
    selectors = parse_selectors(selectors)
    if not isinstance(constants, SelectionConstants):
        raise InvalidParameter("constants", type(constants).__name__, "a SelectionConstants")
    if isinstance(scorer, RewardModelScorer) and scorer.r_max != constants.r_max:
        raise InvalidParameter("r_max", scorer.r_max, f"the constants' r_max = {constants.r_max} (one public range "
                               "for the squash, the clipping and the mechanisms)")
    if not (isinstance(time_limit_s, (int, float)) and not isinstance(time_limit_s, bool) and time_limit_s > 0):
        raise InvalidParameter("time_limit_s", time_limit_s, "(0, inf]")
    prompt_np = np.asarray(prompt_ids)
    if prompt_np.ndim != 2 or prompt_np.shape[0] < 1 or prompt_np.shape[1] < 1 or prompt_np.dtype.kind not in "iu":
        raise InvalidParameter("prompt_ids", f"array of shape {prompt_np.shape}", "integer token ids [prompts, length]")
    total_prompts = prompt_np.shape[0]
    chunk = v.count("prompts_per_chunk", prompts_per_chunk if prompts_per_chunk is not None else total_prompts)
    rand = make_rng(seed)                                   # validates seed
    sampling_seed = rand.seed if rand.seed is not None else entropy_seed()   # public: recorded
    sampler = CandidateSampler(policy, max_new_tokens=max_new_tokens, temperature=temperature,
                               batch_size=generation_batch)
    device = str(policy.device)
    reserve_names = [s for s in FALLBACK_SELECTORS if s in selectors]
    two_batches = "privitp" in selectors
    per_prompt = n * (2 if two_batches else 1) + len(reserve_names)
    T, L = sampler.max_new_tokens, prompt_np.shape[1]

    cand = np.zeros((total_prompts, n, T), dtype=np.int32)
    cand1 = np.zeros((total_prompts, n, T), dtype=np.int32) if two_batches else None
    reserve = np.zeros((total_prompts, len(reserve_names), T), dtype=np.int32)
    scores = np.zeros((total_prompts, n), dtype=np.float64)
    scores1 = np.zeros((total_prompts, n), dtype=np.float64) if two_batches else None

    fork = fork_devices("cuda" if device.startswith("cuda") else "cpu")
    warmup_s = 0.0
    if warmup:
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=fork):
            w_ids = torch.as_tensor(prompt_np[:1], dtype=torch.long, device=policy.device)
            w_comp = sampler.sample(w_ids, 1)
            if isinstance(scorer, RewardModelScorer):    # never call a user's reward function off the record
                scorer.score(w_ids, w_comp)
        synchronize(device)
        warmup_s = time.perf_counter() - t0
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t_start = time.perf_counter()
    gen_s = score_s = 0.0
    chunk_times: list[float] = []
    done, stop_reason = 0, None
    with torch.random.fork_rng(devices=fork):
        torch.manual_seed(sampling_seed)                     # public randomness of candidate sampling
        for lo in range(0, total_prompts, chunk):
            elapsed = time.perf_counter() - t_start
            if chunk_times and elapsed + max(chunk_times) > time_limit_s:
                stop_reason = (f"wall-clock guard: {elapsed:.1f} s spent + {max(chunk_times):.1f} s for the next chunk "
                               f"> time_limit_s = {time_limit_s:g}; {done}/{total_prompts} prompts done")
                break
            t_chunk = time.perf_counter()
            hi = min(total_prompts, lo + chunk)
            p_ids = torch.as_tensor(prompt_np[lo:hi], dtype=torch.long, device=policy.device)
            t0 = time.perf_counter()
            comp = sampler.sample(p_ids, per_prompt)                     # [c, per_prompt, T]
            synchronize(device)
            gen_s += time.perf_counter() - t0
            scored = comp[:, :2 * n] if two_batches else comp[:, :n]    # reserves are never scored
            t0 = time.perf_counter()
            raw = scorer.score(p_ids, scored, tokenizer)
            synchronize(device)
            score_s += time.perf_counter() - t0
            clipped = clip_scores(raw, constants.r_max)
            comp_np = comp.to("cpu", torch.int32).numpy()
            cand[lo:hi] = comp_np[:, :n]
            scores[lo:hi] = clipped[:, :n]
            if two_batches:
                cand1[lo:hi] = comp_np[:, n:2 * n]
                scores1[lo:hi] = clipped[:, n:2 * n]
            reserve[lo:hi] = comp_np[:, per_prompt - len(reserve_names):]
            done = hi
            chunk_times.append(time.perf_counter() - t_chunk)
    loop_s = time.perf_counter() - t_start

    cand, reserve, scores = cand[:done], reserve[:done], scores[:done].copy()
    if two_batches:
        cand1, scores1 = cand1[:done], scores1[:done].copy()
    results, seconds = run_selectors(scores, scores1, selectors, constants, rand)
    selected, fallback = {}, {}
    rows = np.arange(done)
    for name, res in results.items():
        idx = np.asarray(res.indices)
        fb = idx == FRESH_PI0
        out = cand[rows, np.where(fb, 0, idx)].copy()
        if fb.any():
            out[fb] = reserve[rows[fb], reserve_names.index(name)]
        selected[name], fallback[name] = out, fb
    seqs = done * per_prompt
    scored_rows = done * n * (2 if two_batches else 1)
    return PipelineResult(
        selectors=selectors, prompts_requested=total_prompts, prompt_ids=prompt_np[:done].copy(), candidates=cand,
        phase1_candidates=cand1, reserve=reserve, scores=scores, phase1_scores=scores1, results=results,
        selected=selected, fallback=fallback, selection_s=seconds,
        counters={"sequences": seqs, "new_tokens": seqs * T, "prompt_tokens_in": seqs * L,
                  "scored_candidates": scored_rows, "scored_tokens": scored_rows * (L + T),
                  "candidates_per_prompt": per_prompt, "chunks": len(chunk_times)},
        timing={"warmup_s": warmup_s, "generation_s": gen_s, "scoring_s": score_s, "generation_and_scoring_s": loop_s,
                "selection_s": sum(seconds.values()), "max_chunk_s": max(chunk_times) if chunk_times else 0.0,
                "time_limit_s": time_limit_s if math.isfinite(time_limit_s) else "inf"},
        status="complete" if done == total_prompts else "incomplete", stop_reason=stop_reason,
        randomness=rand, sampling_seed=int(sampling_seed), generation=sampler.describe(),
        scoring=scorer.describe(), peak_memory=_peak_memory("cuda" if device.startswith("cuda") else "cpu"))



def _model_entry(model, shape: ModelShape, *, role: str, dtype: str, seed: int, device: str) -> dict:
    return {"role": role, "class": type(model).__name__, "shape": shape.to_json(), "dtype": dtype,
            "parameters": count_parameters(model), "device": device,
            "init": f"random (transformers init, torch seed {seed})"}


def run_selection(preset: str = "cpu-tiny", *, out, device: str = "cpu", seed: int | None = None, selectors=None,
                  n: int | None = None, prompts: int | None = None, time_limit_s: float | None = None,
                  r_max: float | None = None, sensitivity: float | None = None, sigma: float | None = None,
                  beta: float | None = None, reward: Callable[[str, str], float] | None = None):
    """Run a preset end to end and write DIR/selection_run.json. Returns (sealed document, path, result).

    Overrides (all public, validated before anything is built): n, prompts, time_limit_s and the selection
    constants r_max, sensitivity (Δ ≤ r_max), sigma, beta. `reward` replaces the reward model by a Python
    function of (prompt text, completion text) (presets with a tokenizer only).
    """
    t_total = time.perf_counter()
    p = get_preset(preset)
    selectors = parse_selectors(selectors)
    base = p.constants
    constants = SelectionConstants(
        r_max=base.r_max if r_max is None else r_max,
        sensitivity=base.sensitivity if sensitivity is None else sensitivity,
        sigma=base.sigma if sigma is None else sigma, beta=base.beta if beta is None else beta,
        headroom=base.headroom, delta=base.delta)
    p = dataclasses.replace(p, n=p.n if n is None else n, prompts=p.prompts if prompts is None else prompts,
                            time_limit_s=p.time_limit_s if time_limit_s is None else time_limit_s,
                            constants=constants)
    if seed is not None:
        v.count("seed", seed, minimum=0)
    if reward is not None and p.tokenizer is None:
        raise InvalidParameter("reward", getattr(reward, "__name__", "callable"),
                               "None for a preset without a tokenizer (use its reward model)")
    out = check_out(out)
    t_import = time.perf_counter()
    import torch  # noqa: F401  (imports timed apart from the model build)
    from transformers import GenerationConfig, Qwen2ForCausalLM, Qwen2ForSequenceClassification  # noqa: F401
    import_s = time.perf_counter() - t_import
    device = check_device(device)

    t_build = time.perf_counter()
    tokenizer = build_tokenizer(p.tokenizer) if p.tokenizer else None
    policy = build_policy(p.policy, seed=p.policy_seed, device=device, dtype=p.dtype)
    models = {"policy": _model_entry(policy, p.policy, role="public base policy π0 (candidate sampling)",
                                     dtype=p.dtype, seed=p.policy_seed, device=device),
              "tokenizer": "ByT5Tokenizer() (byte level, no files)" if tokenizer is not None else None}
    if reward is None:
        rm = build_reward_model(p.reward, seed=p.reward_seed, device=device, dtype=p.dtype)
        scorer = RewardModelScorer(rm, constants.r_max, batch_size=p.scoring_batch)
        models["reward"] = {**_model_entry(rm, p.reward, role="PRIVATE reward model r̂_D (stand-in: random weights)",
                                           dtype=p.dtype, seed=p.reward_seed, device=device),
                            "head": "score head re-drawn N(0, 1/hidden)", "squash": "R_max * sigmoid(logit)"}
    else:
        scorer = RewardFunctionScorer(reward)
        models["reward"] = {"role": "PRIVATE reward function r̂_D", **scorer.describe()}
    build_s = time.perf_counter() - t_build

    prompt_ids = synthetic_prompts(p.prompts, p.prompt_tokens, p.prompt_token_range)
    result = run_pipeline(policy, scorer, prompt_ids, n=p.n, constants=constants, selectors=selectors,
                          max_new_tokens=p.max_new_tokens, temperature=p.temperature,
                          generation_batch=p.generation_batch, prompts_per_chunk=p.prompts_per_chunk,
                          time_limit_s=p.time_limit_s, seed=seed, tokenizer=tokenizer)
    prompt_info = {"prompt_tokens": p.prompt_tokens, "token_range": list(p.prompt_token_range),
                   "seed": PROMPT_SEED, "source": "synthetic public token ids, uniform on token_range "
                                                 "(numpy default_rng(seed))"}
    doc = build_artifact(result, preset=p, device=device, models=models, constants=constants, n=p.n,
                         prompt_info=prompt_info, build_s=build_s, total_s=0.0)
    doc["plan"] = p.plan(selectors)
    doc["timing"]["import_s"] = import_s
    doc["timing"]["total_s"] = time.perf_counter() - t_total
    sealed, path = write_run_artifact(doc, out)
    return sealed, path, result

