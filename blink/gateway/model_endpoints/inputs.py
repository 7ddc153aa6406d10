"""Validation shared by the non-generative endpoints: OpenAI-style 400s, never a model error."""

from __future__ import annotations

from blink.modelserver.server import ServedModel
from blink.protocol.errors import InvalidRequestError


def input_list(value: str | list[str], max_inputs: int) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not texts:
        raise InvalidRequestError("'input' must not be an empty list.", param="input", code="invalid_value")
    if len(texts) > max_inputs:
        raise InvalidRequestError(f"'input' has {len(texts)} items; at most {max_inputs} are allowed.", param="input",
                                  code="too_many_inputs")  # fmt: skip
    for i, t in enumerate(texts):
        if not t.strip():
            where = "input" if isinstance(value, str) else f"input[{i}]"
            raise InvalidRequestError(f"'{where}' must not be empty.", param=where, code="invalid_value")
    return texts


def check_token_counts(model: ServedModel, counts: list[int]) -> list[int]:
    """Tokens per input (counted in the model's own pass); an input beyond the model's limit is
    refused rather than silently cut (its cut row was computed, never returned)."""
    limit = model.tokenizer.max_tokens
    for i, n in enumerate(counts):
        if n > limit:
            raise InvalidRequestError(
                f"Input {i} has {n} tokens; model '{model.name}' accepts at most {limit}.", param="input",
                code="context_length_exceeded",
            )  # fmt: skip
    return counts
