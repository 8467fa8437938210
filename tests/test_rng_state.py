"""privcheck.rng_state.preserved_rng: global and user generators come back as they were, also after an exception."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from privcheck.errors import InvalidParameter
from privcheck.rng_state import preserved_rng


def _draws(gens):
    return (random.random(), float(np.random.rand()), float(torch.rand(())),
            *(float(torch.rand((), generator=gens[0])), float(gens[1].random()), float(gens[2].rand()),
              gens[3].random()))


def _gens(seed):
    return (torch.Generator().manual_seed(seed), np.random.default_rng(seed), np.random.RandomState(seed),
            random.Random(seed))


def test_every_state_is_restored_even_when_the_body_raises():
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    gens = _gens(2)
    expected = _draws(_gens(2))            # the same seeds drawn without the context: the reference draws
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with pytest.raises(RuntimeError):
        with preserved_rng(gens + (gens[0],)):   # one object listed twice is restored once
            inside = _draws(gens)
            raise RuntimeError("check failed")
    assert inside == expected                 # draws advance normally inside
    assert _draws(gens) == expected           # and are replayed after: every state was restored


def test_unknown_generator_is_refused():
    with pytest.raises(InvalidParameter, match="generators"):
        with preserved_rng([object()]):
            pass
