"""Raw body bytes -> a validated wire model, with OpenAI's error wording and ``param`` paths."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from blink.protocol.errors import InvalidRequestError

M = TypeVar("M", bound=BaseModel)


def require_json(content_type: str | None) -> None:
    """A POST JSON endpoint refuses a body declared as something else (a form post, text): 415.

    No ``Content-Type`` at all is read as JSON, as OpenAI's API does; ``application/json``,
    any ``+json`` type and parameters (``; charset=utf-8``) are fine.
    """
    if content_type is None or not content_type.strip():
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    raise InvalidRequestError(
        f"Unsupported Content-Type {media[:80]!r}: send the request body as JSON with "
        "'Content-Type: application/json'.",
        code="unsupported_media_type",
        status=415,
    )


def bounded_int(text: str | None, lo: int, hi: int) -> int | None:
    """``text`` as an integer when it is plain ASCII digits within ``[lo, hi]``, else None.

    ``str.isdigit`` alone is not a check: it is true of superscripts ('²') and other digits that
    ``int()`` refuses, and ``int()`` refuses strings over 4,300 digits; either escaped as a 500.
    The length test comes first so no oversized string is ever converted.
    """
    if text is None or not text.isascii() or not text.isdigit() or len(text) > len(str(hi)):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def parse_json_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise InvalidRequestError("The request body is empty; expected a JSON object.", code="invalid_json")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"We could not parse the JSON body of your request ({exc}). The body must be a JSON object.",
            code="invalid_json",
        ) from None
    if not isinstance(data, dict):
        raise InvalidRequestError(
            f"The request body must be a JSON object, not {type(data).__name__}.", code="invalid_json"
        )
    return data


def validate(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _to_blink_error(exc, model) from None


def _to_blink_error(exc: ValidationError, model: type[BaseModel]) -> InvalidRequestError:
    errors = exc.errors(include_url=False)
    # OpenAI reports unknown arguments before anything else.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    extra = err["type"] == "extra_forbidden"
    param = param_path(err["loc"], _field_names(model), unknown_last=extra)
    if extra:
        return InvalidRequestError(
            f"Unrecognized request argument supplied: {param}", param=param, code="unrecognized_argument"
        )
    if err["type"] == "missing":
        return InvalidRequestError(
            f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
        )
    msg = err["msg"].removeprefix("Value error, ")
    code = "invalid_type" if err["type"].endswith("_type") else "invalid_value"
    return InvalidRequestError(f"Invalid value for '{param}': {msg}.", param=param or None, code=code)


def param_path(loc: tuple[int | str, ...], fields: frozenset[str], unknown_last: bool = False) -> str:
    """``('messages', 0, 'content', 'str')`` -> ``messages[0].content`` (union tags dropped).

    ``unknown_last``: the last element is an unknown field's name (kept as is).
    """
    out = ""
    last = len(loc) - 1
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i == 0 or part in fields or (unknown_last and i == last):
            out += f".{part}" if out else part
        else:
            break
    return out


@functools.cache
def _field_names(model: type[BaseModel]) -> frozenset[str]:
    """Every field name in ``model`` and the models nested in it (to tell them from union tags)."""
    names: set[str] = set()
    _collect(model, names, set())
    return frozenset(names)


def _collect(model: type[BaseModel], names: set[str], seen: set[type]) -> None:
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        names.add(name)
        for sub in _nested_models(info.annotation):
            _collect(sub, names, seen)


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _nested_models(arg)
    return found
