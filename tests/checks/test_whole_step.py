"""The whole-step checks (privcheck/checks/whole_step.py, docs/whole_step.md).

Unit tests on a toy DP-SGD step (a linear model, example level, written here from the DP-SGD definition: Poisson
coins per record, per-example gradient of the squared loss, clip to C, sum, N(0, σ²C²) noise, division by the
public divisor, one SGD step): the correct step passes all five checks in both removal modes; each planted defect
fails the check that covers it, naming the field where it is a leak. Then the production `DPTrainer` on the
float64 fixture (mechanisms/dpgrpo/whole_step.py) passes all five, and `DPTrainer.add_update_hook` is tested.
Statistical checks run at their stated false-failure rate (< 1e-7 each); everything else is deterministic.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from privcheck.checks.training import SuiteBindings
from privcheck.checks.whole_step import (
    WHOLE_STEP_CHECKS,
    WHOLE_STEP_TOLERANCES,
    StepRun,
    WholeStepBindings,
    check_step_noise,
    check_step_poisson_sampling,
    check_step_public_outputs,
    check_step_record_isolation,
    check_step_sensitivity,
    public_leaves,
)
from privcheck.errors import InvalidParameter

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = ["step_sensitivity", "step_public_outputs", "step_noise", "step_record_isolation", "step_poisson_sampling"]
Q, C, SIGMA, DIVISOR = 0.5, 1.0, 1.0, 2.0      # divisor = q·n with the public n = 4


# ------------------------------------------------------------------------------------------ toy DP-SGD step

def _records():
    g = torch.Generator().manual_seed(3)
    xs = torch.randn(4, 3, generator=g, dtype=torch.float64) * torch.tensor([[1.0], [3.0], [0.5], [4.0]],
                                                                              dtype=torch.float64)
    ys = [1.0, -2.0, 0.5, 3.0]
    return [(xs[i], ys[i]) for i in range(4)]


class ToyRun:
    """One fresh run of a toy DP-SGD step on `dataset` (entries (x, y), or None for an absent slot)."""

    def __init__(self, dataset, seed, defect=None, report_norm=False, coupling="index"):
        self.dataset, self.seed, self.defect, self.report_norm = list(dataset), int(seed), defect, report_norm
        self.coupling = coupling
        self.model = torch.nn.Linear(3, 1, dtype=torch.float64)
        with torch.no_grad():
            self.model.weight.copy_(torch.tensor([[0.5, -0.3, 0.2]], dtype=torch.float64))
            self.model.bias.fill_(0.1)
        params = list(self.model.parameters())
        if defect == "unnoised_extra":
            self.model.extra = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
            params.append(self.model.extra)
        self.optimizer = torch.optim.SGD(params, lr=0.1)
        self.hooks, self.batch, self.records = [], [], {}

    def _coins(self):
        n = len(self.dataset)
        present = [i for i, r in enumerate(self.dataset) if r is not None]
        if self.defect == "shuffled_batches":      # fixed-size batches of a seeded permutation
            perm = random.Random(self.seed).sample(present, len(present))
            return sorted(perm[:round(Q * len(present))])
        if self.coupling == "record":              # a coin per record (its content), wherever it sits
            return [i for i in range(n) if self.dataset[i] is not None and random.Random(
                f"{self.seed}:{self.dataset[i][0].tolist()}:{self.dataset[i][1]}").random() < Q]
        return [i for i in range(n) if self.dataset[i] is not None and random.Random(f"{self.seed}:{i}").random() < Q]

    def step(self):
        self.batch = self._coins()
        w, b = self.model.weight.detach().reshape(-1), self.model.bias.detach()
        ys = [self.dataset[i][1] for i in self.batch]
        centre = sum(ys) / len(ys) if (self.defect == "batch_centred" and ys) else 0.0
        S = torch.zeros(4, dtype=torch.float64)
        raw_sum = torch.zeros(1, dtype=torch.float64)
        self.records = {}
        baseline = None
        for i in self.batch:
            x, y = self.dataset[i]
            r = float(w @ x + b) - (y - centre)
            if self.defect == "first_record_baseline":   # cross-record state: the batch's first residual as baseline
                if baseline is None:
                    baseline = r
                else:
                    r = r - baseline
            g = torch.cat([r * x, torch.tensor([r], dtype=torch.float64)])
            raw_sum += r
            norm = float(torch.linalg.vector_norm(g))
            clipped = g if (self.defect == "no_clip" or norm <= C) else g * (C / norm)
            self.records[i] = {"scores": [0.5 * r * r], "clipped": clipped.clone()}
            S = S + clipped
        if self.defect == "skip_empty" and not self.batch:
            return {"t": 1}
        z = torch.randn(4, generator=torch.Generator().manual_seed(10_000 + self.seed), dtype=torch.float64)
        z = z * (SIGMA * C)
        if self.defect == "bias_noise_free":
            z[3] = 0.0
        divisor = max(1, len(self.batch)) if self.defect == "realised_divisor" else DIVISOR
        g_hat = (S + z) / divisor
        for hook in self.hooks:
            out = hook(g_hat)
            g_hat = g_hat if out is None else out
        self.model.weight.grad = g_hat[:3].reshape(1, 3).clone()
        self.model.bias.grad = g_hat[3:].clone()
        if self.defect == "unnoised_extra":
            self.model.extra.grad = raw_sum.clone()
        self.optimizer.step()
        out = {"t": 1}
        if self.report_norm:
            out["update_norm"] = float(torch.linalg.vector_norm(g_hat))
        if self.defect == "batch_size_telemetry":
            out["batch_size"] = len(self.batch)
        return out


def toy_bindings(defect=None, *, removal="drop", hook=True, sampled=True, per_record=True, report_norm=False,
                 seeds=8, coupling="index"):
    def build(dataset, seed):
        run = ToyRun(dataset, seed, defect, report_norm, coupling)
        return StepRun(step=run.step, model=run.model, optimizer=run.optimizer,
                       private_parameters=["weight", "bias"],
                       install_update_hook=run.hooks.append if hook else None,
                       sampled=(lambda: list(run.batch)) if sampled else None,
                       per_record=(lambda: dict(run.records)) if per_record else None)

    R = _records()
    return SuiteBindings(whole_step=WholeStepBindings(
        build=build, records=R[:3], addition=R[3], clip_norm=C, divisor=DIVISOR, noise_multiplier=SIGMA,
        sampling_rate=Q, removal=removal, absent=None, seeds=seeds, coupling=coupling))


FAST = {"step_noise": {"seeds": 32}, "step_poisson_sampling": {"runs": 200}}


def run(name, b, **options):
    r = WHOLE_STEP_CHECKS[name](b, **{**FAST.get(name, {}), **options})
    assert r.name == name and r.suite == "dpgrpo"
    return r


# ------------------------------------------------------------------------------------------ contract

def test_catalogue_and_tolerances():
    assert list(WHOLE_STEP_CHECKS) == NAMES
    assert set(WHOLE_STEP_TOLERANCES) == {"float64", "float32", "bfloat16"}
    assert WHOLE_STEP_TOLERANCES["float64"]["public_ulps"] == 0
    for row in WHOLE_STEP_TOLERANCES.values():
        assert set(row) == {"record_rel", "public_ulps", "hat_multiple", "eps"}


@pytest.mark.parametrize("field,value", [("removal", "swap"), ("records", [1]), ("clip_norm", 0.0),
                                         ("divisor", math.inf), ("noise_multiplier", -1.0), ("sampling_rate", 0.0),
                                         ("sampling_rate", 1.5), ("seeds", 0), ("build", None)])
def test_bindings_validate(field, value):
    kwargs = dict(build=lambda d, s: None, records=[1, 2], addition=3, clip_norm=1.0, divisor=2.0,
                  noise_multiplier=1.0, sampling_rate=0.5)
    kwargs[field] = value
    with pytest.raises(InvalidParameter):
        WholeStepBindings(**kwargs)


def test_skipped_without_bindings():
    for name in NAMES:
        r = WHOLE_STEP_CHECKS[name](SuiteBindings())
        assert r.status == "skipped" and "whole_step" in r.message and r.precision == "float64"


def test_optional_bindings_skip():
    assert run("step_record_isolation", toy_bindings(per_record=False)).status == "skipped"
    assert run("step_poisson_sampling", toy_bindings(sampled=False)).status == "skipped"


def test_bad_input_raises_before_work():
    b = toy_bindings()
    with pytest.raises(InvalidParameter):
        check_step_sensitivity(b, "float16")
    with pytest.raises(InvalidParameter):
        check_step_sensitivity(b, cases=("add", "sideways"))
    with pytest.raises(InvalidParameter):
        check_step_public_outputs(b, max_seeds=0)
    with pytest.raises(InvalidParameter):
        check_step_noise(b, seeds=1)
    with pytest.raises(InvalidParameter):
        check_step_poisson_sampling(b, runs=True)
    with pytest.raises(InvalidParameter):
        check_step_record_isolation(SuiteBindings(whole_step=object()))


def test_precision_from_bindings():
    b = toy_bindings()
    b.precision = "float32"
    assert check_step_noise(b, seeds=32).precision == "float32"
    assert check_step_noise(b, "bfloat16", seeds=32).precision == "bfloat16"


def test_raising_build_is_an_error():
    def build(dataset, seed):
        raise RuntimeError("boom")

    b = SuiteBindings(whole_step=WholeStepBindings(build=build, records=[1, 2], addition=3, clip_norm=1.0,
                                                   divisor=1.0, noise_multiplier=1.0, sampling_rate=0.5))
    for name in NAMES:
        r = WHOLE_STEP_CHECKS[name](b)
        assert r.status == "error" and "boom" in r.message


def test_public_leaves_names():
    leaves = public_leaves("telemetry", {"a": 1, "b": {"c": [2.0, torch.ones(2)]}, "d": None, "e": ()})
    assert set(leaves) == {"telemetry.a", "telemetry.b.c[0]", "telemetry.b.c[1]", "telemetry.d", "telemetry.e"}
    assert torch.equal(leaves["telemetry.b.c[1]"], torch.ones(2))


# ------------------------------------------------------------------------------------------ the toy step

@pytest.mark.parametrize("removal", ["drop", "absent"])
def test_correct_toy_step_passes(removal):
    b = toy_bindings(removal=removal)
    for name in NAMES:
        r = run(name, b)
        assert r.status == "pass", (name, r.message)
    r = run("step_sensitivity", b)
    assert r.observed["empty_batch_case"] and r.observed["full_batch_case"]
    assert 0 in r.observed["batch_sizes_small"] and max(r.observed["batch_sizes_big"]) >= 2
    assert r.observed["coupling_violations"] == []
    assert 0.5 < r.observed["worst_ratio"] <= 1 + 1e-12   # the big records are clipped: the bound is reached
    assert run("step_public_outputs", b).observed["g_hat_fixed_through"] == ["update hook"]


def test_correct_toy_step_without_optional_bindings():
    """Without `sampled`, coverage is by design (enough trials for a miss probability < 1e-6); without the update
    hook, ĝ is fixed through the optimizer pre-hook."""
    b = toy_bindings(hook=False, sampled=False)
    r = run("step_sensitivity", b)
    assert r.status == "pass", r.message
    assert r.observed["coverage_observed"] is False and r.observed["full_batch_case"] is True
    assert r.observed["pairs"]["small"]["trials"] == math.ceil(math.log(1e-6) / math.log(1 - Q ** 2))
    r = run("step_public_outputs", b)
    assert r.status == "pass" and r.observed["g_hat_fixed_through"] == ["optimizer pre-hook"]


def test_update_norm_needs_the_update_hook():
    """Telemetry computed from ĝ before the optimizer is fixed only when ĝ is fixed where it is formed."""
    assert run("step_public_outputs", toy_bindings(report_norm=True)).status == "pass"
    r = run("step_public_outputs", toy_bindings(report_norm=True, hook=False))
    assert r.status == "fail" and r.observed["leak_fields"] == ["telemetry.update_norm"]


DEFECTS = [
    ("realised_divisor", "step_sensitivity", None),
    ("realised_divisor", "step_noise", None),
    ("no_clip", "step_sensitivity", None),
    ("skip_empty", "step_sensitivity", None),
    ("skip_empty", "step_noise", None),
    ("skip_empty", "step_public_outputs", "update.optimizer_steps"),
    ("bias_noise_free", "step_noise", None),
    ("batch_size_telemetry", "step_public_outputs", "telemetry.batch_size"),
    ("unnoised_extra", "step_public_outputs", "parameters.extra"),
    ("batch_centred", "step_record_isolation", None),
    ("shuffled_batches", "step_poisson_sampling", None),
    ("shuffled_batches", "step_sensitivity", None),
]


@pytest.mark.parametrize("defect,name,field", DEFECTS, ids=[f"{d}-{n}" for d, n, _ in DEFECTS])
def test_toy_defect_fails(defect, name, field):
    r = run(name, toy_bindings(defect))
    assert r.status == "fail", r.message
    if field is not None:
        assert field in r.observed["leak_fields"], r.observed["leak_fields"]
        assert field in r.message


def test_shuffled_batches_break_the_coupling():
    r = run("step_sensitivity", toy_bindings("shuffled_batches"))
    assert r.observed["coupling_violations"]


def test_inconclusive_is_a_failure():
    """At a tiny q the differing record is never sampled within max_seeds: inconclusive, never a pass."""
    b = toy_bindings()
    b.whole_step.sampling_rate = 1e-3
    r = check_step_sensitivity(b, seeds=2, max_seeds=3)
    assert r.status == "fail" and "inconclusive" in r.message


# ------------------------------------------------------------------------------------------ positions

@pytest.mark.parametrize("removal,coupling,covered", [("drop", "index", {"last"}), ("drop", "record", None),
                                                      ("absent", "index", None)])
def test_positions_covered_per_coupling(removal, coupling, covered):
    """The addition goes first, in the middle and last where the coupling keeps the shared records' coins (drop
    with index coupling: last only, the rest reported as not covered); the correct step passes everywhere."""
    b = toy_bindings(removal=removal, coupling=coupling)
    for name in ("step_sensitivity", "step_public_outputs"):
        r = run(name, b)
        assert r.status == "pass", (name, r.message)
        nb = r.observed["neighbours"]
        adds = {k for k in r.observed["pairs"] if k.startswith("add@")}
        assert adds == {f"add@{p}" for p in (covered or ("first", "middle", "last"))}
        assert set(nb["positions_not_covered"]) == ({"first", "middle"} if covered else set())
    assert r.observed["neighbours"]["coupling"] == coupling
    sens = run("step_sensitivity", b).observed
    assert sens["coupling_violations"] == [] and sens["clip_regimes"]["unknown"] == 0


def test_cross_record_state_caught_only_before_batch_mates():
    """A residual baseline taken from the batch's first record changes the later records' contributions: seen
    with the addition first or in the middle, not with it last (its own contribution stays clipped); record
    isolation in "drop" mode puts the record first and misses it as well."""
    for removal, coupling in (("absent", "index"), ("drop", "record")):
        b = toy_bindings("first_record_baseline", removal=removal, coupling=coupling)
        r = run("step_sensitivity", b)
        assert r.status == "fail", r.message
        bad = {line.split(" seed ")[0] for line in r.observed["failures"] if "‖Δĝ‖" in line}
        assert bad and all(p.startswith("add@first") or p.startswith("add@middle") or p.startswith("remove[0]")
                           for p in bad), bad
        assert run("step_sensitivity", b, positions=("last",), cases=("add", "empty", "small")).status == "pass"
    b = toy_bindings("first_record_baseline", removal="drop", coupling="record")
    assert run("step_record_isolation", b).status == "pass"


def test_search_is_reproducible_and_reports_coverage():
    b = toy_bindings(removal="absent")
    r1 = check_step_sensitivity(b, cases=("empty",), seeds=2, neighbours="search", examples=12, search_seed=3)
    r2 = check_step_sensitivity(b, cases=("empty",), seeds=2, neighbours="search", examples=12, search_seed=3)
    assert r1.status == "pass", r1.message
    assert r1.observed["pairs"] == r2.observed["pairs"] and r1.inputs["search_seed"] == 3
    search = r1.observed["neighbours"]["search"]
    assert search["pairs"] == 12 and search["trials"] == 24 and search["differing_sampled"] > 0
    assert sum(search["positions"].values()) == 12
    with pytest.raises(InvalidParameter):
        check_step_sensitivity(b, neighbours="fuzz")
    with pytest.raises(InvalidParameter):
        check_step_sensitivity(b, neighbours="search", examples=0)
    with pytest.raises(InvalidParameter):
        check_step_public_outputs(b, positions=("front",))


# ------------------------------------------------------------------------------------------ DPTrainer

@pytest.fixture(scope="module")
def fixture():
    from mechanisms.dpgrpo.whole_step import whole_step_fixture
    return whole_step_fixture(0)


# Fast tier: 3 seeds per pair (more where coverage needs them) and 32 Poisson runs; the slow tier runs the
# defaults (6 seeds per pair, 100 runs). The false-failure rate is the stated one (< 1e-7) at any run count.
PRODUCTION_FAST = {"step_sensitivity": {"seeds": 3}, "step_public_outputs": {"seeds": 3},
                   "step_poisson_sampling": {"runs": 32}}


@pytest.mark.parametrize("tier", ["fast", pytest.param("default", marks=pytest.mark.slow)])
def test_production_dptrainer_passes_every_whole_step_check(fixture, tier):
    from mechanisms.dpgrpo.whole_step import whole_step_bindings

    b = SuiteBindings(whole_step=whole_step_bindings(fixture), precision="float64")
    options = PRODUCTION_FAST if tier == "fast" else {}
    results = {name: WHOLE_STEP_CHECKS[name](b, **options.get(name, {})) for name in NAMES}
    for name, r in results.items():
        assert r.status == "pass", (name, r.message)
    sens = results["step_sensitivity"].observed
    assert sens["empty_batch_case"] and sens["full_batch_case"] and sens["coverage_observed"]
    assert abs(sens["worst_ratio"] - 1) < 1e-9            # C = 0.2 clips every record: the bound is tight
    # both clip regimes ran: C = 0.2 below every record's gradient norm (0.33-0.71 measured), C = 10 above all
    low, high = sens["regimes"]["C=0.2"], sens["regimes"]["C=10"]
    lo, hi = low["clip_regimes"], high["clip_regimes"]
    assert lo["clipped"] > 0 and lo["unclipped"] == lo["mixed"] == 0
    assert hi["unclipped"] > 0 and hi["clipped"] == hi["mixed"] == 0
    assert 0.3 / 10 < high["worst_ratio"] < 0.72 / 10      # ‖ḡ_x‖ = ‖g_x‖: the ratio is the record's norm over C
    assert {"add@first", "add@middle", "add@last"} <= set(low["pairs"])
    assert not low["neighbours"]["positions_not_covered"]
    assert results["step_public_outputs"].observed["g_hat_fixed_through"] == ["update hook"]
    assert results["step_record_isolation"].observed["bit_identical"]


def test_add_update_hook(fixture):
    from mechanisms.dpgrpo.whole_step import whole_step_bindings

    ws = whole_step_bindings(fixture)
    full = list(ws.records) + [ws.addition]
    plain = ws.build(full, 5).step()
    run = ws.build(full, 5)
    seen = []
    run.install_update_hook(lambda g: seen.append(g.clone()))        # None: ĝ unchanged
    assert run.step() == plain and len(seen) == 1
    assert math.isclose(float(torch.linalg.vector_norm(seen[0].double())), plain["update_norm"], rel_tol=0,
                        abs_tol=0)
    run = ws.build(full, 5)
    entry = run.install_update_hook(lambda g: torch.zeros_like(g)) and None
    entry = run.step()
    assert entry["update_norm"] == 0.0 and entry["param_delta_norm"] == 0.0   # AdamW moves nothing on ĝ = 0
    run = ws.build(full, 5)
    remove = run.install_update_hook(lambda g: torch.zeros_like(g))
    remove()
    assert run.step() == plain
    run = ws.build(full, 5)
    run.install_update_hook(lambda g: torch.zeros(3, dtype=g.dtype))
    with pytest.raises(InvalidParameter):
        run.step()
    with pytest.raises(InvalidParameter):
        run.install_update_hook(42)


@pytest.mark.slow
def test_production_dptrainer_passes_the_search(fixture):
    """The neighbour search (pool sweep + hypothesis draws at a fixed seed) over both clip regimes: every position,
    every pool kind, batch sizes 0 to 3; the production trainer stays within the bound."""
    from mechanisms.dpgrpo.whole_step import whole_step_bindings

    b = SuiteBindings(whole_step=whole_step_bindings(fixture), precision="float64")
    results = {name: WHOLE_STEP_CHECKS[name](b, seeds=3, neighbours="search", examples=40)
               for name in ("step_sensitivity", "step_public_outputs")}
    for name, r in results.items():
        assert r.status == "pass", (name, r.message)
        search = r.observed["neighbours"]["search"]
        assert set(search["positions"]) >= {"first", "middle", "last"}
        assert set(search["kinds"]) >= set(search["pool_kinds"])
    sens = results["step_sensitivity"].observed
    assert set(sens["batch_sizes_big"]) == {0, 1, 2, 3} and 0 in sens["batch_sizes_small"]
    assert sens["regimes"]["C=10"]["clip_regimes"]["unclipped"] > 0 and sens["clip_regimes"]["mixed"] > 0
