"""Dirac gradient canaries for any Opacus DPOptimizer, logged for a one-run audit (docs/integrations/opacus.md,
"Audit an Opacus model"; the audit itself is `audits.gradient_log`).

`GradientCanaries(optimizer, coordinates=J, presence=bits, log_path=...)` wraps the optimizer's
`clip_and_accumulate` on the instance and adds a step pre-hook to `optimizer.original_optimizer`:

* canary k is the per-sample gradient C·e_{j_k} on its reserved coordinate j_k (flat coordinates of the private
  parameters in `optimizer.params` order). Each step every canary slot draws its own coin Bernoulli(q) with the
  public q (all m coins every step, so the draws do not depend on the membership); a canary is included when it
  is present (its membership bit, drawn by the auditor) and its coin is 1. Included canaries are appended as rows
  of the per-sample gradients and go through Opacus's own clip, sum, noise and division like any record;
* with `mask_real=True` (default) real records' per-sample gradients are zeroed on J before clipping (a fixed
  per-record map, so no record's sensitivity changes);
* after the noise and the division, every step appends to the auditor's private log (mode 0600, one JSON line,
  `privcheck.integrations.auditor_log`):
  `{"kind": "round", "t": t, "reserved": [j...], "U": [U_t[j]...], "sigma_C": σ·C, "divisor": d}` with
  U_t[J] = ĝ_t[J]·d = S_t[J] + z_t[J] (a post-processing of the released update), and a separate
  `{"kind": "diagnostics", ...}` line (realised canary inclusions, never read by the test statistic).

The canary slots are records of the audited universe: with `records=n` the optimizer's divisor becomes
q·(n + m) (the expected batch size of n real records and m canary slots, as the DP-GRPO audit's plan); (q, σ, T)
and hence the ε are unchanged. Virtual steps (Opacus's skipped physical batches) get the canaries once, on the
batch that is followed by the noisy step. The coins use OS entropy unless `seed` is given (a test, not a release).
"""

from __future__ import annotations

from typing import Sequence

from privcheck import validation as v
from privcheck.errors import InvalidParameter
from privcheck.integrations.auditor_log import append_lines, check_log_path

__all__ = ["GradientCanaries", "canary_ids", "private_dimension"]


def private_dimension(optimizer) -> int:
    """The number of flat coordinates of the optimizer's private parameters (`optimizer.params`)."""
    return sum(p.numel() for p in optimizer.params)


def canary_ids(coordinates: Sequence[int]) -> tuple[str, ...]:
    """The public ids "dirac:<j>" of the canaries on `coordinates` (the ids a membership commitment binds)."""
    return tuple(f"dirac:{int(j)}" for j in coordinates)


class GradientCanaries:
    """Dirac canaries on `optimizer` (module docstring). Installed at construction; `remove()` (or leaving a
    `with` block) uninstalls them and restores the optimizer's divisor."""

    def __init__(self, optimizer, *, coordinates: Sequence[int], presence: Sequence, log_path,
                 sample_rate: float | None = None, records: int | None = None, mask_real: bool = True,
                 seed: int | None = None):
        import numpy as np
        import torch

        from privcheck.integrations.opacus_run import opacus_parameters
        from privcheck.randomness import derive_seed, entropy_seed

        params = opacus_parameters(optimizer, sample_rate=sample_rate)
        if "clip_and_accumulate" in optimizer.__dict__:
            raise InvalidParameter("optimizer", "already wrapped", "a DPOptimizer without another canary hook")
        dim = private_dimension(optimizer)
        J = [int(j) for j in coordinates] if isinstance(coordinates, (list, tuple, range)) else None
        if not J or len(set(J)) != len(J) or min(J) < 0 or max(J) >= dim:
            raise InvalidParameter("coordinates", coordinates, f"distinct integers in [0, {dim}) (one per canary)")
        bits = np.asarray(presence)
        if bits.shape != (len(J),) or not set(np.unique(bits).tolist()) <= {0, 1, True, False}:
            raise InvalidParameter("presence", getattr(bits, "shape", presence), f"{len(J)} presence bits (0/1)")
        if not isinstance(mask_real, bool):
            raise InvalidParameter("mask_real", mask_real, "a bool")
        self.log_path = check_log_path(log_path)
        self.optimizer, self.reserved, self.mask_real = optimizer, tuple(J), mask_real
        self.ids = canary_ids(J)
        self.q, self.C = params["q"], params["C"]
        self._present = torch.tensor(bits.astype(bool))
        seed = entropy_seed() if seed is None else v.count("seed", seed, minimum=0)
        self._coins = torch.Generator().manual_seed(derive_seed(seed, "canary-coins", "privcheck.integrations"))
        self.privacy_release = seed is None
        self.t = 0
        self._included = None
        self._saved_divisor = optimizer.expected_batch_size
        if records is not None:
            n = v.count("records", records)
            if optimizer.loss_reduction == "mean":
                optimizer.expected_batch_size = self.q * (n + len(J))
        # where each reserved coordinate lives: (parameter index, index inside the flattened parameter)
        bounds, start = [], 0
        for p in optimizer.params:
            bounds.append((start, start + p.numel()))
            start += p.numel()
        self._where = [next((k, j - a) for k, (a, b) in enumerate(bounds) if a <= j < b) for j in J]
        # the same map as index tensors, one entry per parameter holding canaries: (k, canary slots, local indices)
        owner = torch.tensor([k for k, _ in self._where], dtype=torch.int64)
        local = torch.tensor([j for _, j in self._where], dtype=torch.int64)
        self._owner, self._local = owner, local
        self._groups = [(k, torch.nonzero(owner == k).reshape(-1), local[owner == k])
                        for k in range(len(bounds)) if bool((owner == k).any())]
        self._previous = optimizer.clip_and_accumulate
        optimizer.clip_and_accumulate = self._clip_and_accumulate
        self._handle = optimizer.original_optimizer.register_step_pre_hook(self._log_step)

    # ---------------------------------------------------------------------------------------- hooks

    def _clip_and_accumulate(self):
        """Mask J on the real rows and append the included canaries' rows to the per-sample gradients Opacus
        already holds (one copy per parameter that needs either, index writes, no loop over canaries), then run
        Opacus's own clip and accumulate on them."""
        import torch

        opt = self.optimizer
        params = list(opt.params)
        samples = [g.detach() for g in opt.grad_samples]
        # Opacus queues a flag per physical batch of a virtual step; the canaries join the last one only.
        queue = getattr(opt, "_step_skip_queue", None) or []
        which = None
        if not (queue and queue[0]):
            coins = torch.rand(len(self.reserved), generator=self._coins) < self.q
            included = coins & self._present
            self._included = included
            which = torch.nonzero(included).reshape(-1)        # canary slots included, in slot order
        r = 0 if which is None else int(which.numel())
        row_of = None
        if r:
            row_of = torch.full((len(self.reserved),), -1, dtype=torch.int64)
            row_of[which] = torch.arange(r)                    # canary slot -> its appended row
        touched = {k: (slots, loc) for k, slots, loc in self._groups}
        for k, p in enumerate(params):
            g = samples[k]
            B = g.shape[0]
            if not r and not (k in touched and self.mask_real and B):
                continue
            out = torch.cat([g, torch.zeros((r, *p.shape), dtype=p.dtype, device=p.device)]) if r else g.clone()
            if k in touched:
                slots, loc = touched[k]
                flat = out.view(B + r, -1)
                if self.mask_real and B:
                    flat[:B, loc.to(flat.device)] = 0
                if r:
                    rows = row_of[slots]
                    hit = rows >= 0
                    if bool(hit.any()):
                        flat[(B + rows[hit]).to(flat.device), loc[hit].to(flat.device)] = self.C
            samples[k] = out
        for p, g in zip(params, samples):
            p.grad_sample = g
        self._previous()

    def _log_step(self, _optimizer, _args, _kwargs):
        import torch

        opt = self.optimizer
        divisor = 1.0 if opt.loss_reduction == "sum" else float(opt.expected_batch_size) * float(
            opt.accumulated_iterations)
        params = list(opt.params)
        U = torch.empty(len(self.reserved), dtype=torch.float64)
        for k, slots, loc in self._groups:                     # one gather per parameter holding canaries
            U[slots] = params[k].grad.detach().reshape(-1)[loc.to(params[k].grad.device)].double().cpu()
        self.t += 1
        included = self._included
        inc = [] if included is None else included.to(torch.int64).tolist()
        append_lines(self.log_path, [
            {"kind": "round", "t": self.t, "reserved": list(self.reserved), "U": (U * divisor).tolist(),
             "sigma_C": float(opt.noise_multiplier) * float(opt.max_grad_norm), "divisor": divisor},
            {"kind": "diagnostics", "t": self.t, "diagnostics": {
                "canary_included": inc,
                "canary_pre_clip_norms": {cid: self.C for cid, b in zip(self.ids, inc) if b},
                "cross_talk_reserved": None, "real_records_masked_on_reserved": self.mask_real}}])
        self._included = None

    # ---------------------------------------------------------------------------------------- removal

    def remove(self) -> None:
        """Uninstall the hooks and restore the optimizer's divisor (idempotent)."""
        if self._handle is None:
            return
        self._handle.remove()
        self._handle = None
        self.optimizer.__dict__.pop("clip_and_accumulate", None)
        self.optimizer.expected_batch_size = self._saved_divisor

    def __enter__(self) -> "GradientCanaries":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
