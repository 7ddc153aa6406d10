"""``POST /tokenize`` and ``POST /detokenize`` request bodies (vLLM's tokenizer endpoints).

Clients built for vLLM (prompt budgeting, guidellm-style load generators, vLLM's own tests) ask
the server for the token ids a prompt or a conversation becomes, so they count with the served
model's tokenizer and chat template rather than a guess. A body with ``messages`` is the chat
form, one with ``prompt`` the completions form; the top level is strict, so an unknown field is a
400 naming it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from blink.protocol.chat import ChatMessage
from blink.protocol.common import StrictModel


class _TokenizeFields(StrictModel):
    model: StrictStr | None = None
    # vLLM's name: also return each id's vocabulary entry (``'Ġhello'``), not its text.
    return_token_strs: StrictBool = False


class TokenizeCompletionRequest(_TokenizeFields):
    prompt: StrictStr
    # As vLLM and ``/v1/completions``: a completions prompt gets the tokenizer's BOS / EOS framing.
    add_special_tokens: StrictBool = True


class TokenizeChatRequest(_TokenizeFields):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    # The chat template places the special tokens itself: vLLM adds none by default.
    add_special_tokens: StrictBool = False

    @model_validator(mode="after")
    def _one_ending(self) -> TokenizeChatRequest:
        if self.add_generation_prompt and self.continue_final_message:
            raise ValueError("'continue_final_message' and 'add_generation_prompt' cannot both be true")
        return self


class DetokenizeRequest(StrictModel):
    model: StrictStr | None = None
    tokens: list[StrictInt] = Field(min_length=1)
