"""The error a blocked input gets: 400 with ``code: content_filter`` (Azure OpenAI's convention)."""

from __future__ import annotations

from blink.protocol.errors import InvalidRequestError


class ContentFilteredError(InvalidRequestError):
    def __init__(self, categories: set[str]) -> None:
        names = ", ".join(sorted(categories)) or "policy"
        super().__init__(f"The request was blocked by the content filter ({names}).", param="messages",
                         code="content_filter")  # fmt: skip
