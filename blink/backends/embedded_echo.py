"""What a choice's first delta carries about its prompt, on the embedded engine.

Completions' ``echo`` puts the prompt before each choice's text (and, with ``logprobs``, its
tokens' logprobs before the generated ones: lm-evaluation-harness scores log-likelihoods that
way); vLLM's chat ``echo`` puts the last message before the answer when it is the assistant's own
(``continue_final_message`` flows: the answer then reads whole); vLLM's ``prompt_logprobs`` and
``return_token_ids`` report the prompt beside the choice.
The engine computes the prompt's logprobs in the prefill (``engine/prompt_logprobs.py``) and sends
them once, with a choice's first output; this turns them into the seam's types.
"""

from __future__ import annotations

from blink.backends.base import Delta, GenerationRequest, PromptLogprob, SamplingOptions, TokenLogprob
from blink.engine.outputs import RequestOutput, TokenLogprobOut
from blink.engine.tokenizer import Tokenizer


def engine_prompt_logprobs(o: SamplingOptions, chat: bool = False) -> int | None:
    """What the prefill must compute: vLLM's ``prompt_logprobs``, and the echoed prompt's own
    logprobs when a completion's ``echo`` comes with ``logprobs`` (the larger top-k of the two; a
    chat's echo is the last message's text alone, as vLLM's)."""
    echoed = o.top_logprobs if o.echo and o.logprobs and not chat else None
    wanted = [k for k in (o.prompt_logprobs, echoed) if k is not None]
    return max(wanted) if wanted else None


def chat_echo(req: GenerationRequest) -> str:
    """The text a chat ``echo`` puts before each answer: the last message's, when it is the
    assistant's (vLLM: only a message of the answer's own role is continued), else nothing."""
    last = (req.messages or [{}])[-1]
    if last.get("role") != "assistant":
        return ""
    content = last.get("content")
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


class PromptPrefix:
    """Decorates the first delta of each choice of one request (choice index = prompt * n + i)."""

    def __init__(self, tokenizer: Tokenizer | None, req: GenerationRequest, prompts: list[list[int]], n: int) -> None:
        self._tok = tokenizer
        self._o = req.options
        self._prompts = prompts
        self._texts = req.prompts if req.prompts is not None else [req.prompt or ""]
        self._chat_echo = chat_echo(req) if req.kind == "chat" and req.options.echo else None
        self._n = n
        self._started: set[int] = set()
        # max_tokens 0 with echo: the one token the engine had to generate is not part of the answer.
        self._prompt_only = req.options.max_tokens == 0

    def apply(self, delta: Delta, out: RequestOutput) -> None:
        if self._prompt_only:
            delta.text, delta.token_ids, delta.logprobs = "", [], None
        if delta.index in self._started:
            return
        self._started.add(delta.index)
        o = self._o
        p = delta.index // self._n
        ids = self._prompts[p]
        # Always: streamed usage counts prompt tokens from it (continuous_usage_stats).
        delta.prompt_token_ids = ids
        entries = out.prompt_logprobs
        if o.prompt_logprobs is not None and entries is not None:
            delta.prompt_logprobs = self._prompt_logprobs(entries, o.prompt_logprobs)
        if self._chat_echo is not None:
            delta.text = self._chat_echo + delta.text
        elif o.echo:
            text = self._texts[p]
            delta.text = (text if isinstance(text, str) else self._decode(ids)) + delta.text
            if o.logprobs and entries is not None:
                delta.logprobs = self._echo_logprobs(ids, entries, o.top_logprobs) + (delta.logprobs or [])

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False) if self._tok else ""

    def _text(self, token_id: int) -> str:
        return self._tok.decode([token_id], skip_special_tokens=False) if self._tok else str(token_id)

    def _echo_logprobs(self, ids: list[int], entries: list[TokenLogprobOut | None], num_top: int) -> list[TokenLogprob]:
        """The prompt's tokens in the logprobs shape; the first has no logprob."""
        result: list[TokenLogprob] = []
        for token_id, e in zip(ids, entries, strict=True):
            text = self._text(token_id)
            top = [] if e is None else [(self._text(t), v) for t, v in (e.top or [])[:num_top]]
            result.append(TokenLogprob(token=text, logprob=None if e is None else e.logprob,
                                       bytes=list(text.encode()), top=top))
        return result

    def _prompt_logprobs(self, entries: list[TokenLogprobOut | None], num_top: int) -> list[PromptLogprob | None]:
        out: list[PromptLogprob | None] = [None]
        for e in entries[1:]:
            if e is None:
                out.append(None)
                continue
            top = [(t, self._text(t), v) for t, v in (e.top or [])[:num_top]]
            out.append(PromptLogprob(e.token_id, self._text(e.token_id), e.logprob, e.rank or 0, top))
        return out
