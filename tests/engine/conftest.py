"""Engine-only fixtures (the shared tiny checkpoints live in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

# 300 AdamW steps of 8 x 128 tokens: ~10 s on one core, the point where the held-out top-1
# probability has risen from chance to ~0.16 (measured; 600 steps buys little more).
TRAIN_STEPS = 300


@pytest.fixture(scope="session")
def trained_tiny_llama(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """A tiny Llama trained briefly on the tokenizer's corpus (see tests/engine/trained_tiny.py)."""
    import torch

    from blink.demo.tiny import build_tiny_checkpoint
    from tests.engine.trained_tiny import corpus_ids, train_checkpoint

    torch.set_num_threads(1)
    src = build_tiny_checkpoint(tmp_path_factory.mktemp("untrained"), "llama", tokenizer_dir=tiny_tokenizer_dir)
    ids = corpus_ids(tiny_tokenizer_dir)
    return train_checkpoint(src, tmp_path_factory.mktemp("trained-llama"), ids, TRAIN_STEPS)


@pytest.fixture(scope="session", autouse=True)
def _int8_gemv_built() -> None:
    """Build blink::int8_gemv before the first test (~35 s once per machine, cached after), so the
    build never lands inside a test's engine start; a machine without AVX-512 just keeps aten."""
    from blink.engine.kernels.int8_gemv import int8_gemv_available

    int8_gemv_available()


@pytest.fixture
def gemv_row_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Row counts of every ``torch.ops.blink.int8_gemv`` call the test makes (the op still runs)."""
    import torch

    calls: list[int] = []
    real = torch.ops.blink.int8_gemv

    def counting(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return real(x, q, s)

    monkeypatch.setattr(torch.ops.blink, "int8_gemv", counting)
    return calls


@pytest.fixture
def w8a8_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of every W8A8 linear call made during the test (each call still runs)."""
    import torch

    from blink.engine.layers import linear_int8

    rows: list[int] = []
    real = linear_int8.w8a8_linear

    def counting(x: torch.Tensor, *args: object) -> torch.Tensor:
        rows.append(x.shape[0])
        return real(x, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(linear_int8, "w8a8_linear", counting)
    return rows


@pytest.fixture
def fused_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of every ``FusedDecode`` call made while the test runs (each call still runs)."""
    import torch

    from blink.engine.kernels.decode_step import FusedDecode

    calls: list[int] = []
    step = FusedDecode.__call__

    def counted(self: FusedDecode, *args: torch.Tensor) -> torch.Tensor:
        calls.append(int(args[0].numel()))
        return step(self, *args)

    monkeypatch.setattr(FusedDecode, "__call__", counted)
    return calls
