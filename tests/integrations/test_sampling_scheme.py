"""The sampling scheme a loop iterates (privcheck.integrations.sampling_scheme) and its figures beside the user's
Poisson claim (privcheck.checks.scheme_report), on real tiny Opacus runs (docs/integrations/opacus.md, "Loaders
that are not Poisson").

Expected figures come from outside the code under test: the Gaussian mechanism's exact ε from Balle and Wang's
δ(ε) evaluated in mpmath; the shuffle lower bound is bracketed by 0 and the un-amplified Gaussian's exact ε."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import mpmath
import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset

from privcheck.checks.dpsgd import check_accountant_agreement, check_poisson_sampling
from privcheck.errors import InvalidParameter
from privcheck.integrations.opacus import bindings_for
from privcheck.integrations.sampling_scheme import observe_scheme
from tests.doc_blocks import blocks, commands, match_lines

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
DOC = "docs/integrations/opacus.md"
N, B, SIGMA, STEPS, DELTA = 16, 4, 1.0, 8, 1e-5      # t = 4 steps per epoch, E = 2 epochs


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _dataset():
    gen = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(N, 8, dtype=torch.float64, generator=gen), torch.randint(0, 3, (N,),
                                                                                               generator=gen))


def _loader(kind: str, dataset=None):
    ds = _dataset() if dataset is None else dataset
    return {"shuffle": lambda: DataLoader(ds, batch_size=B, shuffle=True),
            "sequential": lambda: DataLoader(ds, batch_size=B),
            "replacement": lambda: DataLoader(ds, batch_size=B, sampler=RandomSampler(ds, replacement=True)),
            "poisson": lambda: DataLoader(ds, batch_size=B)}[kind]()


def _opacus_run(kind: str):
    """(engine, model, optimizer, the loader the loop iterates, train_step): make_private with
    poisson_sampling=False for every kind but "poisson" (Opacus then keeps the user's loader)."""
    from opacus import PrivacyEngine

    warnings.filterwarnings("ignore", module="opacus")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).double()
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = engine.make_private(
        module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.05), data_loader=_loader(kind),
        noise_multiplier=SIGMA, max_grad_norm=1.0, poisson_sampling=kind == "poisson")

    def train_step(batch):
        x, y = batch
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return engine, model, optimizer, loader, train_step


def _bindings(kind: str, **kw):
    engine, model, opt, loader, step = _opacus_run(kind)
    return bindings_for(engine, model, opt, loader, step, delta=DELTA, steps=kw.pop("steps", STEPS),
                        whole_step=False, **kw)


def gaussian_epsilon_exact(mu: float, delta: float) -> float:
    """ε of the Gaussian mechanism with μ = sensitivity/σ at δ: the root of Balle and Wang's (2018, Thm 8)
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), in mpmath at 50 digits."""
    with mpmath.workdps(50):
        m = mpmath.mpf(mu)

        def excess(eps):
            return mpmath.ncdf(-eps / m + m / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / m - m / 2) - delta

        return float(mpmath.findroot(excess, (mpmath.mpf(0), mpmath.mpf(60)), solver="bisect", tol=1e-40))


# ------------------------------------------------------------------------------------------------ observation

@pytest.mark.parametrize("kind, scheme", [("shuffle", "shuffle"), ("sequential", "sequential"),
                                          ("replacement", "fixed-size-replacement")])
def test_observe_scheme_of_fixed_size_loaders(kind, scheme):
    s = observe_scheme(_loader(kind), noise_multiplier=SIGMA, steps=STEPS)
    assert s.scheme == scheme, s.seen
    assert (s.dataset_size, s.batch_size, s.drop_last, s.steps_per_epoch, s.steps, s.epochs) == \
        (N, B, False, 4, STEPS, 2.0)
    assert "two epochs" in s.confirmed


def test_observe_scheme_reads_the_sampler_not_the_flags():
    from opacus.data_loader import DPDataLoader
    from opacus.utils.batch_memory_manager import BatchSplittingSampler

    dp = DPDataLoader.from_data_loader(_loader("sequential"))
    s = observe_scheme(dp, noise_multiplier=SIGMA, steps=STEPS)
    assert (s.scheme, s.sampling_rate, s.dataset_size) == ("poisson", 0.25, N)
    assert s.event()[0] is None                      # the Poisson figure is the user's claim, never the scheme's
    # a DataLoader built with shuffle=False but handed a shuffling batch sampler shuffles
    ds = _dataset()
    custom = DataLoader(ds, batch_sampler=BatchSampler(RandomSampler(ds), 5, drop_last=True))
    s = observe_scheme(custom, noise_multiplier=SIGMA, steps=6)
    assert (s.scheme, s.batch_size, s.drop_last, s.steps_per_epoch, s.epochs) == ("shuffle", 5, True, 3, 2.0)
    # BatchMemoryManager's splitting sampler: the logical sampler it splits is the scheme
    split = BatchSplittingSampler(sampler=BatchSampler(RandomSampler(ds), B, False), max_batch_size=2, optimizer=None)
    s = observe_scheme(DataLoader(ds, batch_sampler=split), noise_multiplier=SIGMA, steps=STEPS)
    assert (s.scheme, s.batch_size, s.steps_per_epoch) == ("shuffle", B, 4)


def test_unrecognised_samplers_are_unknown_and_say_what_was_seen():
    ds = _dataset()

    class MyRandom(RandomSampler):                   # a subclass may change what the accounting relies on
        pass

    s = observe_scheme(DataLoader(ds, batch_size=B, sampler=MyRandom(ds)), noise_multiplier=SIGMA, steps=STEPS)
    assert s.scheme == "unknown" and "MyRandom" in s.seen
    event, why, _ = s.event()
    assert event is None and "MyRandom" in why
    part = DataLoader(ds, batch_size=B, sampler=RandomSampler(ds, num_samples=8))
    s = observe_scheme(part, noise_multiplier=SIGMA, steps=STEPS)
    assert s.scheme == "unknown" and "num_samples=8" in s.seen


def test_behavioural_confirmation_can_fail(monkeypatch):
    """A RandomSampler that (say, patched) stops shuffling is not reported as shuffle: the rebuilt sampler's two
    epochs are compared with what the scheme must do."""
    monkeypatch.setattr(RandomSampler, "__iter__", lambda self: iter(range(len(self.data_source))))
    s = observe_scheme(_loader("shuffle"), noise_multiplier=SIGMA, steps=STEPS)
    assert s.scheme == "unknown" and "same order" in s.seen
    monkeypatch.setattr(SequentialSampler, "__iter__", lambda self: iter(reversed(range(len(self.data_source)))))
    s = observe_scheme(_loader("sequential"), noise_multiplier=SIGMA, steps=STEPS)
    assert s.scheme == "unknown" and "not the records in order" in s.seen


@pytest.mark.parametrize("kw, name", [({"noise_multiplier": 0.0, "steps": 3}, "noise_multiplier"),
                                      ({"noise_multiplier": 1.0, "steps": 0}, "steps")])
def test_observe_scheme_refuses_bad_input(kw, name):
    with pytest.raises(InvalidParameter, match=name):
        observe_scheme(_loader("shuffle"), **kw)
    with pytest.raises(InvalidParameter, match="data_loader"):
        observe_scheme([[0, 1]], noise_multiplier=1.0, steps=3)


def test_events_describe_the_run_or_only_a_part_of_it():
    """n = 16, b = 5 (batches 5, 5, 5, 1), T = 8: with replacement the last batch of an epoch has 1 draw, so the
    event is that of the 6 full-size steps (a lower bound only); shuffling with drop_last leaves a random record
    out each epoch, which the shuffle event does not describe: no figure."""
    ds = _dataset()
    rep = DataLoader(ds, batch_size=5, sampler=RandomSampler(ds, replacement=True))
    event, note, whole = observe_scheme(rep, noise_multiplier=SIGMA, steps=8).event()
    assert (event.steps, event.batch_size, event.replacement, whole) == (6, 5, True, False) and "6 full-size" in note
    rep_drop = DataLoader(ds, batch_size=5, sampler=RandomSampler(ds, replacement=True), drop_last=True)
    event, _, whole = observe_scheme(rep_drop, noise_multiplier=SIGMA, steps=8).event()
    assert (event.steps, whole) == (8, True)
    event, note, whole = observe_scheme(DataLoader(ds, batch_size=5, shuffle=True, drop_last=True),
                                        noise_multiplier=SIGMA, steps=6).event()
    assert event is None and "drop_last" in note and not whole
    event, _, whole = observe_scheme(DataLoader(ds, batch_size=5, shuffle=True), noise_multiplier=SIGMA,
                                     steps=8).event()
    assert (event.epochs, event.batch_size, whole) == (2, 5, True)


def test_a_part_of_the_run_reports_no_upper_bound():
    """scheme_report on a scheme whose event covers part of the run: the event's finite upper bound is not the
    run's; only its lower bound is reported (the sequential Gaussian stands in for any event with both ends)."""
    from privcheck.accounting import GaussianEvent
    from privcheck.checks.common import SuiteBindings
    from privcheck.checks.scheme_report import scheme_report

    class Part:
        scheme = "shuffle"

        def line(self):
            return "shuffle (a stand-in)"

        def to_json(self):
            return {"scheme": self.scheme}

        def event(self):
            return GaussianEvent(SIGMA), "a stand-in part", False

    block, line = scheme_report(SuiteBindings(sampling_scheme=Part(), delta=DELTA, user_epsilon=2.0, q=0.25))
    fig = block["figures"]
    exact = gaussian_epsilon_exact(1 / SIGMA, DELTA)
    assert fig["epsilon"] == math.inf and fig["whole_run"] is False and "part of the run" in fig["reason"]
    assert fig["epsilon_lower"] <= exact
    assert "no upper bound claimed" in line and f"ε ≥ {fig['epsilon_lower']:.6g}" in line


# ------------------------------------------------------------------------------------------- figures reported

def test_shuffled_opacus_loader_reports_the_shuffle_lower_bound():
    """make_private(poisson_sampling=False) over DataLoader(shuffle=True): poisson_sampling fails (its coins are
    not Bernoulli) and names the scheme, n, b, E and the shuffle event's certified lower bound with the reason no
    upper bound is claimed, beside the user's Poisson claim (kept as it is)."""
    from privcheck.accounting import ShuffledGaussianEvent, epsilon

    b = _bindings("shuffle")
    assert b.sampling_scheme.scheme == "shuffle"
    r = check_poisson_sampling(b)
    assert r.status == "fail"
    block = r.observed["sampling_scheme"]
    seen = block["observed"]
    assert (seen["scheme"], seen["dataset_size"], seen["batch_size"], seen["epochs"]) == ("shuffle", N, B, 2.0)
    fig = block["figures"]
    assert fig["event"] == ShuffledGaussianEvent(N, B, SIGMA, 2).to_json()
    assert fig["epsilon"] == math.inf and fig["reason"]            # no upper bound, and why
    record = epsilon(ShuffledGaussianEvent(N, B, SIGMA, 2), DELTA)
    assert fig["epsilon_lower"] == record.certified.lower
    # independent bracket: shuffling cannot be worse than the un-amplified Gaussian over E = 2 epochs
    assert 0 < fig["epsilon_lower"] <= gaussian_epsilon_exact(math.sqrt(2) / SIGMA, DELTA)
    assert block["user_epsilon"] == b.user_epsilon()               # the user's claim, unchanged
    assert "observed sampling scheme: shuffle (n = 16, b = 4, drop_last False, t = 4 steps/epoch, T = 8, E = 2)" \
        in r.message
    assert "no upper bound claimed" in r.message and f"{fig['epsilon_lower']:.6g}" in r.message
    assert "describes Poisson sampling, not this loader" in r.message
    agreement = check_accountant_agreement(b)
    assert agreement.observed["sampling_scheme"] == "shuffle" and "not Poisson sampling" in agreement.message
    assert r.to_json()["observed"]["sampling_scheme"]["figures"]["epsilon"] == "inf"    # kept in the artifact


def test_sequential_opacus_loader_reports_the_gaussian_figure():
    """DataLoader(shuffle=False): every record in one known step per epoch, no amplification: the certified
    Gaussian figure at μ = √E/σ, checked against Balle–Wang's exact ε in mpmath."""
    b = _bindings("sequential")
    r = check_poisson_sampling(b)
    assert r.status == "fail"
    fig = r.observed["sampling_scheme"]["figures"]
    exact = gaussian_epsilon_exact(math.sqrt(2) / SIGMA, DELTA)
    assert exact <= fig["epsilon"] <= exact * (1 + 1e-9)
    assert fig["epsilon_lower"] <= exact
    assert "keeps every other record's position" in fig["note"]
    # the docs' remark: for this run the sequential figure is above the engine's Poisson claim
    assert fig["epsilon"] > r.observed["sampling_scheme"]["user_epsilon"] == b.user_epsilon()
    assert f"ε ≤ {fig['epsilon']:.6g}" in r.message and "sequential (n = 16" in r.message
    assert "keeps every other record's position" in r.message         # the figure's assumption, where it is read


def test_a_partial_epoch_counts_whole_for_sequential_and_not_for_the_shuffle_lower_bound():
    """T = 9 with t = 4: a record in the first batch is in ⌈9/4⌉ = 3 steps (sequential's bound); the shuffle lower
    bound is that of the 2 whole epochs the run releases first."""
    b = _bindings("sequential", steps=9)
    fig = check_poisson_sampling(b).observed["sampling_scheme"]["figures"]
    exact = gaussian_epsilon_exact(math.sqrt(3) / SIGMA, DELTA)
    assert exact <= fig["epsilon"] <= exact * (1 + 1e-9)
    b = _bindings("shuffle", steps=9)
    block = check_poisson_sampling(b).observed["sampling_scheme"]
    assert block["observed"]["epochs"] == 2.25 and block["figures"]["event"]["epochs"] == 2
    assert "first 2 whole epoch(s)" in block["figures"]["note"]
    b = _bindings("shuffle", steps=3)                  # less than one epoch: no figure, and why
    block = check_poisson_sampling(b).observed["sampling_scheme"]
    assert block["figures"] is None and "less than one epoch" in block["why_no_figures"]


def test_replacement_loader_reports_fixed_size_figures():
    from privcheck.accounting import FixedSizeGaussianEvent, epsilon

    b = _bindings("replacement")
    r = check_poisson_sampling(b)
    assert r.status == "fail"
    block = r.observed["sampling_scheme"]
    assert block["observed"]["scheme"] == "fixed-size-replacement"
    fig = block["figures"]
    event = FixedSizeGaussianEvent(N, B, SIGMA, STEPS, replacement=True)
    assert fig["event"] == event.to_json()
    record = epsilon(event, DELTA)
    # privcheck certifies no upper bound with replacement (a record can be drawn several times in a batch): the
    # certified lower bound, under the event's own relation (replace-one), and the reason
    assert fig["epsilon"] == math.inf and fig["reason"] == record.reason and "replacement" in fig["reason"]
    assert fig["epsilon_lower"] == record.certified.lower and math.isfinite(fig["epsilon_lower"]) \
        and fig["epsilon_lower"] > 0
    assert fig["neighboring"] == "replace_one"
    assert "fixed-size-replacement (n = 16, b = 4" in r.message
    assert f"ε ≥ {fig['epsilon_lower']:.6g} at δ = 1e-05 (replace_one neighbours), no upper bound claimed" in r.message


def test_poisson_loader_reports_poisson_and_no_extra_figures():
    b = _bindings("poisson")
    r = check_poisson_sampling(b)
    assert r.status == "pass"
    block = r.observed["sampling_scheme"]
    assert block["observed"]["scheme"] == "poisson" and block["figures"] is None and block["user_epsilon"] is None
    assert r.message.endswith("observed sampling scheme: poisson (n = 16, q = 0.25, T = 8)")
    assert "sampling_scheme" not in check_accountant_agreement(b).observed


def test_a_custom_batch_sampler_is_reported_unknown_without_figures():
    """A loop over the user's own batch sampler (rebuilt for the checks by batch_sampler_factory): the scheme is
    "unknown", named with what was seen, and no figure is given for it."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    class Alternating:                               # the user's own: two fixed halves, in turn
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return 2

        def __iter__(self):
            yield list(range(self.n // 2))
            yield list(range(self.n // 2, self.n))

    engine, model, opt, _, step = _opacus_run("poisson")
    loader = DataLoader(_dataset(), batch_sampler=Alternating(N))
    b = bindings_for(engine, model, opt, loader, step, delta=DELTA, steps=STEPS, whole_step=False,
                     batch_sampler_factory=lambda n, q, g: UniformWithReplacementSampler(
                         num_samples=n, sample_rate=q, generator=g, steps=2 ** 40))
    r = check_poisson_sampling(b)
    block = r.observed["sampling_scheme"]
    assert block["observed"]["scheme"] == "unknown" and "Alternating" in block["observed"]["seen"]
    assert block["figures"] is None and "unrecognised sampler" in block["why_no_figures"]
    assert "observed sampling scheme: unknown (batch sampler Alternating)" in r.message and "no figures" in r.message


def test_a_history_with_several_noise_multipliers_gives_no_scheme_figures():
    engine, model, opt, loader, step = _opacus_run("sequential")
    engine.accountant.history = [(2.0, 0.25, 4), (SIGMA, 0.25, 4)]
    b = bindings_for(engine, model, opt, loader, step, delta=DELTA, whole_step=False)
    block = check_poisson_sampling(b).observed["sampling_scheme"]
    assert block["figures"] is None and "noise multipliers [1.0, 2.0]" in block["why_no_figures"]


# ----------------------------------------------------------------------------------------------- docs and CLI

def _docs_example() -> str:
    return next(b.text for b in blocks(DOC) if b.lang == "python" and "poisson_sampling=False" in b.text)


def test_docs_pytest_privcheck_shows_the_scheme(pytester):
    """The command line that runs the Opacus checks is `pytest --privcheck` (privcheck.checks.pytest_plugin): on a
    conftest.py holding the docs example's set-up, its failure shows the observed scheme line and the figures, as
    docs/integrations/opacus.md shows them (compared line by line with the docs' rule, tests/doc_blocks.py)."""
    setup = _docs_example().split("\nresult = ")[0]
    assert "bindings = bindings_for(" in setup
    pytester.syspathinsert(str(ROOT))
    pytester.makeconftest(setup + "\n\nimport pytest\n\n\n@pytest.fixture\ndef privcheck_bindings():\n"
                          "    return bindings\n")
    (command,) = [c for b in blocks(DOC) if b.lang == "console" for c in commands(b) if "--privcheck" in c.text]
    args = command.argv[1:]
    assert args[0] == "--privcheck"
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    printed = [re.sub(r"\s+$", "", line) for line in result.outlines]
    why = match_lines(list(command.shown), printed)
    assert why is None, why + "\n" + "\n".join(printed[-30:])
