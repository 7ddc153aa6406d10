"""SmoothQuant factors for W8A8 prefill: move activation outliers into the int8 weights.

Real models' activations have a few input channels far larger than the rest (down_proj's input
most of all), and W8A8 quantizes each activation row with one scale: the outlier channels set it,
and every other channel of the row keeps only a few int8 steps. SmoothQuant (Xiao et al., 2023)
divides each input channel ``k`` by ``s_k = max|X_k|^alpha / max|W_:,k|^(1 - alpha)`` and multiplies
the weight's column ``k`` by it: the product is unchanged, the activation rows are flatter, and
the weights, quantized per output channel, absorb the difference.

Here the division is done inside the activation quantization pass (``blink::quantize_rows``'s
column scale), and only the W8A8 copy of a weight is smoothed: the int8 weight-only path that
decode and speculative verification use stays bit for bit what ``int8`` computes. Nothing is
folded into the norms or the preceding projections, so the method needs no knowledge of the
model's topology (Llama, Qwen2, Qwen3 and GQA all look alike to it).

The activation ranges come from one forward over a short calibration text shipped with the
engine (``blink/engine/data/calibration.txt``, public domain; never the text perplexity is
measured on), run at engine start before quantization.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources

import torch
from torch import nn

# SmoothQuant's migration strength: 0.5 splits the difficulty evenly between activations and
# weights, the value its authors found good across Llama-family models; the choice here was
# checked by perplexity on SmolLM2 (benchmarks/RESULTS.md, "W8A8 with SmoothQuant").
DEFAULT_ALPHA = 0.5
# Tokens of the calibration text run at start-up: enough for the outlier channels (they show up
# in every token) at a fraction of a second of prefill.
CALIBRATION_TOKENS = 512
# Floors that keep a silent channel (all-zero activations or weight column) from a 0 or inf factor.
_EPS = 1e-5


def calibration_text() -> str:
    """The shipped calibration text (its source: blink/engine/data/README.md)."""
    return resources.files("blink.engine").joinpath("data", "calibration.txt").read_text(encoding="utf-8")


def smoothing_factors(act_absmax: torch.Tensor, weight: torch.Tensor, alpha: float = DEFAULT_ALPHA) -> torch.Tensor:
    """Per-input-channel ``s`` (fp32 ``[K]``): the W8A8 weight is ``W * s`` and the activations ``x / s``."""
    a = act_absmax.detach().to(torch.float32).clamp_min(_EPS)
    w = weight.detach().to(torch.float32).abs().amax(dim=0).clamp_min(_EPS)
    return (a.pow(alpha) / w.pow(1.0 - alpha)).clamp_min(_EPS)


@contextmanager
def recorded_input_ranges(model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Within the block, every forward records each quantizable linear's per-input-channel
    ``max |x|`` (fp32 ``[K]``, the max over all calls) into the yielded dict, keyed by module name."""
    ranges: dict[str, torch.Tensor] = {}
    handles = []

    def hook_for(name: str):  # type: ignore[no-untyped-def]
        def record(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].detach()
            seen = x.reshape(-1, x.shape[-1]).abs().amax(dim=0).to(torch.float32)
            prior = ranges.get(name)
            ranges[name] = seen if prior is None else torch.maximum(prior, seen)

        return record

    for name, module in model.named_modules():
        if name and getattr(module, "quantizable_linear", False):
            handles.append(module.register_forward_pre_hook(hook_for(name)))
    try:
        yield ranges
    finally:
        for handle in handles:
            handle.remove()
