"""Compile each distinct spec once, off the step loop, and keep the results in a bounded LRU.

Compiling takes milliseconds for a small schema on a 49k-token vocabulary (xgrammar precomputes
per-state token masks: seconds for a large enum; llguidance parses the schema and builds its
lexer lazily). It runs on a worker thread (both libraries release the GIL), so a request with a
new schema waits for its grammar while every other request keeps decoding; one with a known spec
starts at once.
"""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from blink.engine.errors import InvalidParameterError
from blink.engine.structured.grammar_engine import (
    DEFAULT_ENGINE,
    CompiledGrammar,
    GrammarEngine,
    Matcher,
    engine_for_kind,
    grammar_engine,
)
from blink.engine.structured.spec import PARAM

if TYPE_CHECKING:
    import torch

# Compiled grammars kept: each holds per-state token masks (tens of KB to a few MB on a 49k
# vocabulary); 64 covers the handful of schemas a deployment's clients send, within ~100 MB.
DEFAULT_CAPACITY = 64


class GrammarCompiler:
    """Owns the vocabulary descriptions, the compile thread and the LRU of compiled specs."""

    def __init__(
        self,
        hf_tokenizer: Any,
        vocab_size: int,
        stop_token_ids: list[int],
        capacity: int = DEFAULT_CAPACITY,
        engine: str = DEFAULT_ENGINE,
    ) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="blink-grammar")
        self._tokenizer = (hf_tokenizer, vocab_size, list(stop_token_ids))
        self.engine = engine
        self._engines: dict[str, GrammarEngine] = {}
        self._vocabularies: dict[str, Future[Any]] = {}
        # Describing the vocabulary takes most of a second on a 49k vocabulary: it is the compile
        # thread's first job, so the step loop never waits for it (compiles queue behind it).
        self._vocabulary(engine)
        self._cache: OrderedDict[tuple[str, str, str], Future[CompiledGrammar]] = OrderedDict()
        self.capacity = capacity
        self.vocab_size = vocab_size

    def _vocabulary(self, name: str) -> Future[Any]:
        """The named engine's vocabulary, built once on the compile thread (the other engine's
        only when a kind it alone handles arrives)."""
        fut = self._vocabularies.get(name)
        if fut is None:
            self._engines[name] = grammar_engine(name)
            fut = self._pool.submit(self._engines[name].vocabulary, *self._tokenizer)
            self._vocabularies[name] = fut
        return fut

    def extra_mask(self, kind: str, engine: str | None = None) -> torch.Tensor | None:
        """A bitmask row ANDed into every mask of a ``kind`` grammar, or None (``GrammarEngine``)."""
        name = engine_for_kind(engine or self.engine, kind)
        return self._engines[name].extra_mask(self._vocabulary(name).result(), kind)

    def get(self, kind: str, spec: str, engine: str | None = None) -> Future[CompiledGrammar]:
        """The compiled grammar of ``(kind, spec)``: a done future when cached, else compiling now.

        ``engine`` overrides the setting for this spec (a request's ``guided_decoding_backend``).
        A failed compile stays cached as failed (the same text fails the same way), bounded by
        the same LRU.
        """
        name = engine_for_kind(engine or self.engine, kind)
        key = (name, kind, spec)
        fut = self._cache.get(key)
        if fut is not None:
            self._cache.move_to_end(key)
            return fut
        vocabulary = self._vocabulary(name)
        fut = self._pool.submit(lambda: self._nonempty(self._engines[name].compile(vocabulary.result(), kind, spec)))
        self._cache[key] = fut
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)  # a request still compiling keeps its own future
        return fut

    def _nonempty(self, compiled: CompiledGrammar) -> CompiledGrammar:
        """``compiled``, unless no token may start its output: a schema whose ``$ref`` chain never
        reaches a type, a grammar rule defined only by itself, a regex no string matches. Both
        libraries compile those; the first step then samples a token the grammar refuses and the
        request fails as an engine error, a 500 for the client's own mistake. A first mask
        (a fraction of a millisecond, once per distinct spec) finds them here, as a 400. The mask
        can over-approximate (llguidance allows '{' for an object that must contain itself, then
        refuses it), so a token it allows must also be accepted."""
        from blink.engine.structured.masks import new_bitmask

        bitmask = new_bitmask(1, self.vocab_size)
        matcher = compiled.new_matcher()
        try:
            matcher.fill_next_token_bitmask(bitmask, 0)
        except RuntimeError:  # llguidance reports an empty language as a fill error
            bitmask.zero_()
        if not _some_allowed_token_is_accepted(matcher, bitmask[0]):
            raise InvalidParameterError("The structured output spec admits no output: no token can start it "
                                        "(check for a $ref cycle, a rule that only refers to itself or a regex "
                                        "that matches nothing).", param=PARAM)
        return compiled

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


# Allowed first tokens tried before a spec is called empty: the first is accepted in any sound
# grammar; a mask whose first 256 are all refused is broken however many it lists.
_FIRST_TOKENS_TRIED = 256


def _some_allowed_token_is_accepted(matcher: Matcher, row: torch.Tensor) -> bool:
    """Whether one of the first ``_FIRST_TOKENS_TRIED`` tokens ``row`` allows is accepted (the
    matcher is left as it was)."""
    tried = 0
    for w, word in enumerate(row.tolist()):
        word &= 0xFFFFFFFF  # int32 words: bit 31 reads as the sign
        while word:
            if tried == _FIRST_TOKENS_TRIED:
                return False
            bit = (word & -word).bit_length() - 1
            word &= word - 1
            tried += 1
            if matcher.accept_token(w * 32 + bit):
                matcher.rollback(1)
                return True
    return False
