"""Which implementation serves which Hugging Face ``architectures`` entry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from blink.engine.errors import UnsupportedModelError
from blink.engine.layers.attention import AttentionMetadata, PagedAttention
from blink.engine.models.llama import LlamaForCausalLM, LlamaVariant


class CausalLM(Protocol):
    """What the model runner and loader need from a model implementation."""

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...

    def attention_layers(self) -> list[PagedAttention]: ...

    def tie_weights(self) -> None: ...

    def map_checkpoint_name(self, name: str) -> tuple[str, str | None] | None: ...


ModelFactory = Callable[[Any, int], LlamaForCausalLM]


def _llama(variant: LlamaVariant) -> ModelFactory:
    return lambda hf_config, max_positions: LlamaForCausalLM(hf_config, max_positions, variant)


_REGISTRY: dict[str, ModelFactory] = {
    "LlamaForCausalLM": _llama(LlamaVariant()),
    "MistralForCausalLM": _llama(LlamaVariant()),
    "Qwen2ForCausalLM": _llama(LlamaVariant(qkv_bias=True)),
    "Qwen3ForCausalLM": _llama(LlamaVariant(qk_norm=True)),
}

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(sorted(_REGISTRY))


def model_factory(architectures: Sequence[str] | None) -> ModelFactory:
    """The factory for the first supported entry of a config's ``architectures`` list."""
    for arch in architectures or ():
        factory = _REGISTRY.get(arch)
        if factory is not None:
            return factory
    named = ", ".join(architectures) if architectures else "none given"
    raise UnsupportedModelError(
        f"unsupported model architecture ({named}); supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
    )
