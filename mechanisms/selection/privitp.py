"""PrivITP: private InferenceTimePessimism (Bhattad & Ray Chowdhury), two phases on independent batches.

Guarantee (proofs in docs/selection.md, "PrivITP" and "Proof notes"): one query that releases λ̃ and halts
at round t (t = ⊥ for the fallback) is ex-post (ε, δ)-DP with

    ε(λ̃, t) = ε1 + ε2(t; λ̃),   ε2(t) = (t − 1)·κ(λ̃) + κ_acc(λ̃),   ε2(⊥) = n·κ(λ̃),

ε1 the analytic-Gaussian cost of releasing λ̃ = λ̂ + N(0, σ_X²) at sensitivity Δ (λ̂ has sensitivity
≤ Δ) and κ, κ_acc the certified Phase-2 costs at the mechanism's own threshold width
c = `PrivITPParams.threshold_width(λ̃)` = max(r_max + σ_Z·L − λ̃, c_min). Every ε comes from
`privcheck.accounting.epsilon(PrivITPEvent(params, λ̃, t))` (one record per prompt); this module never
computes one. λ̂ itself is private and is never returned.

Assumptions: Δ is a public claim about the reward model (not verified); every constant in
`PrivITPParams` is public and fixed in advance; the Phase-1 and Phase-2 candidate lists are independent
draws from π0 (the caller supplies their scores as two DIFFERENT arrays: sharing memory raises); noise
is idealised real-valued (numpy samplers; see docs/selection.md, "Gaps").

    PrivITP(params).select(phase1[P, n], phase2[P, n], rng):
        s  ← clip(phase1);  λ̂ ← lambda_hat(s, β);  λ̃ ← λ̂ + N(0, σ_X²)          # Phase 1
        c  ← params.threshold_width(λ̃);  M = c/β
        s′ ← clip(phase2);  r̃_i = s′_i + Z_i,  Z_i ~ N(0, σ_Z²);  U_i ~ Unif[0, 1)  # Phase 2
        accept at the first i with U_i < min(1, relu((r̃_i − λ̃)/β)/M)  ⇔  c·U_i < r̃_i − λ̃
        none accepted → fallback (FRESH_PI0 = −1: the caller draws a fresh π0 sample), t = ⊥
        records: epsilon(PrivITPEvent(params, λ̃, t or None)) per prompt

Implementation: Z and U are drawn for whole [prompts, rounds] blocks and the first acceptance is the
arg-max of the boolean acceptance matrix; blocks of rounds grow geometrically and only prompts that have
not accepted yet draw the next block (rounds after the halting round are independent of the output, so
skipping them leaves the law unchanged). The acceptance test uses the equivalent randomised-threshold form
c·U_i < r̃_i − λ̃ (docs/selection.md, "Proof notes: the randomised threshold"), which avoids the
division by M.
"""

from __future__ import annotations

import numpy as np

from mechanisms.selection.itp import FALLBACKS, fallback_indices, lambda_hat_matrix
from mechanisms.selection.randomness import as_randomness
from mechanisms.selection.results import HALT_FALLBACK, RejectionResult, frozen_array
from mechanisms.selection.scores import check_independent, prepare_scores
from privcheck import validation as v
from privcheck.accounting import AccountingRecord, PrivITPEvent, PrivITPParams, epsilon
from privcheck.errors import InvalidParameter

__all__ = ["PrivITP", "run_phase2", "threshold_widths"]

# Prompts per block in Phase 2 are chosen so that one block holds about this many candidates
# (two float64 temporaries of 8 MiB each: stays cache- and memory-friendly for any batch size).
_BLOCK_CANDIDATES = 1 << 20
_FIRST_WIDTH = 32


def threshold_widths(params: PrivITPParams, lambda_tilde: np.ndarray) -> np.ndarray:
    """c per prompt, from THE definition `PrivITPParams.threshold_width` (shared with the accountant)."""
    return np.fromiter((params.threshold_width(x) for x in lambda_tilde.tolist()), dtype=np.float64,
                       count=lambda_tilde.shape[0])


def run_phase2(phase2: np.ndarray, lambda_tilde: np.ndarray, c: np.ndarray, sigma_z: float,
               gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Phase 2 given released λ̃ and c per prompt, on already clipped scores [P, n].

    Returns (first, accepted): the 0-based first acceptance round and whether any round accepted.
    Rounds are processed in column blocks of geometrically growing width (32, 64, 128, ...) for the
    prompts that have not accepted yet; Z and U are drawn for a whole block and the first acceptance is
    the arg-max of the boolean acceptance matrix. Rounds after a prompt's halting round are never drawn:
    they cannot influence the output (later rewards may be evaluated lazily, or never), so the output law
    is exactly that of the sequential loop.
    Internal building block: it is private only when λ̃ is Phase 1's release and `phase2` a fresh batch.
    """
    prompts, n = phase2.shape
    first = np.zeros(prompts, dtype=np.int64)
    accepted = np.zeros(prompts, dtype=bool)
    active = np.arange(prompts)
    start, width = 0, _FIRST_WIDTH
    while active.size and start < n:
        stop = min(n, start + width)
        still = []
        rows_per_block = max(1, _BLOCK_CANDIDATES // (stop - start))
        contiguous = active[-1] - active[0] + 1 == active.size   # slice instead of gathering rows
        for lo in range(0, active.size, rows_per_block):
            rows = active[lo:lo + rows_per_block]
            sel = slice(rows[0], rows[-1] + 1) if contiguous else rows
            shape = (rows.size, stop - start)
            margin = gen.standard_normal(shape)               # Z/σ_Z
            margin *= sigma_z
            margin += phase2[sel, start:stop]                  # r̃ = s′ + Z
            margin -= lambda_tilde[sel, None]                  # r̃ − λ̃
            thr = gen.random(shape)                            # U ~ Unif[0, 1)
            thr *= c[sel, None]                                # c·U
            acc = np.less(thr, margin, out=np.empty(shape, dtype=bool))
            f = np.argmax(acc, axis=1)
            hit = acc[np.arange(rows.size), f]
            first[rows[hit]] = start + f[hit]
            accepted[rows[hit]] = True
            still.append(rows[~hit])
        active = np.concatenate(still)
        start, width = stop, 2 * width
    return first, accepted


class PrivITP:
    """Private ITP with the public constants `params` (see the module docstring).

    `fallback`: "fresh_pi0" (default; index FRESH_PI0 = −1, the caller returns a fresh π0 sample),
    "last_candidate" or "uniform_candidate" (replication only). Every fallback is charged n·κ.
    `clip=False` makes out-of-range scores an error instead of clipping them.
    """

    def __init__(self, params: PrivITPParams, fallback: str = "fresh_pi0", clip: bool = True):
        if not isinstance(params, PrivITPParams):
            raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
        if fallback not in FALLBACKS:
            raise InvalidParameter("fallback", fallback, " or ".join(repr(f) for f in FALLBACKS))
        if not isinstance(clip, (bool, np.bool_)):
            raise InvalidParameter("clip", clip, "True or False")
        self.params, self.fallback, self.clip = params, fallback, bool(clip)

    def _scores(self, scores, name: str) -> np.ndarray:
        s = prepare_scores(scores, self.params.r_lo, self.params.r_max, clip=self.clip, name=name)
        if s.shape[1] != self.params.candidates:
            raise InvalidParameter(name, f"array of shape {s.shape}",
                                   f"[prompts, {self.params.candidates}] (n = params.candidates per phase)")
        return s

    def event(self, lambda_tilde: float, halting_time: int | None) -> PrivITPEvent:
        """The accounting event of one query that released λ̃ and halted at t (None: the fallback)."""
        return PrivITPEvent(self.params, lambda_tilde, halting_time)

    def account(self, lambda_tilde, halting_times) -> tuple[AccountingRecord, ...]:
        """One ex-post record `epsilon(PrivITPEvent(...))` per prompt (halting time 0 = fallback → None)."""
        lts = v.real_array("lambda_tilde", lambda_tilde).ravel()
        ts = [v.count("halting_times", t, minimum=0) for t in np.asarray(halting_times).ravel().tolist()]
        if len(ts) != lts.size:
            raise InvalidParameter("halting_times", f"{len(ts)} values", f"one per lambda_tilde ({lts.size})")
        return tuple(epsilon(self.event(lt, t if t != HALT_FALLBACK else None)) for lt, t in zip(lts.tolist(), ts))

    def select(self, phase1_scores, phase2_scores, rng=None, *, account: bool = True) -> RejectionResult:
        """One PrivITP query per prompt. Both score arrays are [prompts, n] (1-D = one prompt) and must come
        from independent candidate batches (different arrays; shared memory raises).

        `account=False` skips the per-prompt accounting (about 0.2–0.4 ms each; benchmarks only): the
        result then has `records=None` and `privacy_release=False` (compute the records with `account(...)`
        before releasing anything).
        """
        check_independent(phase1_scores, phase2_scores)
        s1 = self._scores(phase1_scores, "phase1_scores")
        s2 = self._scores(phase2_scores, "phase2_scores")
        check_independent(s1, s2)   # catches array-likes that resolve to the same buffer
        if s1.shape[0] != s2.shape[0]:
            raise InvalidParameter("phase2_scores", f"array of shape {s2.shape}",
                                   f"{s1.shape[0]} prompts (as many as phase1_scores)")
        rand = as_randomness(rng)
        gen, p = rand.generator, self.params
        # Phase 1: private normalisation.
        lam_tilde = lambda_hat_matrix(s1, p.beta)
        lam_tilde += gen.normal(0.0, p.sigma_x, size=lam_tilde.shape)
        c = threshold_widths(p, lam_tilde)
        # Phase 2: randomised-threshold rejection sampling on the fresh batch.
        first, accepted = run_phase2(s2, lam_tilde, c, p.sigma_z, gen)
        idx = fallback_indices(self.fallback, accepted, first, s2.shape[1], gen)
        halting = np.where(accepted, first + 1, HALT_FALLBACK).astype(np.int64)
        records = self.account(lam_tilde, halting) if account else None
        return RejectionResult(mechanism="privitp", indices=frozen_array(idx, np.int64),
                               halting_times=frozen_array(halting), accepted=frozen_array(accepted),
                               lambda_tilde=frozen_array(lam_tilde), threshold_width=frozen_array(c),
                               fallback=self.fallback, records=records, randomness_mode=rand.mode,
                               privacy_release=rand.privacy_release and records is not None)

