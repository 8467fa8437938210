"""`privcheck run dp-grpo` under a launcher (`torchrun`, `accelerate launch`): the launcher's environment, what a
distributed run refuses, and the process group (docs/scaling.md, "DP-GRPO on several processes").

`detect_launch(environ)` reads the variables the launcher sets for every rank (WORLD_SIZE, RANK, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT) and returns a `Launch`, or None when none of WORLD_SIZE, RANK and LOCAL_RANK is set:
a plain process, which runs exactly as before. The launcher is named from its own variables: `accelerate launch`
sets ACCELERATE_MIXED_PRECISION, torchrun TORCHELASTIC_RUN_ID; anything else is "environment".

`check_launch(launch, device, settings)` refuses, with `InvalidParameter` and before any work, what the distributed
run cannot honour: LoRA dropout ≠ 0 (per-record masks follow one rollout stream in batch order, which a sharded
pass cannot reproduce), a CUDA local rank without its GPU, NCCL missing, and accelerate settings that privcheck
would silently ignore (mixed precision, dynamo, DeepSpeed, FSDP: the preset fixes the dtype policy and the step
is `DistributedDPTrainer.step`). Every rank checks the same inputs, so every rank refuses.

`process_group(launch, device)` initialises the default group from the environment (`env://`; gloo on CPU, NCCL
on CUDA after `torch.cuda.set_device(LOCAL_RANK)`) and destroys it on exit. A group the caller initialised is
used as it is (its rank and world size must match the environment's) and left alone.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from privcheck.errors import InvalidParameter

__all__ = ["ENV_VARS", "Launch", "backend_for", "check_launch", "detect_launch", "process_group"]

ENV_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# accelerate settings that would change the numbers if honoured; privcheck never honours them, so it refuses them
_ACCELERATE_OFF = {"ACCELERATE_MIXED_PRECISION": ("no",), "ACCELERATE_DYNAMO_BACKEND": ("no",),
                   "ACCELERATE_USE_DEEPSPEED": ("false",), "ACCELERATE_USE_FSDP": ("false",)}


@dataclass(frozen=True)
class Launch:
    """One rank's view of a launched run (from the launcher's environment)."""

    world_size: int
    rank: int
    local_rank: int
    launcher: str              # "torchrun", "accelerate launch" or "environment"
    master_addr: str
    master_port: int
    accelerate: tuple = ()     # the ACCELERATE_* settings checked by `check_launch`, as (name, value) pairs

    @property
    def writer(self) -> bool:
        """Rank 0 is the one writer of the run directory."""
        return self.rank == 0


def _int(env, name: str, minimum: int, maximum: int | None = None) -> int:
    raw = env.get(name)
    allowed = f"an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}") + " set by the launcher"
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        raise InvalidParameter(name, raw, allowed) from None
    if value < minimum or (maximum is not None and value > maximum):
        raise InvalidParameter(name, raw, allowed)
    return value


def detect_launch(environ=None) -> Launch | None:
    """The `Launch` of this process from `environ` (default `os.environ`), or None outside a launcher."""
    env = os.environ if environ is None else environ
    if not any(k in env for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK")):
        return None
    world_size = _int(env, "WORLD_SIZE", 1)
    rank = _int(env, "RANK", 0, world_size - 1)
    local_rank = _int(env, "LOCAL_RANK", 0, world_size - 1)
    if "LOCAL_WORLD_SIZE" in env:
        _int(env, "LOCAL_RANK", 0, _int(env, "LOCAL_WORLD_SIZE", 1, world_size) - 1)
    addr = env.get("MASTER_ADDR")
    if not addr or not str(addr).strip():
        raise InvalidParameter("MASTER_ADDR", addr, "the rendezvous host, set by the launcher")
    port = _int(env, "MASTER_PORT", 1, 65535)
    if "ACCELERATE_MIXED_PRECISION" in env:
        launcher = "accelerate launch"
    elif "TORCHELASTIC_RUN_ID" in env:
        launcher = "torchrun"
    else:
        launcher = "environment"
    accelerate = tuple((k, env[k]) for k in _ACCELERATE_OFF if k in env)
    return Launch(world_size, rank, local_rank, launcher, str(addr).strip(), port, accelerate)


def backend_for(device: str) -> str:
    """The torch.distributed backend of a device: NCCL on CUDA, gloo on the CPU."""
    return "nccl" if device == "cuda" else "gloo"


def check_launch(launch: Launch | None, device: str, settings) -> None:
    """Refuse (InvalidParameter) what a launched run cannot honour; nothing to check without a launch.
    `settings`: objects with a `lora_dropout` (the preset, or the configs built from it)."""
    if launch is None:
        return
    if not isinstance(launch, Launch):
        raise InvalidParameter("launch", type(launch).__name__, "None or a Launch (detect_launch)")
    import torch.distributed as dist
    if not dist.is_available():
        raise InvalidParameter("WORLD_SIZE", launch.world_size, "unset: this torch has no torch.distributed")
    for name, value in launch.accelerate:
        if str(value).strip().lower() not in _ACCELERATE_OFF[name]:
            raise InvalidParameter(name, value, f"{_ACCELERATE_OFF[name][0]!r}: privcheck does not apply accelerate's "
                                   "settings (the preset fixes the dtype policy; the step is DistributedDPTrainer's)")
    for item in settings:
        if item.lora_dropout != 0:
            raise InvalidParameter("lora_dropout", item.lora_dropout,
                                   f"0 under {launch.launcher} (per-record dropout masks follow one rollout stream in "
                                   "batch order, which a sharded gradient pass cannot reproduce)")
    if device == "cuda":
        import torch
        if not dist.is_nccl_available():
            raise InvalidParameter("device", device, "'cpu' under a launcher: this torch has no NCCL backend")
        count = torch.cuda.device_count()
        if launch.local_rank >= count:
            raise InvalidParameter("LOCAL_RANK", launch.local_rank,
                                   f"below the {count} visible CUDA device(s): one GPU per rank (--nproc-per-node)")


@contextlib.contextmanager
def process_group(launch: Launch | None, device: str):
    """The default process group of `launch` for the run's `device` (module docstring); a no-op for None."""
    if launch is None:
        yield None
        return
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (launch.rank, launch.world_size):
            raise InvalidParameter("torch.distributed", (dist.get_rank(), dist.get_world_size()),
                                   f"rank {launch.rank} of {launch.world_size} (the launcher's environment)")
        yield dist.get_backend()
        return
    backend = backend_for(device)
    kwargs = {}
    if backend == "nccl":
        torch.cuda.set_device(launch.local_rank)
        kwargs["device_id"] = torch.device("cuda", launch.local_rank)
    dist.init_process_group(backend, init_method="env://", rank=launch.rank, world_size=launch.world_size,
                            **kwargs)
    try:
        yield backend
    finally:
        dist.destroy_process_group()
