"""A request's messages or prompt -> the embedded engine's prompt token ids, off the event loop.

Rendering a chat template and tokenising cost time linear in the prompt (a 1 MiB prompt is about
half a second of CPU), and the gateway's event loop serves every other client meanwhile: both run
in a worker thread (``tokenizers`` releases the GIL while it encodes). A prompt whose byte length
alone proves it longer than the context is refused before it is tokenised at all.
"""

from __future__ import annotations

import asyncio
import threading

from blink.backends.base import GenerationRequest
from blink.backends.chat_messages import ChatInputs
from blink.engine.errors import EngineError, InvalidParameterError
from blink.engine.tokenizer import Tokenizer
from blink.protocol.errors import BackendUnavailableError, ContextLengthExceededError, InvalidRequestError


class PromptEncoder:
    """Encodes prompts for one loaded tokenizer and context length."""

    def __init__(self, tokenizer: Tokenizer, max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self._lock = threading.Lock()
        self._bound_known = False
        self._bytes_per_token: float | None = None

    async def encode(self, req: GenerationRequest, chat: ChatInputs | None = None) -> list[int]:
        """Token ids for ``req``; ``BlinkError`` (400 / 503) when it cannot be encoded or is too long.

        ``chat``: what the template renders for a chat request (its messages as they came when None).
        """
        if req.kind != "chat" and isinstance(req.prompt, list):
            return list(req.prompt)
        return await asyncio.to_thread(self._encode, req, req.prompt, None, chat)

    async def encode_unbounded(self, req: GenerationRequest, chat: ChatInputs | None = None) -> list[int]:
        """Token ids for a chat ``req`` however long they are: for counting (``/tokenize``), where a
        prompt over the context is an answer, not an error; the body limit bounds the work."""
        return await asyncio.to_thread(self._encode, req, req.prompt, None, chat, False)

    async def encode_all(self, req: GenerationRequest, chat: ChatInputs | None = None) -> list[list[int]]:
        """Token ids of every prompt of a batched completion (of the one prompt otherwise)."""
        if req.prompts is None:
            return [await self.encode(req, chat)]
        if all(isinstance(p, list) for p in req.prompts):
            return [list(p) for p in req.prompts]  # type: ignore[arg-type]  # checked: token lists
        return await asyncio.to_thread(lambda: [self._encode(req, p, i) for i, p in enumerate(req.prompts or [])])

    def _encode(self, req: GenerationRequest, prompt: str | list[int] | None, index: int | None = None,
                chat: ChatInputs | None = None, bounded: bool = True) -> list[int]:
        param = "messages" if req.kind == "chat" else "prompt" if index is None else f"prompt[{index}]"
        try:
            if req.kind == "chat":
                chat = chat or ChatInputs(req.messages or [])
                # As vLLM: chat_template_kwargs override the request's own template switches.
                rendered = self.tokenizer.render_chat_prompt(chat.messages, tools=chat.tools,
                                                             **{**_template_switches(req), **chat.template_kwargs})
                if bounded:
                    self._refuse_if_certainly_too_long(rendered.text, param)
                return self.tokenizer.encode_chat(rendered)
            if isinstance(prompt, list):
                return list(prompt)
            text = prompt if isinstance(prompt, str) else ""
            self._refuse_if_certainly_too_long(text, param)
            return self.tokenizer.encode(text, add_special_tokens=True)
        except ContextLengthExceededError:
            raise
        except InvalidParameterError as exc:
            raise InvalidRequestError(str(exc), param=exc.param or param) from exc
        except EngineError as exc:
            raise BackendUnavailableError(str(exc)) from exc
        except Exception as exc:  # a chat template that rejects the conversation
            raise InvalidRequestError(f"The messages could not be formatted for this model: {exc}",
                                      param=param) from exc

    def _refuse_if_certainly_too_long(self, text: str, param: str) -> None:
        """Raise when ``text`` needs at least ``max_model_len`` tokens whatever the tokenizer does.

        A text of ``b`` bytes needs at least ``b / bytes_per_token`` tokens. Texts of at most
        ``max_model_len`` characters are left to the tokenizer: they are cheap to encode, and
        they never pay for computing the bound.
        """
        limit = self.max_model_len
        if len(text) <= limit:  # characters <= bytes: cheap pre-filter, no encoding
            return
        size = len(text.encode())
        bound = self._bound()
        if bound is None or size <= bound * limit:
            return
        raise ContextLengthExceededError(
            f"This model's maximum context length is {limit} tokens; the prompt is {size} bytes, "
            f"so it needs at least {int(size // bound)} tokens.",
            param=param,
        )

    def _bound(self) -> float | None:
        with self._lock:
            if not self._bound_known:
                self._bytes_per_token = self.tokenizer.max_bytes_per_token()
                self._bound_known = True
            return self._bytes_per_token


def _template_switches(req: GenerationRequest) -> dict[str, bool]:
    """vLLM's ``add_generation_prompt`` / ``continue_final_message`` (validated by the protocol);
    the latter only when set, so templates of older tokenizers never see an unknown argument."""
    switches = {"add_generation_prompt": bool(req.extra.get("add_generation_prompt", True))}
    if req.extra.get("continue_final_message"):
        switches["continue_final_message"] = True
    return switches
