"""The seam between Blink's structured outputs and a grammar library.

Two libraries sit behind it, chosen by ``EngineConfig.structured_engine``: ``llguidance``
(``llguidance_engine``) and ``xgrammar`` (``xgrammar_engine``). The compiler, the matcher wrapper
and the mask thread only see these protocols, so the same contract tests run on both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

# The library used when a setting does not name one: llguidance's token-by-token mask stays cheap
# where xgrammar's counted repetition (``maxLength`` strings) expands at run time, and it compiles
# lazily; the mask-fill figures behind the pick are in benchmarks/RESULTS.md.
DEFAULT_ENGINE = "llguidance"
ENGINE_NAMES = ("llguidance", "xgrammar")


class Matcher(Protocol):
    """One request's position in one compiled grammar."""

    def accept_token(self, token_id: int) -> bool: ...

    def is_terminated(self) -> bool: ...

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int) -> Any: ...

    def rollback(self, num_tokens: int) -> Any: ...


class CompiledGrammar(Protocol):
    """A spec compiled against a vocabulary; cached and shared by every request using that spec."""

    def new_matcher(self) -> Matcher: ...


class GrammarEngine(Protocol):
    """What Blink needs from a grammar library; ``kind`` is one of ``spec.KINDS``."""

    name: str

    def check(self, kind: str, spec: str) -> None:
        """Parse ``spec`` without a vocabulary; raise ``ValueError`` / ``RuntimeError`` if bad."""
        ...

    def vocabulary(self, hf_tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> Any:
        """The library's description of the vocabulary (slow: once per engine, off the step loop)."""
        ...

    def compile(self, vocabulary: Any, kind: str, spec: str) -> CompiledGrammar: ...

    def extra_mask(self, vocabulary: Any, kind: str) -> torch.Tensor | None:
        """A bitmask row ANDed into every mask of a ``kind`` grammar (tokens the library lets
        through but valid output never holds), or None."""
        ...


def grammar_engine(name: str) -> GrammarEngine:
    """The engine called ``name``; ``ValueError`` naming the choices for any other name."""
    if name == "llguidance":
        from blink.engine.structured.llguidance_engine import LLGuidanceEngine

        return LLGuidanceEngine()
    if name == "xgrammar":
        from blink.engine.structured.xgrammar_engine import XGrammarEngine

        return XGrammarEngine()
    raise ValueError(f"unknown structured output engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")


def engine_for_kind(configured: str, kind: str) -> str:
    """The engine that handles ``kind``: EBNF grammars are written in xgrammar's dialect (GBNF-like,
    the one documented for ``guided_grammar``), so they always compile with xgrammar, whatever the
    setting; converting dialects could change what a grammar means."""
    return "xgrammar" if kind == "grammar" else configured
