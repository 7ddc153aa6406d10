"""From a model name to a loaded model: resolve the checkpoint folder, pick the dtype, stream weights.

A local folder is used as is; so is a ``.gguf`` file, or a folder holding exactly one (read by
:mod:`blink.engine.gguf_loader`). Anything else is a Hugging Face hub id fetched with
``snapshot_download`` (only the files serving needs); failures surface as
:class:`ModelNotAvailableError` so a caller can fall back (e.g. to the offline demo model).
Weights stream tensor by tensor from safetensors into a model built on the meta device, so peak
memory is one copy of the weights plus one tensor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from blink.engine.errors import ModelLoadError, ModelNotAvailableError

# What serving needs from a hub repo; ``model*.safetensors`` skips the duplicate
# ``consolidated.safetensors`` some repos (Mistral) ship next to the HF shards.
HUB_ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "model*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().exists()


def resolve_model_path(model: str, revision: str | None = None) -> Path:
    """A local checkpoint folder for ``model`` (a folder path or a hub id), downloading if needed."""
    if _looks_like_path(model):
        path = Path(model).expanduser()
        if (path / "config.json").is_file():
            return path
        from blink.engine.gguf_loader import find_gguf, is_gguf

        if is_gguf(path):
            return path
        single = find_gguf(path) if path.is_dir() else None
        if single is None:
            raise ModelNotAvailableError(
                f"{model!r} is not a model folder (no config.json found there) nor a .gguf file"
            )
        return single
    return _download(model, revision)


def _download(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    try:
        folder = snapshot_download(repo_id=repo_id, revision=revision, allow_patterns=HUB_ALLOW_PATTERNS)
    except HFValidationError as exc:
        raise ModelNotAvailableError(
            f"{repo_id!r} is neither a local folder nor a valid hub id: {exc}"
        ) from exc
    except GatedRepoError as exc:
        raise ModelNotAvailableError(
            f"{where} is gated: accept its licence on the hub and set HF_TOKEN"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise ModelNotAvailableError(f"{where} does not exist on the hub (or is private)") from exc
    except RevisionNotFoundError as exc:
        raise ModelNotAvailableError(f"{where}: revision not found") from exc
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:
        raise ModelNotAvailableError(
            f"{where} is not in the local Hugging Face cache and the hub cannot be reached "
            "(offline or HF_HUB_OFFLINE=1); pass a local folder or download it first"
        ) from exc
    except OSError as exc:  # connection errors (httpx/requests) and disk errors
        raise ModelNotAvailableError(f"could not download {where}: {exc}") from exc
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise ModelNotAvailableError(f"{where} has no config.json; is it a transformers checkpoint?")
    return path


def read_architectures(path: Path) -> list[str]:
    """The raw ``architectures`` list, read before transformers sees a possibly unknown model type."""
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path / 'config.json'}: {exc}") from exc
    architectures = raw.get("architectures") if isinstance(raw, dict) else None
    return [str(a) for a in architectures] if isinstance(architectures, list) else []


def read_hf_config(path: Path, trust_remote_code: bool = False) -> Any:
    """The checkpoint's ``transformers`` config (defaults filled in for fields the file omits)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError) as exc:
        raise ModelLoadError(f"cannot read the model config in {path}: {exc}") from exc


@dataclass
class Checkpoint:
    """What building a model needs from a checkpoint, whatever its format."""

    architectures: list[str]
    # Called once the architecture is known to be served: transformers cannot parse the config of
    # a model type it has never heard of, and that must surface as "unsupported", not as a crash.
    read_hf_config: Callable[[], Any]
    load_weights: Callable[[nn.Module], None]


def open_checkpoint(path: Path, trust_remote_code: bool = False) -> Checkpoint:
    """A safetensors folder, or a GGUF file (opened once: reading its metadata is not cheap)."""
    from blink.engine.gguf_loader import is_gguf

    if is_gguf(path):
        from blink.engine import gguf_loader

        reader = gguf_loader.open_reader(path)
        config = gguf_loader.hf_config(reader)
        return Checkpoint(
            gguf_loader.architectures(reader),
            lambda: config,
            lambda model: load_tensors(model, gguf_loader.named_tensors(reader, config), path.name),
        )
    return Checkpoint(
        read_architectures(path),
        lambda: read_hf_config(path, trust_remote_code),
        lambda model: load_weights(model, path),
    )


def checkpoint_files(path: Path) -> list[Path]:
    """The safetensors shards to load: the index's files when there is one, else every shard."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [path / name for name in sorted(set(weight_map.values()))]
    elif (path / "model.safetensors").is_file():
        files = [path / "model.safetensors"]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(
            f"no *.safetensors weights in {path} (only safetensors checkpoints are supported)"
        )
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ModelLoadError(f"checkpoint in {path} is incomplete; missing {', '.join(missing)}")
    return files


def _checkpoint_dtype(hf_config: Any, path: Path) -> torch.dtype:
    declared = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(declared, torch.dtype):
        return declared
    if isinstance(declared, str) and declared in _DTYPES:
        return _DTYPES[declared]
    from safetensors import safe_open

    with safe_open(str(checkpoint_files(path)[0]), framework="pt", device="cpu") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open handles are not iterable)
            dtype = f.get_slice(name).get_dtype()
            return {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}.get(
                dtype, torch.float32
            )
    return torch.float32


def resolve_dtype(requested: str, hf_config: Any, path: Path, device: torch.device) -> torch.dtype:
    """``auto`` means the checkpoint's dtype; float16 becomes bfloat16 on the CPU.

    CPU float16 matmuls are emulated and several times slower than bfloat16 (which has native
    AMX/AVX-512 kernels here), and bfloat16 keeps float16's memory footprint.
    """
    if requested == "auto":
        dtype = _checkpoint_dtype(hf_config, path)
    elif requested in _DTYPES:
        dtype = _DTYPES[requested]
    else:
        raise ModelLoadError(f"unknown dtype {requested!r}; expected auto, float32, bfloat16 or float16")
    if dtype == torch.float16 and device.type == "cpu":
        return torch.bfloat16
    return dtype


def instantiate(
    factory: Any, hf_config: Any, max_positions: int, dtype: torch.dtype, device: torch.device
) -> nn.Module:
    """Build the model without initialising weights (meta device), then give it real storage."""
    with torch.device("meta"):
        model: nn.Module = factory(hf_config, max_positions)
    model = model.to(dtype=dtype).to_empty(device=device)
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        tie()
    for module in model.modules():
        reset = getattr(module, "reset_buffers", None)
        if callable(reset):
            reset()
    return model


def _expected_shards(model: nn.Module, name: str) -> set[str | None]:
    """Fused parameters need every shard; plain ones need the whole tensor once."""
    shard_sizes = getattr(model.get_submodule(name.rpartition(".")[0]), "shard_sizes", None)
    return set(shard_sizes) if shard_sizes else {None}


def load_weights(model: nn.Module, path: Path) -> None:
    """Stream every safetensors tensor of the checkpoint folder into ``model``."""
    from safetensors import safe_open

    def tensors() -> Iterable[tuple[str, Callable[[], torch.Tensor]]]:
        for file in checkpoint_files(path):
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for ckpt_name in f.keys():  # noqa: SIM118 (safe_open handles are not iterable)
                    yield ckpt_name, lambda f=f, ckpt_name=ckpt_name: f.get_tensor(ckpt_name)

    load_tensors(model, tensors(), str(path))


def load_tensors(
    model: nn.Module, tensors: Iterable[tuple[str, Callable[[], torch.Tensor]]], where: str
) -> None:
    """Place each (checkpoint name, tensor loader) in ``model``; raise if any parameter is left unfilled.

    The model maps checkpoint names (``map_checkpoint_name``), which is where fused projections
    and tied embeddings are handled. A tensor is read only once its name maps to a parameter.
    """
    params = dict(model.named_parameters())
    filled: dict[str, set[str | None]] = {}
    mapper: Callable[[str], tuple[str, str | None] | None] = getattr(model, "map_checkpoint_name")  # noqa: B009
    with torch.no_grad():
        for ckpt_name, read in tensors:
            mapped = mapper(ckpt_name)
            if mapped is None:
                continue
            name, shard = mapped
            param = params.get(name)
            if param is None:
                raise ModelLoadError(f"{where}: unexpected weight {ckpt_name!r} for this architecture")
            owner = model.get_submodule(name.rpartition(".")[0])
            _copy_into(owner, param, read(), shard, ckpt_name)
            filled.setdefault(name, set()).add(shard)
    missing = [name for name in params if not _expected_shards(model, name) <= filled.get(name, set())]
    if missing:
        raise ModelLoadError(f"checkpoint in {where} lacks weights for: {', '.join(missing[:8])}")


def _copy_into(
    owner: nn.Module, param: nn.Parameter, tensor: torch.Tensor, shard: str | None, ckpt_name: str
) -> None:
    loader = getattr(owner, "load_shard", None)
    try:
        if callable(loader):
            loader(param, tensor, shard)
        elif param.shape != tensor.shape:
            raise ValueError(
                f"shape mismatch: checkpoint {tuple(tensor.shape)} vs model {tuple(param.shape)}"
            )
        else:
            param.data.copy_(tensor)
    except (ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load {ckpt_name!r}: {exc}") from exc
