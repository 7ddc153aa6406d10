"""The compiled-grammar cache: one compile per distinct spec, bounded, failures kept as failures;
on both grammar engines (the ``engine`` fixture), and EBNF always on xgrammar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blink.engine.errors import InvalidParameterError
from blink.engine.structured.compiler import GrammarCompiler
from blink.engine.structured.masks import new_bitmask
from blink.engine.structured.matcher import GrammarState
from blink.engine.structured.spec import PARAM
from blink.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_tokenizer_dir)


def test_same_spec_compiles_once_and_the_cache_is_bounded(tokenizer: Tokenizer, engine: str) -> None:
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size + 64, sorted(tokenizer.eos_token_ids), capacity=2,
                         engine=engine)
    try:
        first = gc.get("regex", "a+")
        assert gc.get("regex", "a+") is first
        first.result()
        gc.get("regex", "b+")
        gc.get("regex", "c+")
        assert len(gc) == 2
        assert gc.get("regex", "a+") is not first  # evicted, compiled again
    finally:
        gc.close()


@pytest.mark.parametrize(("kind", "spec"), [("grammar", 'start ::= "a"'), ("regex", "((")])
def test_a_failed_compile_is_cached_as_failed(tokenizer: Tokenizer, engine: str, kind: str, spec: str) -> None:
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine=engine)
    try:
        fut = gc.get(kind, spec)
        with pytest.raises((RuntimeError, ValueError)):
            fut.result()
        assert gc.get(kind, spec) is fut
    finally:
        gc.close()


@pytest.mark.parametrize(("kind", "spec"), [
    ("json_schema", json.dumps({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})),
    ("regex", "[^\\s\\S]"),
    ("grammar", "root ::= root"),
])
def test_a_spec_with_no_output_is_refused_as_the_requests_fault(
        tokenizer: Tokenizer, engine: str, kind: str, spec: str) -> None:
    """Both libraries compile these; the first mask then allows nothing (the engine used to sample
    a refused token and fail the request as its own error)."""
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine=engine)
    try:
        with pytest.raises(InvalidParameterError, match="admits no output") as info:
            gc.get(kind, spec).result()
        assert info.value.param == PARAM
    finally:
        gc.close()


def test_an_allowed_first_token_must_also_be_accepted(tokenizer: Tokenizer) -> None:
    """llguidance's mask allows '{' for an object that must contain itself, then refuses it
    (xgrammar nests it until max_tokens, which is no error)."""
    schema = {"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}},
              "$ref": "#/$defs/a"}
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine="llguidance")
    try:
        with pytest.raises(InvalidParameterError, match="admits no output"):
            gc.get("json_schema", json.dumps(schema)).result()
    finally:
        gc.close()


def test_grammars_compile_with_xgrammar_whatever_the_setting(tokenizer: Tokenizer, engine: str) -> None:
    from blink.engine.structured.xgrammar_engine import XGrammarCompiled

    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine=engine)
    try:
        assert isinstance(gc.get("grammar", 'root ::= "a"').result(), XGrammarCompiled)
        assert isinstance(gc.get("regex", "a").result(), XGrammarCompiled) == (engine == "xgrammar")
    finally:
        gc.close()


def test_a_request_may_name_the_other_engine(tokenizer: Tokenizer, engine: str) -> None:
    from blink.engine.structured.llguidance_engine import LLGuidanceCompiled
    from blink.engine.structured.xgrammar_engine import XGrammarCompiled

    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine=engine)
    try:
        assert isinstance(gc.get("regex", "a", "xgrammar").result(), XGrammarCompiled)
        assert isinstance(gc.get("regex", "a", "llguidance").result(), LLGuidanceCompiled)
        assert len(gc) == 2  # one cache entry per (engine, spec)
    finally:
        gc.close()


def test_json_strings_never_allow_control_characters(tokenizer: Tokenizer, engine: str) -> None:
    """Inside a JSON string, with and without ``maxLength``: a raw control character there makes
    strict parsers (Python's, pydantic's) refuse the output."""
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine=engine)
    control = [t for t in range(tokenizer.vocab_size)
               if any(ord(c) < 0x20 for c in tokenizer.decode([t], skip_special_tokens=False))]
    assert control  # the tiny tokenizer has newline tokens
    try:
        for schema in ({"type": "string"}, {"type": "string", "maxLength": 8}):
            state = GrammarState(gc.get("json_schema", json.dumps(schema)).result(), gc.extra_mask("json_schema"))
            assert state.accept(tokenizer.encode('"', add_special_tokens=False)[0])
            bitmask = new_bitmask(1, tokenizer.vocab_size)
            state.fill(bitmask, 0)
            assert not any(int(bitmask[0, t // 32]) >> (t % 32) & 1 for t in control)
            assert int(bitmask[0, 0]) != 0 or bool(bitmask.any())  # letters are still allowed
    finally:
        gc.close()


def test_json_schemas_are_closed_on_both_engines(tokenizer: Tokenizer, engine: str) -> None:
    """No properties beyond the schema's, whether or not the client asked for strict."""
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine=engine)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    try:
        compiled = gc.get("json_schema", json.dumps(schema)).result()
        closed = GrammarState(compiled)
        assert all(closed.accept(t) for t in tokenizer.encode('{"a": 1', add_special_tokens=False))
        assert not closed.accept(tokenizer.encode(",", add_special_tokens=False)[0])
        assert closed.accept(tokenizer.encode("}", add_special_tokens=False)[0])
        free = GrammarState(gc.get("json_object", "").result())
        assert all(free.accept(t) for t in tokenizer.encode('{"b": [1, {"c": null}]}', add_special_tokens=False))
    finally:
        gc.close()


def test_xgrammar_json_kinds_forbid_tokens_with_control_characters(tokenizer: Tokenizer) -> None:
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids), engine="xgrammar")
    try:
        assert gc.extra_mask("regex") is None
        row = gc.extra_mask("json_schema")
        assert row is not None and gc.extra_mask("json_object") is row
        allowed = [bool(int(row[t // 32]) >> (t % 32) & 1) for t in range(tokenizer.vocab_size)]
        for t in range(tokenizer.vocab_size):
            text = tokenizer.decode([t], skip_special_tokens=False)
            if any(ord(c) < 0x20 for c in text):
                assert not allowed[t], repr(text)
        assert allowed[tokenizer.encode('{"', add_special_tokens=False)[0]]
        assert all(allowed[t] for t in tokenizer.eos_token_ids)
    finally:
        gc.close()
