"""A sentence encoder: texts -> unit-norm mean-pooled rows, one ONNX call per batch.

Uses the semantic cache's export of a sentence-transformers folder (``ensure_onnx``), so the
cache, the router classifier and ``/v1/embeddings`` run one model. Padding is masked out of the
mean, so a text's row does not depend on what it was batched with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blink.modelserver.onnx_session import GraphInputs, PaddedTokenizer, one_thread_session

# sentence-transformers' max_seq_length for all-MiniLM-L6-v2; longer inputs are refused (400).
DEFAULT_MAX_TOKENS = 256


class OnnxEncoder:
    def __init__(self, model: str, onnx_dir: str | Path, quantize: bool, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        from blink.modelserver.embedder import ensure_onnx, resolve_model_dir

        model_dir = resolve_model_dir(model)
        self.path = ensure_onnx(model_dir, Path(onnx_dir).expanduser(), quantize)
        self._session = one_thread_session(self.path)
        self._feed = GraphInputs(self._session)
        self.tokenizer = PaddedTokenizer(model_dir / "tokenizer.json", max_tokens)
        self.dim = int(self._session.get_outputs()[0].shape[-1] or 384)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.counted(texts)[0]

    def counted(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """Unit-norm rows and each text's full token count, from one tokenisation."""
        if len(texts) == 1:
            return self._one(texts[0])
        ids, mask, counts = self.tokenizer.encode(texts)
        (hidden,) = self._session.run(None, self._feed(ids, mask))
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        rows = (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)
        return rows, counts

    def _one(self, text: str) -> tuple[np.ndarray, list[int]]:
        """A lone text (the cache's lookup at concurrency 1): no padding, so the mean is over every
        token, in half the numpy calls of the masked batch path; the row equals the batch path's to
        float rounding."""
        ids, count = self.tokenizer.encode_one(text)
        (hidden,) = self._session.run(None, self._feed(ids, np.ones_like(ids)))
        pooled = hidden[0].mean(axis=0, dtype=np.float32)
        norm = max(float(np.sqrt(pooled @ pooled)), 1e-12)
        return (pooled / norm)[None], [count]
