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
    """``tokenizer.json`` -> padded id/mask arrays for a batch, cut at ``max_tokens``.

    ``encode`` tokenises each text once and returns its full token count with the arrays, so
    the endpoints' length check and usage need no second pass (a large share of the event loop's
    time per /v1/embeddings request: benchmarks/RESULTS.md, "Figures behind the code's numbers", batcher). Batches are padded to their longest input, not to
    ``max_tokens``.
    """

    def __init__(self, tokenizer_json: Path, max_tokens: int) -> None:
        from tokenizers import Tokenizer

        self.max_tokens = max_tokens
        self._full = Tokenizer.from_file(str(tokenizer_json))
        self._full.no_truncation()
        self._full.no_padding()
        self._cut = Tokenizer.from_file(str(tokenizer_json))
        self._cut.enable_truncation(max_tokens)  # keeps the special tokens ([CLS] ... [SEP]) at the ends
        self._cut.no_padding()
        self._pad_id = self._full.token_to_id("[PAD]") or 0

    def count(self, texts: list[str]) -> list[int]:
        """Tokens per text without truncation (input validation, usage)."""
        return [len(e.ids) for e in self._full.encode_batch(texts)]

    def encode_one(self, text: str) -> tuple[np.ndarray, int]:
        """(ids as a 1-row array, full token count) of one text: no padding, so its mask is all ones."""
        enc = self._full.encode(text)
        count = len(enc.ids)
        ids = enc.ids if count <= self.max_tokens else self._cut.encode(text).ids
        return np.array(ids, dtype=np.int64)[None], count

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """(ids, mask, full token count per text): rows cut at ``max_tokens``, padded to the longest."""
        seqs = [e.ids for e in self._full.encode_batch(texts)]
        counts = [len(x) for x in seqs]
        long = [i for i, n in enumerate(counts) if n > self.max_tokens]
        if long:  # rare: the tokenizer's own truncation, so the closing special token stays
            for i, e in zip(long, self._cut.encode_batch([texts[i] for i in long]), strict=True):
                seqs[i] = e.ids
        ids = np.full((len(seqs), max(map(len, seqs))), self._pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return ids, mask, counts


class GraphInputs:
    """Builds the feed of only the inputs the graph declares (BERT wants token_type_ids, others do
    not). The names are read once: ``session.get_inputs()`` builds new objects on every call."""

    def __init__(self, session: Any) -> None:
        self.names = tuple(i.name for i in session.get_inputs())

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        have = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return {name: have[name] for name in self.names}
