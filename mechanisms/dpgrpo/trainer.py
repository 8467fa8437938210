"""`DPTrainer`: Algorithm 1 composed from public entry points (the methods the checks bind to).

    step() = apply_update(noisy_update(zip(records, score(records, rollouts(model, records, policy)))))
             with records = universe.batch(sample_coins())

    sample_coins()            line 2  core.poisson_coins over all n slots (coins generator)
    rollouts(model, recs, p)  line 4  the backend (IsolatedHF / Replay), rollout generator
    score(recs, groups)       line 5  verifier; exception / output ∉ {0,1} → reward 0 (counted privately)
    record_gradient(rec, grp) line 6  the arm's RecordGradient (flat, unclipped)
    record_gradients(items)   line 6  per item; with config.gradient_batch > 1, equal-shape buckets from one
                                      forward/backward each (batched_grads; bit-identical to record_gradient)
    contributions(items)      line 7  clip_flat once per record, after all chunks; any number of calls per
                                      round (micro-batches): each round item carries its slot (`SlotItem`);
                                      its pre-clip norm goes to `clip` when `clip` is not overridden
    clipped_sum(items)        line 7  Σ ḡ_i (σ ignored)
    privatize(S)              line 8  core.privatize: (S + N(0, σ²C²I)) / (q·(n + m_c)), noise generator
    apply_update(ĝ)           line 9  unflatten into LoRA .grad, optimizer.step(); non-finite ĝ → skipped
    noisy_update(items)       privatize(clipped_sum(items))
    add_update_hook(fn)       fn(ĝ) applied in step() right after privatize (whole-step checks, docs/whole_step.md)

Public telemetry (per step) holds only functions of ĝ_t, θ and public inputs. Private telemetry (batch size,
rewards, verifier failures, pre-clip norms, clip fraction, non-finite counts, losses) is kept in memory in
`private_telemetry` and is never part of public output. The trainer never computes ε: `plan` is the config's
privacy plan (with the canary slots of the universe), and `privacy_claim` reports its parameters and its ε,
`plan.claim()` (docs/dpgrpo.md, "Privacy plan").

LoRA dropout (config.lora_dropout > 0): the per-record gradient pass runs in train mode inside
`randomness.rollout_scope()`, so every record's dropout masks are fresh draws from the private rollout generator
(A3) and never touch the caller's RNG; rollouts and reference log-probs run in eval mode (no dropout). A
fixed-vector `GradientRecord` (canary) needs no model pass: it takes the same one draw of the rollout generator
and nothing else. With dropout 0 (the float64 checks require it) the model stays in eval mode and no randomness
is drawn.

Rollout backend: `config.rollout_mode == "batched"` selects `rollouts.BatchedHF.from_config(tokenizer, config)`
when that backend exists (else a typed error); otherwise `IsolatedHF` (the default).

Canaries (docs/audits.md): a universe from `SlotUniverse.append_canaries` has n = config.n real slots followed
by m_c canary slots. Coins are drawn for all n + m_c slots, the public divisor is q·(n + m_c) (from n and m_c,
never from presence bits), (q, σ, T) and ε are unchanged (the plan's `canaries` enter only the divisor), and
`privacy_claim` reports n, n_canary and the auditor's commitment verbatim. `audit_hooks` (an `AuditHooks`)
writes the auditor's private log each round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys

import torch

from mechanisms.dpgrpo import batched_grads, core
from mechanisms.dpgrpo import rollouts as rollout_backends
from mechanisms.dpgrpo.audit_hooks import AuditHooks
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.randomness import TorchRandomness
from mechanisms.dpgrpo.record_grads import StepContext, from_name
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup, SlotUniverse
from mechanisms.dpgrpo.rollouts import IsolatedHF, decode_completion, token_logprobs
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.interrupts import reraise_if_interrupted

__all__ = ["DEFAULT_PUBLIC_EXAMPLES", "DPTrainer", "SlotItem", "VerifierError", "reward_value"]


class VerifierError(PrivcheckError):
    """The verifier raised, or returned a value outside {0, 1}, on a public example at construction."""


DEFAULT_PUBLIC_EXAMPLES = (
    (Record(prompt="1+2=", answer="3"), "3"),
    (Record(prompt="1+2=", answer="3"), "4"),
    (Record(prompt="5+5=", answer="10"), ""),
    (Record(prompt="0+0=", answer="0"), "00+="),
)


def reward_value(r) -> int | None:
    """0 or 1 if r is one of them (bool, int, float, 0-d tensor), else None."""
    if isinstance(r, torch.Tensor):
        if r.numel() != 1:
            return None
        r = r.item()
    if isinstance(r, bool):
        return int(r)
    if isinstance(r, (int, float)) and r in (0, 1):
        return int(r)
    return None


class SlotItem(tuple):
    """A (record, group) item of a round's batch that carries its 0-based slot index `slot`. `step()` hands these
    to `noisy_update`, so whichever way a trainer splits the round's items into `contributions` calls
    (micro-batches, reordered, a subset), each item keeps its slot and a canary stays a canary. Equal to the plain
    pair; `unpack` reads it as one."""

    def __new__(cls, record, group, slot: int):
        item = super().__new__(cls, (record, group))
        item.slot = int(slot)
        return item

    def __getnewargs__(self):
        return self[0], self[1], self.slot


_AMBIGUOUS = object()   # a record object that fills several slots of one batch


def _default_backend(tokenizer, config):
    """IsolatedHF, or BatchedHF for rollout_mode "batched" (a typed error when that backend is unavailable)."""
    if config.rollout_mode == "batched":
        batched = getattr(rollout_backends, "BatchedHF", None)
        if batched is None:
            raise InvalidParameter("rollout_mode", "batched", "'isolated' (mechanisms.dpgrpo.rollouts has no "
                                   "BatchedHF backend in this version)")
        return batched.from_config(tokenizer, config)
    return IsolatedHF.from_config(tokenizer, config)


class DPTrainer:
    def __init__(self, model, tokenizer, universe: SlotUniverse, config: DPGRPOConfig, verifier,
                 record_gradient=None, rollout_backend=None, randomness: TorchRandomness | None = None, *,
                 public_examples=DEFAULT_PUBLIC_EXAMPLES, audit_hooks: AuditHooks | None = None):
        if not isinstance(config, DPGRPOConfig):
            raise InvalidParameter("config", type(config).__name__, "a DPGRPOConfig")
        if not isinstance(universe, SlotUniverse):
            raise InvalidParameter("universe", type(universe).__name__, "a SlotUniverse")
        if universe.n_real != config.n:
            raise InvalidParameter("universe.n", universe.n_real, f"the config's public n = {config.n}")
        if audit_hooks is not None and not isinstance(audit_hooks, AuditHooks):
            raise InvalidParameter("audit_hooks", type(audit_hooks).__name__, "None or an AuditHooks")
        if not callable(verifier):
            raise InvalidParameter("verifier", verifier, "a callable (record, completion) -> {0, 1}")
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.universe = universe
        self.verifier = verifier
        self._check_verifier(public_examples)  # before any private record is read
        self.space = core.ParamSpace(model)
        bad = [k for k in self.space.names if "lora_" not in k]
        if bad:
            raise InvalidParameter("model", bad[:3], "a model whose only trainable tensors are LoRA tensors")
        self.device = self.space.params[0].device
        for i in range(universe.n_real, universe.n):  # canary content is the auditor's, not private data
            rec = universe.record(i)
            if isinstance(rec, GradientRecord) and rec.dim != self.space.dim:
                raise InvalidParameter(f"canaries[{i - universe.n_real}]", rec.dim,
                                       f"a GradientRecord with {self.space.dim} entries (the ParamSpace dimension)")
        if audit_hooks is not None:
            audit_hooks.bind(self.space.dim)
        self.audit_hooks = audit_hooks
        self._norm_hint: tuple | None = None      # (g, flat_norm(g)) from `contributions` for the next `clip`
        self._round_slots: list[int] | None = None
        self._round_records: dict | None = None   # id(record) -> slot during step(), for items rebuilt by subclasses
        if randomness is None:
            randomness = TorchRandomness.from_mode(config.randomness, self.device)
        elif not isinstance(randomness, TorchRandomness):
            raise InvalidParameter("randomness", type(randomness).__name__, "a TorchRandomness")
        elif randomness.privacy_release != (config.randomness == "os_entropy"):
            raise InvalidParameter("randomness", randomness.mode, f"the config's mode {config.randomness!r}")
        self.randomness = randomness
        self.arm = from_name(config.record_gradient) if record_gradient is None else record_gradient
        for attr in ("name", "rollout_policy"):
            if not hasattr(self.arm, attr) or not callable(self.arm):
                raise InvalidParameter("record_gradient", self.arm, "a RecordGradient (name, rollout_policy, call)")
        self.rollout_backend = _default_backend(tokenizer, config) if rollout_backend is None else rollout_backend
        self.ctx = StepContext(model=model, space=self.space, tokenizer=tokenizer, chunk_size=config.chunk_size,
                               beta=config.beta, c=config.c, max_prompt_len=config.max_prompt_len,
                               L_max=config.L_max, logprobs=token_logprobs)
        self.grad_sampler = None
        if config.gradient_batch > 1:       # refused here, before any record is read, if the model cannot batch
            if not batched_grads.supports(self.arm):
                raise InvalidParameter("gradient_batch", config.gradient_batch,
                                       f"1 for the arm {getattr(self.arm, 'name', self.arm)!r} (batched per-record "
                                       "gradients cover the GRPO family)")
            self.grad_sampler = batched_grads.LoraGradSampler(model, self.space)
        if config.optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(self.space.params, lr=config.lr, betas=config.betas, eps=config.eps,
                                               weight_decay=config.weight_decay)
        else:
            self.optimizer = torch.optim.SGD(self.space.params, lr=config.lr, momentum=0.0, weight_decay=0.0)
        self.t = 0
        self.public_telemetry: list[dict] = []
        self.private_telemetry: list[dict] = []
        self.scratch: dict = self.new_scratch()
        self._update_hooks: list = []

    # ---------------------------------------------------------------------------- public facts

    @property
    def nonprivate(self) -> bool:
        return self.config.nonprivate

    @property
    def privacy_release(self) -> bool:
        return self.randomness.privacy_release and not self.nonprivate and not self.config.check_mode

    @property
    def release_blockers(self) -> list[str]:
        out = []
        if not self.randomness.privacy_release:
            out.append(self.randomness.reason)
        if self.nonprivate:
            out.append("non-private reference arm (sigma = 0)")
        if self.config.check_mode:
            out.append("check mode")
        return out

    @property
    def n_slots(self) -> int:
        """n + m_c: the public number of slots (real and canary) that get coins every round."""
        return self.config.n + self.universe.n_canary

    @property
    def divisor(self) -> float:
        """The public divisor q·(n + m_c) of line 8 (q·n without canaries); never from presence bits."""
        return self.config.q * self.n_slots

    @property
    def plan(self):
        """The privacy plan of this trainer: the config's plan with the universe's canary slots (which enter the
        public divisor only, never the event); None for the non-private arm."""
        plan = self.config.plan
        if plan is None or self.universe.n_canary == 0:
            return plan
        return dataclasses.replace(plan, canaries=self.universe.n_canary)   # the calibration still matches

    @property
    def privacy_claim(self) -> dict | None:
        """None for the non-private arm; else the plan's parameters and ε (`plan.claim()`, computed from the
        plan's event), with the canary commitment."""
        plan = self.plan
        if plan is None:
            return None
        claim = plan.claim()
        return {"unit": "prompt_group", "neighboring": claim["neighboring"], "n": plan.records,
                "q": plan.sampling_rate, "sigma": plan.noise_multiplier, "T": plan.steps, "delta": plan.delta,
                "C": plan.clip_norm, "n_canary": plan.canaries, "canary_commitment": self.universe.canary_commitment,
                "divisor": plan.divisor, "epsilon": claim["epsilon"], "accountant": claim["accountant"],
                "target_epsilon": claim["target_epsilon"], "event": claim["event"],
                "calibration": claim["calibration"]}

    # ---------------------------------------------------------------------------- construction checks

    def _check_verifier(self, examples) -> None:
        examples = list(examples)
        if not examples:
            raise InvalidParameter("public_examples", examples, "at least one (Record, completion) pair")
        for rec, completion in examples:
            try:
                r = self.verifier(rec, completion)
            except Exception as err:  # noqa: BLE001 — any failure on public data is a construction error
                reraise_if_interrupted(err)
                raise VerifierError(f"verifier raised on public example {rec.prompt!r} / {completion!r}: "
                                    f"{type(err).__name__}: {err}") from err
            if reward_value(r) is None:
                raise VerifierError(f"verifier returned {r!r} (not in {{0, 1}}) on public example "
                                    f"{rec.prompt!r} / {completion!r}")

    # ---------------------------------------------------------------------------- Algorithm 1

    def new_scratch(self) -> dict:
        return {"verifier_failures": 0, "rewards": [], "pre_clip_norms": [], "clipped": 0, "nonfinite": 0,
                "records": [], "canary_pre_clip_norms": {}, "cross_talk": None}

    def sample_coins(self) -> torch.Tensor:
        """Line 2: Bernoulli(q) coins for all n + m_c slots (canary slots included) from the coins generator."""
        return core.poisson_coins(self.n_slots, self.config.q, self.randomness.coins)

    def rollouts(self, model, records, policy) -> list:
        """Line 4: one RolloutGroup per record (None for GradientRecords or when policy is "none")."""
        if policy == "none":
            return [None] * len(records)
        return self.rollout_backend(model, records, policy, self.randomness)

    def _reward(self, record, text) -> int:
        try:
            r = reward_value(self.verifier(record, text))
        except Exception as exc:  # noqa: BLE001 — fixed rule: reward 0, counted privately
            reraise_if_interrupted(exc)
            r = None
        if r is None:
            self.scratch["verifier_failures"] += 1
            return 0
        return r

    def score(self, records, groups) -> list:
        """Line 5: fill each group's rewards with the verifier (fixed rule for failures)."""
        out = []
        for rec, group in zip(records, groups, strict=True):
            if group is None or isinstance(rec, GradientRecord):
                out.append(group)
                continue
            texts = group.texts if group.texts is not None else tuple(
                decode_completion(self.tokenizer, row) for row in group.token_ids.tolist())
            rewards = torch.tensor([self._reward(rec, y) for y in texts], dtype=torch.int64)
            self.scratch["rewards"].append(rewards.tolist())
            out.append(RolloutGroup(group.token_ids, group.mask, rewards, texts))
        return out

    @contextlib.contextmanager
    def _dropout_scope(self):
        """Train mode with fresh rollout-generator randomness for one record's gradient pass when LoRA dropout
        is on; a no-op otherwise (the model stays in eval mode)."""
        if self.config.lora_dropout == 0:
            yield
            return
        was_training = self.model.training
        with self.randomness.rollout_scope():
            self.model.train()
            try:
                yield
            finally:
                self.model.train(was_training)

    def record_gradient(self, record, group=None, *, chunk_size=None) -> torch.Tensor:
        """Line 6: the arm's flat, unclipped gradient for one record (private dict kept privately)."""
        kwargs = {} if chunk_size is None else {"chunk_size": chunk_size}
        if isinstance(record, GradientRecord) and self.config.lora_dropout != 0:
            # a fixed vector needs no model pass, so neither train mode nor a forked framework RNG (together
            # 7 ms a record on the tiny model); the rollout stream still advances by the draw every gradient
            # pass takes, so seeded runs are unchanged
            self.randomness.rollout_draw()
            rg = self.arm(self.ctx, record, group, **kwargs)
        else:
            with self._dropout_scope():
                rg = self.arm(self.ctx, record, group, **kwargs)
        self.scratch["records"].append(rg.private)
        return rg.grad

    def record_gradients(self, items) -> list[torch.Tensor]:
        """Line 6 for every item, in order: `record_gradient` per item (gradient_batch = 1, the reference path),
        or equal-shape buckets of up to `gradient_batch` records, each from one forward and one backward
        (`batched_grads`, bit-identical to the per-item path). Private dicts kept privately, in item order."""
        pairs = [self.unpack(item) for item in items]
        if self.grad_sampler is None:
            return [self.record_gradient(*pair) for pair in pairs]
        with self._dropout_scope():
            rgs = batched_grads.batched_record_grads(self.ctx, self.arm, self.grad_sampler, pairs,
                                                     max_records=self.config.gradient_batch)
        self.scratch["records"].extend(rg.private for rg in rgs)
        return [rg.grad for rg in rgs]

    def record_loss_and_grad(self, record, group=None, chunk_size=None) -> tuple[float, torch.Tensor]:
        kwargs = {} if chunk_size is None else {"chunk_size": chunk_size}
        with self._dropout_scope():
            rg = self.arm(self.ctx, record, group, **kwargs)
        return rg.private.get("loss", 0.0), rg.grad

    @staticmethod
    def unpack(item):
        if isinstance(item, GradientRecord):
            return item, None
        if isinstance(item, tuple) and len(item) == 2:
            return item
        raise InvalidParameter("item", type(item).__name__, "a (record, group) pair or a GradientRecord")

    def clip(self, v) -> torch.Tensor:
        # the pre-clip norm `contributions` computed for this very tensor, handed over only when no override of
        # `clip` sits between them (one-shot); any other call computes the norm itself
        hint, self._norm_hint = getattr(self, "_norm_hint", None), None
        norm = hint[1] if hint is not None and hint[0] is v else None
        return core.clip_flat(v, self.config.C, nonprivate=self.nonprivate, norm=norm)

    def item_slots(self, items, slots=None) -> list[int | None]:
        """The slot index of each item (None: a real record outside any round's batch).

        An item's slot is the one it carries (`SlotItem`, what `step` passes), else, inside `step`, the slot of its
        record object in the round's batch (an item a subclass rebuilt), else None. Explicit `slots` (one per item)
        must agree with the slots the items carry; a mismatch, or a rebuilt item whose record fills several slots of
        the batch, is refused (InvalidParameter): a lost slot would make a canary count as a real record."""
        items = list(items)
        carried = [it.slot if isinstance(it, SlotItem) else None for it in items]
        if slots is not None:
            slots = [int(i) for i in slots]
            if len(slots) != len(items):
                raise InvalidParameter("slots", len(slots), f"one slot index per item ({len(items)})")
            wrong = [(c, i) for c, i in zip(carried, slots) if c is not None and c != i]
            if wrong:
                raise InvalidParameter("slots", [i for _, i in wrong[:3]],
                                       f"the slots the items carry ({[c for c, _ in wrong[:3]]})")
            return slots
        if self._round_records is not None:
            for k, item in enumerate(items):
                if carried[k] is None:
                    found = self._round_records.get(id(self.unpack(item)[0]))
                    if found is _AMBIGUOUS:
                        raise InvalidParameter("items", k, "round items that carry their slot (SlotItem): this "
                                               "item's record fills several slots of the batch")
                    carried[k] = found
        return carried

    def contributions(self, items, *, slots=None) -> list[torch.Tensor]:
        """Lines 6–7: ḡ_i = clip_C(g_i), one clip per record over the whole flat vector.

        Each item's slot (`item_slots`: carried by the round's `SlotItem`s, or `slots`) tells canary items from
        real ones, however the round's items are split into calls; an item without a slot counts as a real record.
        With `mask_reserved_for_real_records`, real records' gradients are zeroed on the reserved coordinates before
        clipping; canaries are never masked."""
        items = list(items)
        slots = self.item_slots(items, slots)
        hooks = self.audit_hooks
        base_clip = getattr(self.clip, "__func__", None) is DPTrainer.clip   # no override: it may reuse the norm
        out = []
        for k, g in enumerate(self.record_gradients(items)):
            canary = slots[k] is not None and self.universe.is_canary(slots[k])
            if hooks is not None and hooks.mask_reserved_for_real_records and not canary:
                g = hooks.mask(g)
            norm = core.flat_norm(g)   # float64 accumulation, no float64 copy of g
            self.scratch["pre_clip_norms"].append(norm)
            self.scratch["nonfinite"] += int(not math.isfinite(norm))
            self.scratch["clipped"] += int(math.isfinite(norm) and norm > self.config.C)
            self._norm_hint = (g, norm) if base_clip else None
            clipped = self.clip(g)
            self._norm_hint = None
            if hooks is not None:  # auditor-only diagnostics (private log), never used by the statistic
                if canary:
                    self.scratch["canary_pre_clip_norms"][slots[k] - self.universe.n_real] = norm
                else:
                    ct = hooks.reserved_values(clipped)
                    prev = self.scratch["cross_talk"]
                    self.scratch["cross_talk"] = ct if prev is None else [a + b for a, b in zip(prev, ct)]
            out.append(clipped)
        return out

    def clipped_sum(self, items) -> torch.Tensor:
        """Σ_i ḡ_i (no noise, no division); the zero vector for an empty list."""
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        for v in self.contributions(items):
            if v.dtype == S.dtype and v.shape == S.shape and v.device == S.device:
                S.add_(v)   # the same sums as S + v, without a new vector per record
            else:
                S = S + v   # promotion or broadcasting as before
        return S

    def privatize(self, S) -> torch.Tensor:
        """Line 8: (S + N(0, σ²C²I)) / (q·(n + m_c)) with the noise generator; the divisor is public."""
        cfg = self.config
        return core.privatize(S, cfg.sigma, cfg.C, cfg.q, self.n_slots, self.randomness.noise,
                              nonprivate=self.nonprivate)

    def noisy_update(self, items) -> torch.Tensor:
        return self.privatize(self.clipped_sum(items))

    def apply_update(self, g_hat) -> bool:
        """Line 9: ĝ into LoRA .grad, optimizer.step(). A non-finite ĝ skips the step (state unchanged)."""
        finite = bool(torch.isfinite(g_hat).all())
        if finite:
            core.unflatten_into(g_hat, self.space)
            self.optimizer.step()
        self.space.zero_grad()
        return finite

    def add_update_hook(self, fn):
        """Register `fn(g_hat) -> Tensor | None`, applied in `step()` to the flat ĝ right after `privatize`
        (line 8), before the audit log, the telemetry and `apply_update` read it; None keeps ĝ unchanged. Used by
        the whole-step checks (docs/whole_step.md) to observe and fix ĝ. Returns a function that removes it."""
        if not callable(fn):
            raise InvalidParameter("fn", fn, "a callable g_hat -> Tensor | None")
        self._update_hooks.append(fn)

        def remove() -> None:
            if fn in self._update_hooks:
                self._update_hooks.remove(fn)
        return remove

    def _run_update_hooks(self, g_hat):
        for fn in list(self._update_hooks):
            out = fn(g_hat)
            if out is None:
                continue
            if not isinstance(out, torch.Tensor) or out.shape != g_hat.shape:
                raise InvalidParameter("update hook result", getattr(out, "shape", out),
                                       f"None or a tensor of shape {tuple(g_hat.shape)}")
            g_hat = out
        return g_hat

    def step(self) -> dict:
        """One round of Algorithm 1; returns this round's public telemetry entry."""
        self.scratch = self.new_scratch()
        coins = self.sample_coins()                                             # line 2
        batch = self.universe.batch(coins)                                      # line 3
        records = [self.universe.record(i) for i in batch]
        policy = getattr(self.arm, "rollout_policy", "current")
        groups = self.rollouts(self.model, records, policy)                     # line 4
        groups = self.score(records, groups)                                    # line 5
        self._round_slots = batch
        self._round_records = {}
        for i, rec in zip(batch, records):
            self._round_records[id(rec)] = _AMBIGUOUS if id(rec) in self._round_records else i
        try:
            g_hat = self.noisy_update([SlotItem(rec, grp, i)
                                       for i, rec, grp in zip(batch, records, groups)])   # lines 6–8
        finally:
            self._round_slots = self._round_records = None
        g_hat = self._run_update_hooks(g_hat)
        if self.audit_hooks is not None:
            self._audit_log(self.t + 1, g_hat, batch, groups)
        before = [p.detach().clone() for p in self.space.params]
        applied = self.apply_update(g_hat)                                      # line 9
        self.t += 1
        entry = core.public_step_entry(self.t, self.optimizer, self.space.params, before, g_hat, applied)
        self.public_telemetry.append(entry)
        sc = self.scratch
        norms = sc["pre_clip_norms"]
        rewards = [r for rs in sc["rewards"] for r in rs]
        self.private_telemetry.append({
            "t": self.t, "batch_size": len(batch), "verifier_failures": sc["verifier_failures"],
            "reward_mean": (sum(rewards) / len(rewards)) if rewards else None,
            "constant_group_fraction": (sum(len(set(rs)) == 1 for rs in sc["rewards"]) / len(sc["rewards"]))
            if sc["rewards"] else None,
            "pre_clip_norms": norms, "clip_fraction": (sc["clipped"] / len(norms)) if norms else None,
            "nonfinite_records": sc["nonfinite"], "records": sc["records"]})
        return entry

    def _audit_log(self, t, g_hat, batch, groups) -> None:
        """The auditor's private log: U_t[J] with σ·C, q·(n + m_c) and t; then diagnostics."""
        cfg = self.config
        sigma_C = 0.0 if cfg.sigma == 0 else cfg.sigma * cfg.C
        self.audit_hooks.log_round(t, g_hat, sigma_C, self.divisor)
        uni = self.universe
        in_batch = set(batch)
        canary_groups = [grp for i, grp in zip(batch, groups) if uni.is_canary(i)
                         and grp is not None and grp.rewards is not None]
        sc = self.scratch
        self.audit_hooks.log_diagnostics(t, {
            "canary_included": [int(uni.n_real + k in in_batch) for k in range(uni.n_canary)],
            "canary_pre_clip_norms": {str(k): v for k, v in sorted(sc["canary_pre_clip_norms"].items())},
            "canary_constant_group_fraction": (sum(len(set(g.rewards.tolist())) == 1 for g in canary_groups)
                                               / len(canary_groups)) if canary_groups else None,
            "cross_talk_reserved": sc["cross_talk"]})

    def train(self, T: int | None = None) -> list[dict]:
        """Run T rounds (default config.T; never more than the accounted config.T); tqdm bar on a TTY only."""
        T = self.config.T if T is None else T
        if isinstance(T, bool) or not isinstance(T, int) or not 1 <= T <= self.config.T - self.t:
            raise InvalidParameter("T", T, f"an integer in [1, {self.config.T - self.t}] (rounds left of config.T)")
        try:
            from tqdm.auto import tqdm
            bar = tqdm(range(T), desc=f"dp-grpo[{self.config.arm}]", disable=not sys.stderr.isatty())
        except ImportError:  # pragma: no cover
            bar = range(T)
        for _ in bar:
            self.step()
        return self.public_telemetry[-T:]
