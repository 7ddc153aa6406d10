"""llguidance behind ``GrammarEngine``: an Earley parser over a lazily built lexer.

It computes each mask by walking the token trie against the lexer's current state instead of
looking masks up per grammar state, so a string with ``maxLength`` costs about what a plain
string does (xgrammar expands the counted repetition into many states whose masks it must compute
at run time). Grammars compile lazily: compiling is parsing the schema; the lexer grows while
decoding and is shared by the copies of a compiled matcher.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from blink.engine.structured.spec import SEPARATORS

if TYPE_CHECKING:
    import llguidance

# The same compact JSON as the xgrammar path (spec.SEPARATORS): no free whitespace for a small or
# random model to loop in.
_COMPACT = {"whitespace_flexible": False, "item_separator": SEPARATORS[0], "key_separator": SEPARATORS[1]}
# JSON Schema keywords whose value is a schema, a list of schemas, or a name -> schema map.
_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames")
_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


class LLGuidanceMatcher:
    """``Matcher`` over an ``llguidance.LLMatcher``.

    A refused token leaves the state as it was (llguidance's ``consume_token`` would put the
    matcher in an error state; ``try_consume_tokens`` does not, and a stop token is taken only
    where the grammar is complete). Terminated means what it means
    for xgrammar: a stop token was accepted (llguidance's own "stopped" is already true when only
    a stop token can follow).
    """

    def __init__(self, matcher: llguidance.LLMatcher, stop_token_ids: frozenset[int]) -> None:
        self._m = matcher
        self._stops = stop_token_ids
        self._terminated = False
        self._stop_recorded = False

    def accept_token(self, token_id: int) -> bool:
        if self._terminated:
            return False
        if token_id in self._stops:  # try_consume_tokens never takes a stop token
            # A matcher that is already stopped (only a stop token could follow) takes it without
            # recording it, so a rollback must not count it.
            self._stop_recorded = not self._m.is_stopped()
            self._terminated = self._m.is_accepting() and bool(self._m.consume_token(token_id))
            return self._terminated
        return self._m.try_consume_tokens([token_id]) == 1

    def is_terminated(self) -> bool:
        return self._terminated

    def rollback(self, num_tokens: int) -> None:
        if num_tokens and self._terminated:  # a stop token is always the last one accepted
            self._terminated = False
            num_tokens -= 0 if self._stop_recorded else 1
        if num_tokens:
            self._m.rollback(num_tokens)

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int) -> None:
        if self._terminated:
            raise RuntimeError("the grammar has ended: no token may follow")
        # What llguidance.torch.fill_next_token_bitmask does, without importing that module: its
        # torch.compile decorator loads torch._dynamo, seconds at the first constrained request.
        row = bitmask[index]
        if row.dtype != torch.int32 or not row.is_contiguous():
            raise ValueError("a grammar mask row must be contiguous int32")
        self._m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
        if self._m.is_error():
            raise RuntimeError(self._m.get_error())


@dataclass
class LLGuidanceCompiled:
    template: llguidance.LLMatcher
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)

    def new_matcher(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self.template.deep_copy(), self.stop_token_ids)


@dataclass
class LLGuidanceVocabulary:
    tokenizer: llguidance.LLTokenizer
    stop_token_ids: frozenset[int]


class LLGuidanceEngine:
    name = "llguidance"

    def check(self, kind: str, spec: str) -> None:
        import llguidance

        error = llguidance.LLMatcher.validate_grammar(grammar_text(kind, spec))
        if error:
            raise ValueError(error)

    def vocabulary(self, hf_tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> LLGuidanceVocabulary:
        import llguidance.hf

        tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size, eos_token=list(stop_token_ids))
        return LLGuidanceVocabulary(tokenizer, frozenset(stop_token_ids))

    def compile(self, vocabulary: LLGuidanceVocabulary, kind: str, spec: str) -> LLGuidanceCompiled:
        import llguidance

        grammar = grammar_text(kind, spec)
        error = llguidance.LLMatcher.validate_grammar(grammar, vocabulary.tokenizer)
        if error:
            raise ValueError(error)
        # log_level 0: a refused token is the caller's business (it is reported there), not stderr's.
        template = llguidance.LLMatcher(vocabulary.tokenizer, grammar, log_level=0)
        if template.is_error():
            raise ValueError(template.get_error())
        template.compute_bitmask()  # the first mask builds the lexer's start: here, not in a step
        return LLGuidanceCompiled(template, vocabulary.stop_token_ids)

    def extra_mask(self, vocabulary: LLGuidanceVocabulary, kind: str) -> torch.Tensor | None:
        return None  # its JSON string lexer follows JSON's grammar: no raw control characters


def grammar_text(kind: str, spec: str) -> str:
    """llguidance's grammar text for a checked ``(kind, spec)`` ("grammar" goes to xgrammar)."""
    import llguidance

    if kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema('{"type": "object"}', overrides=_COMPACT)
    if kind == "json_schema":
        schema = closed_schema(json.loads(spec))
        return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=_COMPACT)
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(spec)
    if kind == "choice":
        # Lark string literals take JSON's escapes.
        return llguidance.LLMatcher.grammar_from_lark(
            "start: " + " | ".join(json.dumps(c, ensure_ascii=True) for c in json.loads(spec)))
    raise ValueError(f"llguidance does not compile {kind!r} specs here")


def closed_schema(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object schema that sets none, and
    no items beyond ``prefixItems`` unless ``items`` says otherwise: the strict reading xgrammar's
    ``strict_mode`` applies, so both engines allow the same outputs and the output is valid
    whether or not the client asked for strict (a non-strict schema allows a superset)."""
    if isinstance(schema, list):
        return [closed_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE:
        if key in out:
            out[key] = closed_schema(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [closed_schema(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_schema(s) for name, s in out[key].items()}
    types = out.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types) or "properties" in out
    if is_object and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    if "prefixItems" in out and "items" not in out:
        out["items"] = False
    return out
