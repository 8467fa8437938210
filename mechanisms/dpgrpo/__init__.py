"""Prompt-level differentially private GRPO (DP-GRPO) [ZJJ, Algorithm 1].

Guarantee (spec shared/spec/dpgrpo.md §5.1; Theorem 1 of [ZJJ]): under (A1)–(A4), Algorithm 1 is
prompt-level (ε, δ)-DP for add/remove of one prompt slot at fixed public capacity n, where δ is given
and ε is the PLD accountant's value at (q, σ, T) — `privcheck.accounting.epsilon_pld(q, σ, T, δ)`; σ for a
target ε comes from `privcheck.accounting.calibrate_sigma`. This package never computes ε itself. The
privacy profile involves neither G, C, the loss, the verifier, the learning rate nor the optimizer.

Assumptions (spec §6):

* (A1) public design — every input of Algorithm 1 (n, q, σ, C, T, G, τ, β, …) is fixed without access to the
  data; the divisor is the public q·n; no data-driven control flow.
* (A2) record isolation — given θ_t, each prompt's clipped gradient depends only on (θ_t, x_i, fresh
  randomness): advantages within the group, one backward per prompt, clip after all chunks.
* (A3) fresh hidden randomness — coins, rollouts and noise come from separate generators, fresh every round,
  never released.
* (A4) exact arithmetic — the theorem certifies the real-valued mechanism, not its floating-point
  execution (documented gap).

Proof: `mechanisms/dpgrpo/PROOF.md` (Lemma 1 / Theorem 1 mapped to the code and the checks); user guide: `docs/dpgrpo.md`.

One round (line numbers of Algorithm 1; functions of `mechanisms.dpgrpo.core`):

    coins = poisson_coins(n, q, coins_gen)                  # line 2: all n slots, float64 uniform < q
    B = [i for i in range(n) if coins[i] and present[i]]    # line 3 (SlotUniverse.batch)
    for i in B:                                             # lines 4–7, one record at a time
        ids = rollouts(x_i, G, τ); mask = completion_mask(ids, eos)
        A = group_advantages(rewards_i, c=1e-4)             # eq. (2), G−1 std, float64
        zero .grad; backward of prompt_loss(u, ref, mask, A, β, chunk) per chunk  # eq. (7)
        g_i = flatten_grads(space); S += clip_flat(g_i, C)  # line 7: joint clip, float64 norm
    g_hat = privatize(S, σ, C, q, n, noise_gen)             # line 8: (S + N(0, σ²C²I)) / (q·n)
    unflatten_into(g_hat, space); optimizer.step()          # line 9: LoRA parameters only

Modules: `core` (pure tensor functions), `records` (Record, SlotUniverse, RolloutGroup, GradientRecord),
`tasks` (addition task, verifier, character tokenizer), `models` (tiny GPT-2 / tiny Qwen2 + LoRA builders),
`config` (DPGRPOConfig), `randomness`, `rollouts` (isolated, batched, replay), `record_grads` (arms), `trainer`
(DPTrainer), `verify` (bindings for the checks V1–V13, the `dpgrpo` suite), `audit_hooks` (canary slots'
reserved-coordinate log), `timing` (private/non-private round time on public records), `presets`, `pretrain`,
`evaluation`, `run` (end-to-end runs and the run/compare artifacts), `cli` (`privcheck run dp-grpo`).
"""

from mechanisms.dpgrpo.core import (ParamSpace, clip_flat, completion_mask, flatten_grads, group_advantages,
                                    k3_kl, poisson_coins, privatize, prompt_loss, unflatten_into)
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup, SlotUniverse

__all__ = [
    "GradientRecord", "ParamSpace", "Record", "RolloutGroup", "SlotUniverse", "clip_flat", "completion_mask",
    "flatten_grads", "group_advantages", "k3_kl", "poisson_coins", "privatize", "prompt_loss", "unflatten_into",
]
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.randomness import Randomness, make_randomness
from mechanisms.dpgrpo.record_grads import (FilteredSFT, GoldSFT, GRPOGradient, RecordGrad, RecordGradient,
                                            StepContext, ZeroAdvantage)
from mechanisms.dpgrpo.rollouts import BatchedHF, IsolatedHF, Replay, token_logprobs
from mechanisms.dpgrpo.trainer import DPTrainer, VerifierError
__all__ += ["BatchedHF", "DPGRPOConfig", "DPTrainer", "FilteredSFT", "GRPOGradient", "GoldSFT", "IsolatedHF", "Randomness",
            "RecordGrad", "RecordGradient", "Replay", "StepContext", "VerifierError", "ZeroAdvantage",
            "make_randomness", "token_logprobs"]
