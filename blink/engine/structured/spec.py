"""What a constrained request may ask for, and the checks that refuse a bad one early.

A spec is ``(kind, text)``: the JSON schema's JSON text, a regex, a JSON list of choices, an EBNF
grammar (xgrammar's dialect, GBNF-like), or ``""`` for any JSON object. ``check_spec`` only parses
(no vocabulary needed), so the frontend can answer 400 before the request reaches the engine core;
the core compiles the same text with the same grammar engine (``grammar_engine``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from blink.engine.errors import InvalidParameterError
from blink.engine.structured.grammar_engine import DEFAULT_ENGINE, engine_for_kind, grammar_engine
from blink.request_limits import SAMPLING_LIMITS

KINDS = ("json_object", "json_schema", "regex", "choice", "grammar")
# The InvalidParameterError ``param`` of a bad spec; the backend renames it to the request field
# that carried the spec (``response_format``, ``guided_json``, ``tools``...).
PARAM = "structured"
# A random or small model under a JSON grammar that allows free whitespace can emit whitespace
# until max_tokens and never close the document; compact separators leave it no such loop.
SEPARATORS = (", ", ": ")
# xgrammar's C++ errors start with "[hh:mm:ss] /path/file.cc:123: " and may add "Check failed...".
_NATIVE_PREFIX = re.compile(r"^\[[0-9:]+\]\s+\S+:\d+:\s*(Check failed: \(.*?\) is false:\s*)?")


def check_spec(kind: str, spec: str, engine: str = DEFAULT_ENGINE) -> None:
    """Raise ``InvalidParameterError(param=PARAM)`` unless ``spec`` is a valid ``kind`` spec for
    the grammar engine that will compile it (``engine``, the setting; see ``engine_for_kind``)."""
    check_shape(kind, spec)
    if kind == "json_object":
        return
    try:
        grammar_engine(engine_for_kind(engine, kind)).check(kind, spec)
    except (RuntimeError, ValueError) as exc:
        raise InvalidParameterError(f"Invalid {_NAMES[kind]}: {native_message(exc)}", param=PARAM) from exc


def check_shape(kind: str, spec: str) -> None:
    """The model-free, grammar-engine-free checks: kind, size, JSON well-formedness and depth."""
    limits = SAMPLING_LIMITS
    if kind not in KINDS:
        raise InvalidParameterError(f"Unknown structured output kind {kind!r}.", param=PARAM)
    if not isinstance(spec, str):
        raise InvalidParameterError("A structured output spec must be text.", param=PARAM)
    if len(spec) > limits.max_structured_spec_chars:
        raise InvalidParameterError(
            f"The {_NAMES[kind]} is {len(spec)} characters long; at most "
            f"{limits.max_structured_spec_chars} are accepted.",
            param=PARAM,
        )
    if kind in ("json_schema", "choice"):
        doc = _load_json(kind, spec)
        if json_depth(doc) > limits.max_structured_depth:
            raise InvalidParameterError(
                f"The {_NAMES[kind]} nests deeper than {limits.max_structured_depth} levels.", param=PARAM
            )
        if kind == "json_schema" and not isinstance(doc, dict | bool):
            raise InvalidParameterError("A JSON schema must be a JSON object.", param=PARAM)
        if kind == "choice" and (not isinstance(doc, list) or not doc or not all(isinstance(c, str) for c in doc)):
            raise InvalidParameterError("'choice' must be a non-empty list of strings.", param=PARAM)
    elif not spec and kind != "json_object":
        raise InvalidParameterError(f"The {_NAMES[kind]} is empty.", param=PARAM)


def ebnf_source(kind: str, spec: str) -> str:
    """A choice list becomes ``root ::= "a" | "b"``; a grammar is used as written."""
    if kind != "choice":
        return spec
    return "root ::= " + " | ".join(_ebnf_literal(c) for c in json.loads(spec))


def native_message(exc: BaseException) -> str:
    """The grammar engine's message without its timestamp, source path and line (never leaked)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return _NATIVE_PREFIX.sub("", first).strip() or "rejected by the grammar engine"


def json_depth(doc: Any) -> int:
    """Deepest nesting of lists and objects in a parsed JSON document (iterative: no recursion limit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def _load_json(kind: str, spec: str) -> Any:
    try:
        return json.loads(spec)
    except RecursionError as exc:
        raise InvalidParameterError(
            f"The {_NAMES[kind]} nests deeper than {SAMPLING_LIMITS.max_structured_depth} levels.", param=PARAM
        ) from exc
    except ValueError as exc:
        raise InvalidParameterError(f"The {_NAMES[kind]} is not valid JSON: {exc}", param=PARAM) from exc


def _ebnf_literal(text: str) -> str:
    """A double-quoted EBNF string: JSON's escapes (\\", \\\\, \\n, \\uXXXX) are xgrammar's too."""
    return json.dumps(text, ensure_ascii=True)


_NAMES = {
    "json_object": "JSON object format",
    "json_schema": "JSON schema",
    "regex": "regular expression",
    "choice": "choice list",
    "grammar": "grammar",
}
