"""One-thread ONNX Runtime sessions and padded tokenisation shared by the model runners."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def one_thread_session(path: Path) -> Any:
    """The gateway shares its cores with the engine: one intra-op thread (two collapse under contention)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class PaddedTokenizer:
    """``tokenizer.json`` -> padded id/mask arrays for a batch, cut at ``max_tokens``."""

    def __init__(self, tokenizer_json: Path, max_tokens: int) -> None:
        from tokenizers import Tokenizer

        self.max_tokens = max_tokens
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self._counter = Tokenizer.from_file(str(tokenizer_json))
        self._counter.no_truncation()
        self._counter.no_padding()
        self._tok.enable_truncation(max_tokens)
        self._tok.enable_padding(pad_id=self._tok.token_to_id("[PAD]") or 0)

    def count(self, texts: list[str]) -> list[int]:
        """Tokens per text without truncation (input validation, usage)."""
        return [len(e.ids) for e in self._counter.encode_batch(texts)]

    def batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encs = self._tok.encode_batch(texts)
        ids = np.asarray([e.ids for e in encs], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encs], dtype=np.int64)
        return ids, mask


def feed(session: Any, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Only the inputs the graph declares (BERT wants token_type_ids, others do not)."""
    have = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return {i.name: have[i.name] for i in session.get_inputs()}
