"""An interrupted DP-GRPO canary audit leaves no private log behind and never blocks a rerun
(audits/dpgrpo/gradient_canary.py, `private_files`; docs/artifacts.md, "Output directories")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from audits.dpgrpo import gradient_canary as dc
from privcheck.artifacts.outdir import leftover_prefix


def test_an_audit_interrupted_mid_training_leaves_nothing_and_can_rerun(tmp_path, monkeypatch, lightly_pretrained):
    from mechanisms.dpgrpo.audit_hooks import AuditHooks

    real_log_round = AuditHooks.log_round
    logs = []

    def interrupted(self, *args, **kwargs):                     # Ctrl-C (or SIGTERM) right after the first round
        real_log_round(self, *args, **kwargs)
        logs.append(self.log_path)
        raise KeyboardInterrupt

    monkeypatch.setattr(AuditHooks, "log_round", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        # the configuration of test_dpgrpo_canary.py's refusals: the plan's calibration is cached across them
        dc.run_gradient_canary_audit(preset=lightly_pretrained(), canaries=300, out_dir=out, seed=11, rounds=10,
                                     q=0.5, n_real=4, plan_sims=2)
    assert len(logs) == 1 and str(out) in logs[0]                # the log was written under out, while training
    assert not out.exists()                                      # and removed with the directory the audit made
    assert dc.check_fresh_out(out) == out                        # a rerun is accepted


def test_a_killed_audits_log_is_removed_by_the_next_audit(tmp_path):
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    dead = int(child.stdout)                                      # the pid of a process that has exited
    out = tmp_path / "out"
    leftover = out / (leftover_prefix("staging").replace(f".{__import__('os').getpid()}.", f".{dead}.") + "k1ll3d")
    (leftover / "private").mkdir(parents=True)
    (leftover / "private" / dc.LOG_NAME).write_text('{"kind": "round"}\n')
    assert dc.check_fresh_out(out) == out                        # no log at out/private: not a finished audit
    with dc.private_files(out) as (staging, private):
        assert not leftover.exists()                             # removed once the next audit holds the lock
        (private / dc.LOG_NAME).write_text("")
        staging.write_bytes("audit.json", b"{}")
    assert sorted(p.name for p in out.iterdir()) == ["audit.json", "private"]
    with pytest.raises(Exception, match="previous auditor log"):
        dc.check_fresh_out(out)                                  # a finished audit's log: one audit per directory


def test_without_an_output_directory_the_temporary_private_files_go_on_failure():
    with pytest.raises(RuntimeError):
        with dc.private_files(None) as (staging, private):
            assert staging is None and private.is_dir()
            (private / dc.LOG_NAME).write_text("")
            raise RuntimeError("audit failed")
    assert not private.exists()
