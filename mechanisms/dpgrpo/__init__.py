"""Prompt-level differentially private GRPO (DP-GRPO): Algorithm 1 of Zhao, Januszewicz & Jung, *Reward-Driven
Learning under Prompt-Level Differential Privacy*.

Guarantee (Theorem 1 of the paper; docs/dpgrpo_proof.md): under (A1)–(A4), Algorithm 1 is prompt-level
(ε, δ)-DP for add/remove of one prompt slot at fixed public capacity n, where δ is given and ε is the PLD
accountant's value at (q, σ, T). The privacy parameters of a configuration are bound into its privacy plan,
`DPGRPOConfig.plan` (a `privcheck.accounting.DPGRPOPlan`), and every ε this package reports is `plan.epsilon()`,
computed by `privcheck.accounting.epsilon` from the plan's `PoissonGaussianEvent(q, σ, T)`; σ for a target ε
comes from `DPGRPOConfig.from_target` (the accountant's calibration). This package never computes ε itself.
The privacy profile involves neither G, C, the loss, the verifier, the learning rate nor the optimizer.

Assumptions (docs/dpgrpo.md, the assumption table):

* (A1) public design — every input of Algorithm 1 (n, q, σ, C, T, G, τ, β, …) is fixed without access to the
  data; the divisor is the public q·n; no data-driven control flow.
* (A2) record isolation — given θ_t, each prompt's clipped gradient depends only on (θ_t, x_i, fresh
  randomness): advantages within the group, one backward per prompt, clip after all chunks.
* (A3) fresh hidden randomness — coins, rollouts and noise come from separate generators, fresh every round,
  never released.
* (A4) exact arithmetic — the theorem certifies the real-valued mechanism, not its floating-point
  execution (documented gap).

Proof: docs/dpgrpo_proof.md (Lemma 1 / Theorem 1 mapped to the code and the checks); user guide: docs/dpgrpo.md.

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
`config` (DPGRPOConfig and its privacy plan), `randomness` (TorchRandomness, the torch backend of
`privcheck.randomness.RandomnessPolicy`), `rollouts` (isolated, batched, replay), `record_grads` (arms),
`trainer` (DPTrainer), `verify` (bindings for the training checks, the `dpgrpo` suite), `fixtures` (the suite's
float64 and preflight fixtures), `whole_step` (whole-step bindings of DPTrainer, docs/whole_step.md), `trl`
(`DPGRPOTrainer` inside TRL, docs/integrations/trl.md; imported on demand, never by the package, because it
imports trl), `audit_hooks` (canary slots' reserved-coordinate log), `timing` (private/non-private round time
on public records), `presets`, `pretrain`, `evaluation`; end-to-end runs in `pipeline` (`setup`, `inputs`, `arm`,
`artifact`, `compare`, `run`, `launch`: the command-line run, apart from the trainer and the checks' bindings);
`cli` (`privcheck run dp-grpo`).
"""

import importlib

# The public names and the modules that define them, imported on first use (PEP 562): `import mechanisms.dpgrpo`
# (as the `privcheck` command line does to register `privcheck run dp-grpo`) does not import torch.
_EXPORTS = {
    "config": ("DPGRPOConfig",),
    "core": ("ParamSpace", "clip_flat", "completion_mask", "flatten_grads", "group_advantages", "k3_kl",
             "poisson_coins", "privatize", "prompt_loss", "unflatten_into"),
    "randomness": ("TorchRandomness", "make_randomness"),
    "record_grads": ("FilteredSFT", "GoldSFT", "GRPOGradient", "RecordGrad", "RecordGradient", "StepContext",
                     "ZeroAdvantage"),
    "records": ("GradientRecord", "Record", "RolloutGroup", "SlotUniverse"),
    "rollouts": ("BatchedHF", "IsolatedHF", "Replay", "token_logprobs"),
    "trainer": ("DPTrainer", "VerifierError"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"mechanisms.dpgrpo.{module}"), name)
    elif not name.startswith("__"):     # a submodule as an attribute (`mechanisms.dpgrpo.core`), as eager imports gave
        try:
            value = importlib.import_module(f"mechanisms.dpgrpo.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"mechanisms.dpgrpo.{name}":
                raise
            raise AttributeError(f"module 'mechanisms.dpgrpo' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'mechanisms.dpgrpo' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = [
    "BatchedHF", "DPGRPOConfig", "DPTrainer", "FilteredSFT", "GRPOGradient", "GoldSFT", "GradientRecord",
    "IsolatedHF", "ParamSpace", "Record", "RecordGrad", "RecordGradient", "Replay", "RolloutGroup", "SlotUniverse",
    "StepContext", "TorchRandomness", "VerifierError", "ZeroAdvantage", "clip_flat", "completion_mask",
    "flatten_grads", "group_advantages", "k3_kl", "make_randomness", "poisson_coins", "privatize", "prompt_loss",
    "token_logprobs", "unflatten_into",
]
