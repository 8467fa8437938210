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
* after the noise and the division, every step appends one binary record to the auditor's private log (mode 0600,
  `privcheck.integrations.canary_log`; the reserved coordinates and C once, in its header): t, σ·C, the divisor
  d, U_t[J] = ĝ_t[J]·d = S_t[J] + z_t[J] (a post-processing of the released update) and the realised canary
  inclusions (diagnostics, never read by the test statistic). `audits.visibility.read_auditor_log` reads it as the
  `round` and `diagnostics` entries of the JSON-lines format.

The canary slots are records of the audited universe: with `records=n` the optimizer's divisor becomes
q·(n + m) (the expected batch size of n real records and m canary slots, as the DP-GRPO audit's plan); (q, σ, T)
and hence the ε are unchanged. Virtual steps (Opacus's skipped physical batches) get the canaries once, on the
batch that is followed by the noisy step. The coins use OS entropy unless `seed` is given (a test, not a release).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from privcheck import validation as v
from privcheck.errors import InvalidParameter
from privcheck.integrations.auditor_log import check_log_path
from privcheck.integrations.canary_log import CanaryLogWriter, canary_ids

__all__ = ["GradientCanaries", "canary_ids", "private_dimension"]


def private_dimension(optimizer) -> int:
    """The number of flat coordinates of the optimizer's private parameters (`optimizer.params`)."""
    return sum(p.numel() for p in optimizer.params)


class GradientCanaries:
    """Dirac canaries on `optimizer` (module docstring). Installed at construction; `remove()` (or leaving a
    `with` block) uninstalls them and restores the optimizer's divisor."""

    def __init__(self, optimizer, *, coordinates: Sequence[int], presence: Sequence, log_path,
                 sample_rate: float | None = None, records: int | None = None, mask_real: bool = True,
                 seed: int | None = None):
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
        self._log = CanaryLogWriter(self.log_path, J, clip_norm=self.C, mask_real=mask_real)
        self._present = bits.astype(bool)
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
        # Where each reserved coordinate lives, as index tensors built once. Canary slots are kept in `order`
        # (by parameter, then slot), so each parameter's included canaries are one contiguous run of the included
        # ones; a canary's row is its rank in that order (rows only need to be distinct: each canary row is zero
        # outside its coordinate, so no sum or norm depends on the rows' order). For coordinates in increasing
        # order (`reserved_coordinates`), `order` is the slot order.
        sizes = [p.numel() for p in optimizer.params]
        ends = np.cumsum(sizes)
        Jn = np.asarray(J, dtype=np.int64)
        owner = np.searchsorted(ends, Jn, side="right")        # the parameter holding each coordinate
        local = Jn - (ends - np.asarray(sizes))[owner]         # its index inside the flattened parameter
        order = np.argsort(owner, kind="stable")
        self._order = None if np.array_equal(order, np.arange(len(J))) else order
        self._unorder = None if self._order is None else np.argsort(order)
        self._width = np.asarray(sizes, dtype=np.int64)[owner[order]]        # n_k of each canary, in `order`
        self._local = local[order]
        devices = [p.device for p in optimizer.params]
        counts = np.bincount(owner, minlength=len(sizes))
        firsts = np.concatenate([[0], np.cumsum(counts)])
        # per parameter holding canaries: (k, local indices, the same on its device), and each canary's group, in
        # `order`
        self._groups = [(k, self._local[firsts[k]:firsts[k + 1]],
                         torch.from_numpy(self._local[firsts[k]:firsts[k + 1]]).to(devices[k]))
                        for k in range(len(sizes)) if counts[k]]
        self._sizes = sizes
        # CPU tensors numpy can view are written through numpy: a handful of small tensor operations per parameter
        # each step cost more than the step of a small model; the torch path gives the same values
        self._numpy = all(p.device.type == "cpu" and p.dtype in (torch.float16, torch.float32, torch.float64)
                          for p in optimizer.params)
        self._group_of = np.repeat(np.arange(len(self._groups)), counts[counts > 0])
        self._group_ids = np.arange(len(self._groups) + 1)
        self._previous = optimizer.clip_and_accumulate
        optimizer.clip_and_accumulate = self._clip_and_accumulate
        self._handle = optimizer.original_optimizer.register_step_pre_hook(self._log_step)

    # ---------------------------------------------------------------------------------------- hooks

    def _clip_and_accumulate(self):
        """Mask J on the real rows and append the included canaries' rows to the per-sample gradients Opacus
        already holds (one padded copy per parameter that needs either, one index fill per mask and per parameter
        holding included canaries, no loop over canaries), then run Opacus's own clip and accumulate on them."""
        import torch

        opt = self.optimizer
        params = list(opt.params)
        samples = [g.detach() for g in opt.grad_samples]
        B = samples[0].shape[0] if samples else 0
        # Opacus queues a flag per physical batch of a virtual step; the canaries join the last one only.
        queue = getattr(opt, "_step_skip_queue", None) or []
        r, bounds, where = 0, None, None
        if not (queue and queue[0]):
            coins = (torch.rand(len(self.reserved), generator=self._coins) < self.q).numpy()
            included = coins & self._present                  # in slot order: the log's inclusion bits
            self._included = included
            picked = np.flatnonzero(included if self._order is None else included[self._order])
            r = int(picked.size)
            if r:
                # flat position of each included canary's C in its parameter's padded (B + r, n_k) rows, and
                # where each parameter's run of them starts and ends
                where = (B + np.arange(r)) * self._width[picked] + self._local[picked]
                bounds = np.searchsorted(self._group_of[picked], self._group_ids).tolist()
        mask = self.mask_real and B > 0
        fill = {k: (g, None) for g, (k, _, _) in enumerate(self._groups)} if mask else {}
        if r:
            for g, (k, _, _) in enumerate(self._groups):
                if bounds[g + 1] > bounds[g]:
                    fill[k] = (g if mask else None, where[bounds[g]:bounds[g + 1]])
        for k, p in enumerate(params):
            if r or k in fill:
                masked, canaries = fill.get(k, (None, None))
                samples[k] = self._extended(samples[k], B, r, self._sizes[k], masked, canaries).view(B + r, *p.shape)
        for p, g in zip(params, samples):
            p.grad_sample = g
        self._previous()

    def _extended(self, g, B: int, r: int, n: int, group: int | None, canaries: np.ndarray | None):
        """The (B, ...) per-sample gradients `g` as B + r rows of n: r zero rows appended, the real rows zeroed
        on the reserved coordinates of canary group `group` (None: no mask) and C at the flat `canaries`
        positions (None: none)."""
        import torch

        if self._numpy and g.device.type == "cpu":
            out = torch.empty((B + r, n), dtype=g.dtype)
            o = out.numpy()
            o[:B] = g.reshape(B, n).numpy()
            o[B:] = 0
            if group is not None:
                o[:B, self._groups[group][1]] = 0
            if canaries is not None:
                o.reshape(-1)[canaries] = self.C
            return out
        flat = g.reshape(B, n)
        flat = torch.nn.functional.pad(flat, (0, 0, 0, r)) if r else flat.clone()
        if group is not None:
            loc = self._groups[group][2]
            flat[:B].index_fill_(1, loc if loc.device == flat.device else loc.to(flat.device), 0)
        if canaries is not None:
            flat.view(-1).index_fill_(0, torch.from_numpy(canaries).to(flat.device), self.C)
        return flat

    def _log_step(self, _optimizer, _args, _kwargs):
        import torch

        opt = self.optimizer
        divisor = 1.0 if opt.loss_reduction == "sum" else float(opt.expected_batch_size) * float(
            opt.accumulated_iterations)
        params = list(opt.params)
        # one gather per parameter holding canaries, in `order`, then back to slot order
        grads = [params[k].grad.detach().reshape(-1) for k, _, _ in self._groups]
        if self._numpy and all(g.device.type == "cpu" for g in grads):
            U = np.concatenate([g.numpy()[loc] for g, (_, loc, _) in zip(grads, self._groups)]).astype(np.float64)
        else:
            U = torch.cat([g.index_select(0, loc).to("cpu", torch.float64)
                           for g, (_, _, loc) in zip(grads, self._groups)]).numpy()
        if self._unorder is not None:
            U = U[self._unorder]
        self.t += 1
        self._log.write_round(self.t, U * divisor, divisor=divisor, included=self._included,
                              sigma_C=float(opt.noise_multiplier) * float(opt.max_grad_norm))
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
