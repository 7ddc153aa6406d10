"""A ``GenerationRequest`` and the OpenAI-style JSON body it came from (or would have).

A client's body splits in two when the gateway maps it: the fields ``GenerationRequest`` models
(messages, prompt, the sampling options) become typed fields, and the rest (tools,
response_format, user, vendor extras) stays JSON in ``extra``. Retries, fallbacks, the cascade's
logprob probe and prompt compression edit only the typed fields; ``openai_body`` joins the two
halves again for whatever needs a body (an HTTP upstream, a precompute recipe), so an edit made
in one place reaches every consumer.

The structured-output fields (``response_format``, ``structured_outputs``, ``guided_*``) stay in
``extra`` although ``SamplingOptions.structured`` is derived from them: the typed form is the
engine's grammar, which cannot be written back as the field the client spelled, and nothing
edits it.
"""

from __future__ import annotations

from typing import Any, Literal

from blink.backends.base import GenerationRequest, SamplingOptions

# Body fields that the typed fields carry (``model``, ``messages`` / ``prompt``, SamplingOptions).
MODELLED_FIELDS = frozenset({
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
    "min_p", "seed", "stop", "stop_token_ids", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logprobs", "top_logprobs", "n", "min_tokens", "ignore_eos", "speculative", "logit_bias", "echo",
    "prompt_logprobs", "return_token_ids", "skip_special_tokens", "include_stop_str_in_output",
})
# SamplingOptions fields written under their own name (the others need a rule of their own below).
_SAME_NAME = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "presence_penalty",
              "frequency_penalty", "repetition_penalty", "n", "min_tokens", "ignore_eos", "speculative", "echo",
              "prompt_logprobs", "return_token_ids", "skip_special_tokens", "include_stop_str_in_output")
_DEFAULTS = SamplingOptions()


def split_body(body: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """(``extra``, ``sent_options``): the fields not modelled, and the modelled ones the client set.

    ``sent_options`` keeps a value the client gave equal to the default (``temperature: 1``)
    apart from one it left out, which an upstream fills with its own default (vLLM's come from
    the model's generation config), and keeps the client's spelling of the token budget.
    """
    extra = {k: v for k, v in body.items() if k not in MODELLED_FIELDS}
    sent = frozenset(k for k, v in body.items() if k in MODELLED_FIELDS and v is not None)
    return extra, sent


def request_from_body(request_id: str, model: str, kind: Literal["chat", "completion"], options: SamplingOptions,
                      body: dict[str, Any], **typed: Any) -> GenerationRequest:
    """The request ``body`` maps to: ``options`` and ``typed`` (messages / prompt, deadline, ...)
    are its typed fields, already read from ``body``; the rest of ``body`` becomes ``extra``."""
    extra, sent = split_body(body)
    return GenerationRequest(request_id=request_id, model=model, kind=kind, options=options, extra=extra,
                             sent_options=sent, **typed)


def openai_body(req: GenerationRequest) -> dict[str, Any]:
    """The request as an OpenAI chat / completions body: ``extra`` plus the typed fields.

    A typed option is written when the client set it or when its value is not the default (an edit,
    or a request built by hand); the others are left to the receiver's defaults.
    """
    o, sent = req.options, req.sent_options
    body = dict(req.extra)
    body["model"] = req.model
    if req.kind == "chat":
        body["messages"] = req.messages or []
    else:
        body["prompt"] = req.prompts if req.prompts is not None else (req.prompt if req.prompt is not None else "")
    for name in _SAME_NAME:
        value = getattr(o, name)
        if value != getattr(_DEFAULTS, name) or name in sent:
            if value is not None:
                body[name] = value
    if o.logit_bias or "logit_bias" in sent:
        body["logit_bias"] = {str(k): v for k, v in (o.logit_bias or {}).items()}
    if o.max_tokens is not None:
        key = "max_completion_tokens" if "max_completion_tokens" in sent else "max_tokens"
        body[key] = o.max_tokens
    if req.kind == "chat":
        if o.logprobs or "logprobs" in sent:
            body["logprobs"] = o.logprobs
        if o.top_logprobs or "top_logprobs" in sent:
            body["top_logprobs"] = o.top_logprobs
    elif o.logprobs:
        body["logprobs"] = o.top_logprobs
    return body
