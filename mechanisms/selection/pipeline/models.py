"""Models of the LLM selection pipeline, built from configs (no downloads), and the torch device helpers.

The policy LM π0 is public (candidate sampling); the sequence-classification reward model stands for the
PRIVATE reward model r̂_D (here randomly initialised). Both are deterministic under a public seed. torch and
transformers are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from mechanisms.selection.pipeline.presets import DTYPES, ModelShape
from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["DEVICES", "build_policy", "build_reward_model", "build_tokenizer", "check_device", "count_parameters",
           "fork_devices", "parameter_count", "synchronize", "torch_dtype"]

DEVICES = ("cpu", "cuda")


def torch_dtype(dtype: str):
    """The torch dtype named `dtype` (one of DTYPES)."""
    import torch
    if dtype not in DTYPES:
        raise InvalidParameter("dtype", dtype, " or ".join(DTYPES))
    return getattr(torch, dtype)


def check_device(device: str) -> str:
    """'cpu' or 'cuda' (the latter only when torch sees a GPU)."""
    if device not in DEVICES:
        raise InvalidParameter("device", device, "'cpu' or 'cuda'")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InvalidParameter("device", device, "'cpu' (torch.cuda.is_available() is False here)")
    return device


def fork_devices(device: str) -> list:
    """The CUDA devices whose RNG `torch.random.fork_rng` must save and restore for `device`."""
    import torch
    return [torch.cuda.current_device()] if device == "cuda" else []


def build_tokenizer(kind: str = "byt5"):
    """A tokenizer that needs no files: transformers' byte-level `ByT5Tokenizer()` (vocabulary 384)."""
    if kind != "byt5":
        raise InvalidParameter("tokenizer", kind, "'byt5'")
    from transformers import ByT5Tokenizer
    return ByT5Tokenizer()


def build_policy(shape: ModelShape, *, seed: int = 0, device: str = "cpu", dtype: str = "float32"):
    """Randomly initialised `Qwen2ForCausalLM` (eval mode, no gradients); deterministic under `seed`."""
    import torch
    from transformers import Qwen2ForCausalLM
    with torch.random.fork_rng(devices=fork_devices(device)), torch.device(device):
        torch.manual_seed(v.count("seed", seed, minimum=0))
        model = Qwen2ForCausalLM._from_config(shape.config(), dtype=torch_dtype(dtype))
    return model.eval().requires_grad_(False)


def build_reward_model(shape: ModelShape, *, seed: int = 1, device: str = "cpu", dtype: str = "float32"):
    """Randomly initialised `Qwen2ForSequenceClassification` with one label; deterministic under `seed`.

    The score head is re-drawn as N(0, 1/hidden) (public choice): the final RMSNorm output has unit RMS,
    so logits are about N(0, 1) and R_max·sigmoid(logit) spreads over the range instead of sitting at R_max/2.
    """
    import torch
    from transformers import Qwen2ForSequenceClassification
    with torch.random.fork_rng(devices=fork_devices(device)), torch.device(device):
        torch.manual_seed(v.count("seed", seed, minimum=0))
        model = Qwen2ForSequenceClassification._from_config(shape.config(), dtype=torch_dtype(dtype))
        with torch.no_grad():
            model.score.weight.normal_(0.0, shape.hidden_size ** -0.5)
    return model.eval().requires_grad_(False)


def parameter_count(shape: ModelShape, kind: str = "policy") -> int:
    """Parameters of the policy LM or the reward model, built on the meta device (nothing allocated)."""
    import torch
    from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification
    cls = {"policy": Qwen2ForCausalLM, "reward": Qwen2ForSequenceClassification}.get(kind)
    if cls is None:
        raise InvalidParameter("kind", kind, "'policy' or 'reward'")
    with torch.device("meta"):
        model = cls(shape.config())
    return count_parameters(model)


def count_parameters(model) -> int:
    """Parameters of a built model."""
    return sum(p.numel() for p in model.parameters())   # tied weights are yielded once


def synchronize(device) -> None:
    """Wait for queued CUDA work (so that wall-clock timings cover it); a no-op on the CPU."""
    import torch
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()

