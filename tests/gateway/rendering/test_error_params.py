"""Errors renamed to the client's fields, raised before the response or by its stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from blink.backends.base import Delta, GenerationRequest, SamplingOptions
from blink.gateway.rendering.error_params import renamed, renaming_params
from blink.gateway.responses.errors import responses_param
from blink.protocol.errors import InvalidRequestError


def test_the_message_quotes_the_clients_name_too() -> None:
    err = renamed(InvalidRequestError("'max_completion_tokens' is too large: 9.", param="max_completion_tokens"),
                  responses_param)
    assert (err.param, err.message, str(err)) == ("max_output_tokens", "'max_output_tokens' is too large: 9.",
                                                  "'max_output_tokens' is too large: 9.")
    assert renamed(InvalidRequestError("no field"), responses_param).param is None


async def test_an_error_out_of_the_stream_is_renamed_and_closing_reaches_the_backend() -> None:
    closed: list[bool] = []

    async def backend(req: GenerationRequest) -> AsyncIterator[Delta]:
        try:
            yield Delta(text="a")
            raise InvalidRequestError("too long", param="messages")
        finally:
            closed.append(True)

    req = GenerationRequest("r", "m", "chat", SamplingOptions(), messages=[])
    stream = renaming_params(responses_param)(backend)
    with pytest.raises(InvalidRequestError) as err:
        async for _ in stream(req):
            pass
    assert err.value.param == "input" and closed == [True]
    early = stream(req)
    await anext(early)
    await early.aclose()  # a client gone: the backend's stream is closed at once (the engine abort)
    assert closed == [True, True]
