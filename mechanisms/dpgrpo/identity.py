"""The `RunIdentity` (privcheck/artifacts/identity.py) of DP-GRPO trainers: what the run artifact records as trained
and what the checks' bindings record as verified (docs/artifacts.md, "Run identity").

* `model_json(model)` — the base model's architecture configuration (`config.to_dict()` without the keys that
  name a file or a library version: `_name_or_path`, `_commit_hash`, `transformers_version`, every `_`-key);
* `peft_json(model)` — the PEFT adapters' configurations (`peft_config[name].to_dict()`), None without PEFT;
* `dptrainer_identity(trainer)` — a `DPTrainer` (or subclass): its class, plan, `{"dp": config.to_json()}`,
  model and PEFT configuration. `DPGRPOTrainer.privcheck_identity()` (mechanisms/dpgrpo/trl.py) adds the TRL
  arguments that affect the update;
* `REFERENCE_FIXTURE_CHECK_MODE` — what `privcheck run dp-grpo` declares as the check mode of its suite: the suite
  verifies the trainer class on the float64 reference fixture, so the plan, configuration, model and LoRA differ
  from the run's by design, and are listed field by field in the artifact.
"""

from __future__ import annotations

from privcheck.artifacts.identity import RunIdentity, Subject

__all__ = ["REFERENCE_FIXTURE_CHECK_MODE", "dptrainer_identity", "dptrainer_subject", "model_json", "peft_json",
           "qualified_name"]

REFERENCE_FIXTURE_CHECK_MODE = ("plan", "config", "model", "peft")


def qualified_name(obj) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _unwrap(model):
    """The base model under PEFT wrappers (its `config` is the architecture)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def model_json(model) -> dict | None:
    config = getattr(_unwrap(model), "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return None
    return {k: v for k, v in config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}


def peft_json(model) -> dict | None:
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    out = {}
    for name, cfg in configs.items():
        d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
        # the adapters' base model is the `model` part; its path names a file, not the architecture
        out[str(name)] = {k: v for k, v in d.items() if k not in ("base_model_name_or_path", "revision")}
    return out


def dptrainer_identity(trainer) -> RunIdentity:
    """The identity of a `DPTrainer` (module docstring)."""
    plan = trainer.plan
    return RunIdentity(trainer=qualified_name(trainer), plan=None if plan is None else plan.to_json(),
                       config={"dp": trainer.config.to_json()}, model=model_json(trainer.model),
                       peft=peft_json(trainer.model))


def dptrainer_subject(trainer) -> Subject:
    """What bindings of `trainer` verify: its identity; the checks vary C, σ, q, n on replicas of it, which is
    how the checks work, not a different run."""
    return Subject.of(trainer, dptrainer_identity(trainer))
