"""xgrammar behind ``GrammarEngine``: precomputed per-state masks, EBNF in its GBNF-like dialect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blink.engine.structured.spec import SEPARATORS, ebnf_source

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr


@dataclass
class XGrammarCompiled:
    compiled: xgr.CompiledGrammar

    def new_matcher(self) -> xgr.GrammarMatcher:
        import xgrammar as xgr

        return xgr.GrammarMatcher(self.compiled)


@dataclass
class XGrammarVocabulary:
    compiler: xgr.GrammarCompiler
    # Tokens free of control characters (``extra_mask``).
    no_control_row: torch.Tensor


class XGrammarEngine:
    name = "xgrammar"

    def check(self, kind: str, spec: str) -> None:
        import xgrammar as xgr

        if kind == "json_schema":
            xgr.Grammar.from_json_schema(spec, any_whitespace=False, separators=SEPARATORS)
        elif kind == "regex":
            xgr.Grammar.from_regex(spec)
        elif kind in ("choice", "grammar"):
            xgr.Grammar.from_ebnf(ebnf_source(kind, spec))

    def vocabulary(self, hf_tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> XGrammarVocabulary:
        import xgrammar as xgr

        from blink.engine.structured.masks import new_bitmask

        # vocab_size is the model's (its logits may be wider than the tokenizer: padding rows are
        # never allowed); the stop tokens are the ones a grammar permits only once it is complete.
        info = xgr.TokenizerInfo.from_huggingface(hf_tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        # One thread: the engine's compute threads own the other cores; xgrammar's own cache is
        # off because GrammarCompiler's LRU bounds the entries by count and is the one that evicts.
        compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        row = new_bitmask(1, vocab_size)[0]
        for token_id, text in enumerate(info.decoded_vocab):
            if token_id < vocab_size and any(b < 0x20 for b in text):
                row[token_id // 32] &= ~(1 << (token_id % 32))
        return XGrammarVocabulary(compiler, row)

    def compile(self, vocabulary: XGrammarVocabulary, kind: str, spec: str) -> XGrammarCompiled:
        compiler = vocabulary.compiler
        if kind == "json_object":
            # Any JSON object (OpenAI's json_object mode), with the same compact separators.
            return XGrammarCompiled(compiler.compile_json_schema('{"type": "object"}', strict_mode=False,
                                                                 any_whitespace=False, separators=SEPARATORS))
        if kind == "json_schema":
            # strict_mode: no properties or items beyond the schema's, so the output is valid
            # whether or not the client asked for strict (a non-strict schema allows a superset).
            return XGrammarCompiled(compiler.compile_json_schema(spec, strict_mode=True, any_whitespace=False,
                                                                 separators=SEPARATORS))
        if kind == "regex":
            return XGrammarCompiled(compiler.compile_regex(spec))
        return XGrammarCompiled(compiler.compile_grammar(ebnf_source(kind, spec)))

    def extra_mask(self, vocabulary: XGrammarVocabulary, kind: str) -> torch.Tensor | None:
        """JSON kinds: tokens holding a control character (bytes 0x00-0x1f) are never allowed. The
        JSON grammars print compact separators and escape control characters inside strings, so
        valid output never holds one; xgrammar's length-bounded string rule (``maxLength``) lets
        them through, and strict JSON parsers (Python's, pydantic's) then refuse the output."""
        return vocabulary.no_control_row if kind in ("json_object", "json_schema") else None
