"""Private selection for inference-time alignment: BoN, PrivBoN, ITP, PrivITP, and their exact laws.

Guarantees (proofs in docs/selection.md):

* `PrivBoN` (Gumbel-max = softmax = exponential mechanism): ε-DP per prompt with the certified
  bounded-range ε_BoN(n) ≤ 2Δ/σ (or the nominal 2Δ/σ); a batch of P prompts costs P·ε (basic composition).
* `PrivITP`: per prompt, ex-post (ε1 + ε2(t; λ̃), δ)-DP: ε1 from the analytic Gaussian release of
  λ̃ = λ̂ + N(0, σ_X²), ε2 = (t − 1)κ(λ̃) + κ_acc(λ̃) for acceptance at round t and n·κ(λ̃) for the fallback.
* `best_of_n` and `ITP` are non-private baselines: no record, `privacy_release=False`.

Every ε is `privcheck.accounting.epsilon` of the query's event (`PrivBoNEvent`, `PrivITPEvent`; never
computed here) and is returned with the output.

Assumptions: scores are clipped to a public range [r_lo, r_max]; the sensitivity Δ (≤ r_max − r_lo) is a
public, user-declared property of the reward model (not verified); all constants are fixed before any
score is seen; candidates come from a public base policy π0, and PrivITP's two phases use independent
candidate batches; noise is idealised real-valued (docs/selection.md, "Gaps"). Only results drawn with
OS-entropy randomness (`make_rng()` without a seed) have `privacy_release=True`.

Conventions: scores are arrays [prompts, n] (1-D = one prompt); `indices` are 0-based positions in the
(Phase-2) candidate list, with `FRESH_PI0 = -1` meaning "fallback: the caller returns a fresh π0 sample";
`halting_times` are 1-based with `HALT_FALLBACK = 0` for t = ⊥.

    PrivBoN(Δ, σ, r_max).select(scores, rng)      i* = argmax(clip(s) + Gumbel(0, σ))
    PrivITP(params).select(s_phase1, s_phase2, rng)
        λ̃ = λ̂(clip(s_phase1)) + N(0, σ_X²);  c = params.threshold_width(λ̃)
        halt at the first i with clip(s′_i) + N(0, σ_Z²) > λ̃ + c·U_i;  else fallback
"""

import importlib

# The public names and the modules that define them, imported on first use (PEP 562): `import mechanisms.selection`
# (as the `privcheck` command line does to register its commands) imports neither the accountant nor numpy.
_EXPORTS = {
    "bon": ("best_of_n",),
    "itp": ("FALLBACKS", "ITP", "M_RULES", "itp_weights", "lambda_hat", "lambda_hat_matrix"),
    "laws": ("OutputLaw", "acceptance_rejection", "itp_law", "privbon_law", "privbon_policy_finite_n",
             "privbon_policy_limit", "privitp_law", "privitp_law_given_lambda"),
    "privbon": ("PrivBoN",),
    "privitp": ("PrivITP", "threshold_widths"),
    "randomness": ("NumpyRandomness", "as_randomness", "make_rng"),
    "results": ("FRESH_PI0", "HALT_FALLBACK", "RejectionResult", "SelectionResult"),
    "scores": ("prepare_scores",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"mechanisms.selection.{module}"), name)
    elif not name.startswith("__"):     # a submodule as an attribute (`mechanisms.selection.laws`), as before
        try:
            value = importlib.import_module(f"mechanisms.selection.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"mechanisms.selection.{name}":
                raise
            raise AttributeError(f"module 'mechanisms.selection' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'mechanisms.selection' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = [
    "FALLBACKS", "FRESH_PI0", "HALT_FALLBACK", "ITP", "M_RULES", "NumpyRandomness", "OutputLaw", "PrivBoN",
    "PrivITP", "RejectionResult", "SelectionResult", "acceptance_rejection", "as_randomness", "best_of_n",
    "itp_law", "itp_weights", "lambda_hat", "lambda_hat_matrix", "make_rng", "prepare_scores", "privbon_law",
    "privbon_policy_finite_n", "privbon_policy_limit", "privitp_law", "privitp_law_given_lambda",
    "threshold_widths",
]
