"""audits.gradient_log: the one-run audit of a DP-SGD model from a Dirac gradient-canary log (Opacus hook)."""

from __future__ import annotations

import json

import pytest

from audits import gradient_log
from privcheck.errors import InvalidParameter, PrivcheckError


def test_prepare_validates_before_any_work():
    base = dict(dim=100, canaries=8, sampling_rate=0.5, noise_multiplier=1.0, steps=3, clip_norm=1.0, delta=1e-5)
    for key, bad in (("dim", 0), ("canaries", 0), ("canaries", 101), ("sampling_rate", 1.5),
                     ("noise_multiplier", 0.0), ("steps", 0), ("clip_norm", float("inf")), ("delta", 0.0)):
        with pytest.raises(InvalidParameter):
            gradient_log.prepare(**{**base, key: bad})


def _log(path, rounds):
    path.write_text("".join(json.dumps(r) + "\n" for r in rounds))


def test_analyse_refuses_a_log_that_does_not_match_the_design(tmp_path):
    audit = gradient_log.prepare(dim=40, canaries=8, sampling_rate=0.5, noise_multiplier=1.0, steps=2,
                                 clip_norm=1.0, delta=1e-5, plan_sims=5, seed=1)
    J = list(audit.design.reserved)
    assert J == list(range(32, 40))                        # the public "last" rule, not the membership
    good = [{"kind": "round", "t": t, "reserved": J, "U": [0.0] * 8, "sigma_C": 1.0, "divisor": 4.0}
            for t in (1, 2)]
    for broken in ([good[0]],                                                   # a round missing
                   [good[0], {**good[1], "sigma_C": 0.5}],                     # noise std not the claim's
                   [good[0], {**good[1], "reserved": J[::-1]}]):               # other coordinates
        _log(tmp_path / "log.jsonl", broken)
        with pytest.raises(PrivcheckError):
            gradient_log.analyse(tmp_path / "log.jsonl", audit)
    _log(tmp_path / "ok.jsonl", good)
    report = gradient_log.analyse(tmp_path / "ok.jsonl", audit)
    assert report.method == "steinke_one_run" and report.canaries["m"] == 8


def test_a_run_without_noise_is_rejected(tmp_path):
    """An Opacus run whose optimizer skips the noise (σ = 8 claimed, nothing added): every present canary's score
    separates, and the one-run bound rejects the claimed ε = PLD(q = 0.5, σ = 8, T = 30) ≈ 1.34. Seeded
    (membership, canary coins, model): deterministic, no false failure."""
    import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
    import torch

    from privcheck.integrations.opacus import GradientCanaries, private_dimension
    from tests.integrations.opacus_fixture import tiny_run

    torch.set_num_threads(1)
    T, m = 30, 200
    engine, model, opt, loader, step = tiny_run(sigma=8.0)
    audit = gradient_log.prepare(dim=private_dimension(opt), canaries=m, sampling_rate=loader.sample_rate,
                                 noise_multiplier=opt.noise_multiplier, steps=T, clip_norm=opt.max_grad_norm,
                                 delta=1e-5, seed=3, plan_sims=50)

    def no_noise():                      # the planted bug: the clipped sum is released as it is
        for p in opt.params:
            p.grad = p.summed_grad.view_as(p).clone()

    opt.add_noise = no_noise
    log = tmp_path / "auditor_log.jsonl"
    with GradientCanaries(opt, coordinates=audit.design.reserved, presence=audit.presence(), log_path=log,
                          records=len(loader.dataset), seed=5):
        for _ in range(T // len(loader)):
            for batch in loader:
                step(batch)
    report = gradient_log.analyse(log, audit)
    assert report.result["rejects_nominal"] is True
    assert report.result["eps_lower"] > report.claim["epsilon"]
