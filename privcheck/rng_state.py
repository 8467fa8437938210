"""`preserved_rng`: run a check (or a binding's set-up) without changing any random stream the user's run reads.

A check drives the user's own code, and that code draws from the process-wide generators (Opacus's noise and
Poisson coins with `generator=None`, data augmentation, dropout masks) and from the user's own generator objects.
Draws made for a check would shift every later draw of the run, so a seeded run trained after the checks would
differ from the same run without them. `preserved_rng` saves, and restores on exit (also when the body raises):

- Python's `random` module state;
- numpy's legacy global state (`np.random.get_state`), when numpy is imported;
- torch's CPU generator and, when CUDA is available, every CUDA device's generator, when torch is imported;
- the state of each generator passed in `generators` (`torch.Generator`, `numpy.random.Generator`,
  `numpy.random.RandomState` or `random.Random`): the user's own generators that the checks draw from.

A module imported only inside the body cannot have been read by the user's run before it; it is not restored.
Inside the body draws advance as usual, so successive draws of one check stay fresh.
"""

from __future__ import annotations

import random
import sys
from contextlib import contextmanager
from typing import Iterator, Sequence

from privcheck.errors import InvalidParameter

__all__ = ["preserved_rng"]


def _state_of(g):
    """(getter result, setter) of one user generator; InvalidParameter for anything else."""
    if isinstance(g, random.Random):
        return g.getstate(), g.setstate
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(g, torch.Generator):
        return g.get_state(), g.set_state
    np = sys.modules.get("numpy")
    if np is not None and isinstance(g, np.random.Generator):
        state = g.bit_generator.state

        def put(s, bg=g.bit_generator):
            bg.state = s
        return state, put
    if np is not None and isinstance(g, np.random.RandomState):
        return g.get_state(), g.set_state
    raise InvalidParameter("generators", type(g).__name__, "torch.Generator, numpy.random.Generator, "
                                                           "numpy.random.RandomState or random.Random objects")


@contextmanager
def preserved_rng(generators: Sequence = ()) -> Iterator[None]:
    """Restore every global random state and the state of each of `generators` on exit (module docstring)."""
    saved = [(random.getstate(), random.setstate)]
    np = sys.modules.get("numpy")
    if np is not None:
        saved.append((np.random.get_state(), np.random.set_state))
    torch = sys.modules.get("torch")
    if torch is not None:
        saved.append((torch.get_rng_state(), torch.set_rng_state))
        if torch.cuda.is_available():
            saved.append((torch.cuda.get_rng_state_all(), torch.cuda.set_rng_state_all))
    seen = set()
    for g in generators:
        if g is not None and id(g) not in seen:     # one object listed twice is restored once
            seen.add(id(g))
            saved.append(_state_of(g))
    try:
        yield
    finally:
        for state, put in reversed(saved):
            put(state)
