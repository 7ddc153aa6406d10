"""Compile each distinct spec once, off the step loop, and keep the results in a bounded LRU.

Compiling precomputes token masks over the whole vocabulary: milliseconds for a small schema on a
49k-token vocabulary, seconds for a large enum. It runs on a worker thread (xgrammar's compiler
releases the GIL), so a request with a new schema waits for its grammar while every other request
keeps decoding; one with a known spec starts at once.
"""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from blink.engine.structured.spec import compile_spec

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr

# Compiled grammars kept: each holds per-state token masks (tens of KB to a few MB on a 49k
# vocabulary); 64 covers the handful of schemas a deployment's clients send, within ~100 MB.
DEFAULT_CAPACITY = 64


class GrammarCompiler:
    """Owns the vocabulary description, the compile thread and the LRU of compiled specs."""

    def __init__(
        self, hf_tokenizer: Any, vocab_size: int, stop_token_ids: list[int], capacity: int = DEFAULT_CAPACITY
    ) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="blink-grammar")
        # Describing the vocabulary takes most of a second on a 49k vocabulary: it is the compile
        # thread's first job, so the step loop never waits for it (compiles queue behind it).
        self._ready = self._pool.submit(_vocabulary, hf_tokenizer, vocab_size, stop_token_ids)
        self._cache: OrderedDict[tuple[str, str], Future[xgr.CompiledGrammar]] = OrderedDict()
        self.capacity = capacity
        self.vocab_size = vocab_size

    def extra_mask(self, kind: str) -> torch.Tensor | None:
        """A bitmask row ANDed into every mask of a ``kind`` grammar, or None.

        JSON kinds: tokens holding a control character (bytes 0x00-0x1f) are never allowed. The
        JSON grammars print compact separators and escape control characters inside strings, so
        valid output never contains one; xgrammar's length-bounded string rule (``maxLength``)
        lets them through, and strict JSON parsers (Python's, pydantic's) then refuse the output.
        """
        if kind not in ("json_object", "json_schema"):
            return None
        return self._ready.result()[2]

    def get(self, kind: str, spec: str) -> Future[xgr.CompiledGrammar]:
        """The compiled grammar of ``(kind, spec)``: a done future when cached, else compiling now.

        A failed compile stays cached as failed (the same text fails the same way), bounded by
        the same LRU.
        """
        key = (kind, spec)
        fut = self._cache.get(key)
        if fut is not None:
            self._cache.move_to_end(key)
            return fut
        fut = self._pool.submit(self._compile, kind, spec)
        self._cache[key] = fut
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)  # a request still compiling keeps its own future
        return fut

    def _compile(self, kind: str, spec: str) -> xgr.CompiledGrammar:
        return compile_spec(self._ready.result()[1], kind, spec)

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _vocabulary(hf_tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> tuple[Any, Any, torch.Tensor]:
    """xgrammar's description of the vocabulary, a compiler over it, and the bitmask row of the
    tokens free of control characters (``GrammarCompiler.extra_mask``)."""
    import xgrammar as xgr

    from blink.engine.structured.masks import new_bitmask

    # vocab_size is the model's (its logits may be wider than the tokenizer: padding rows are
    # never allowed); the stop tokens are the ones a grammar permits only once it is complete.
    info = xgr.TokenizerInfo.from_huggingface(hf_tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
    # One thread: the engine's compute threads own the other cores; xgrammar's own cache is off
    # because GrammarCompiler's LRU bounds the entries by count and is the one place that evicts.
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    row = new_bitmask(1, vocab_size)[0]
    for token_id, text in enumerate(info.decoded_vocab):
        if token_id < vocab_size and any(b < 0x20 for b in text):
            row[token_id // 32] &= ~(1 << (token_id % 32))
    return info, compiler, row
