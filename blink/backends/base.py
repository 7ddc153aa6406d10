"""The one seam between callers (gateway, voice) and models.

Two things live on this seam, kept apart on purpose:

- a ``ModelServer`` is a model's lifecycle: it starts, reports health and engine gauges, streams,
  and closes. The embedded engine, an OpenAI-compatible upstream and a routed pool are servers.
- a ``StreamFn`` is one request's stream. Per-request behaviour (the semantic cache's head start,
  the safety guard, prompt compression, the voice socket's trip through the gateway) is
  ``StreamMiddleware``: a function from the stream it wraps to a new one. A middleware has no
  health or load of its own to fake; what a response needs besides the stream is its name
  (``StreamSource``).

The request and the deltas are plain dataclasses so the gateway never sees engine or HTTP-client
types.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """Grammar-constrained output: the engine may only produce text this spec accepts.

    ``spec``: the JSON schema's JSON text (``json_schema``), a regex, a JSON list of choices, an
    EBNF grammar (xgrammar's dialect), or ``""`` for any JSON object (``json_object``). ``param``
    is the request field that carried it, named by the 400 when the spec is invalid.
    """

    kind: Literal["json_object", "json_schema", "regex", "choice", "grammar"]
    spec: str
    param: str = "response_format"


@dataclass(slots=True)
class SamplingOptions:
    """Sampling knobs as the OpenAI API (plus vLLM's widely used extras) names them."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: bool = False
    top_logprobs: int = 0
    n: int = 1
    min_tokens: int = 0
    ignore_eos: bool = False
    speculative: bool = True
    # Constrain the output (response_format, vLLM's structured_outputs / guided_*, forced tool
    # calls). Backends that cannot honour it refuse the request; openai_http upstreams get the
    # original fields, which stay in ``GenerationRequest.extra``.
    structured: StructuredOutput | None = None
    # Token id -> bias added to its logit before sampling (OpenAI's ``logit_bias``).
    logit_bias: dict[int, float] | None = None
    # Completions: each choice's text (and logprobs, when asked) starts with the prompt's.
    echo: bool = False
    # vLLM's ``prompt_logprobs``: top logprobs per prompt token (0 = the token's own); None = off.
    prompt_logprobs: int | None = None
    # vLLM's ``return_token_ids``: the response carries prompt and output token ids.
    return_token_ids: bool = False
    # vLLM's detokenisation switches.
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False


@dataclass(slots=True)
class GenerationRequest:
    """What a caller asks a backend for: a chat (``messages``) or a completion (``prompt``)."""

    request_id: str
    model: str
    kind: Literal["chat", "completion"]
    options: SamplingOptions
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    # A batched completion (several prompts): all of them, ``prompt`` being the first. Choice
    # ``i`` of prompt ``p`` has index ``p * n + i`` (OpenAI's and vLLM's numbering).
    prompts: list[str | list[int]] | None = None
    # The client's body fields that no typed field carries (tools, response_format, user, vendor
    # extras), as sent; ``request_body.openai_body`` joins them with the typed fields again.
    extra: dict[str, Any] = field(default_factory=dict)
    # The modelled fields the client set (``request_body.split_body``): an upstream gets those even
    # at their default value, and the token budget under the client's name for it.
    sent_options: frozenset[str] = frozenset()
    # Absolute deadline (time.monotonic()) or None.
    deadline: float | None = None
    # Routing hints from the client's headers (``x-blink-latency-budget-ms``, ``x-blink-priority``,
    # ``x-blink-tier``): read by routed backends, ignored by the others.
    latency_budget_ms: float | None = None
    priority: str | None = None
    tier: str | None = None
    # The prompt's sentence embedding (a 1-D numpy array) when the semantic cache computed one:
    # the routing classifier reuses it instead of embedding the prompt again.
    embedding: Any = None
    # Prompt tokens (the scorer's count) that prompt compression removed before the upstream call:
    # reported as ``x-blink-compressed-tokens`` and counted as a saving by cost accounting.
    compressed_tokens: int = 0
    # The API the client spoke when it was not chat or completions (``"messages"``: Anthropic's;
    # ``"responses"``: OpenAI's Responses API) and its body for that API: an upstream configured to
    # serve it natively (``native_apis``) gets that body; every other backend reads the chat
    # translation in ``messages`` / ``extra``.
    native_api: str | None = None
    native_body: dict[str, Any] | None = None
    # Whose prefix-cache entries the request may share (its tenant; set by the generation pipeline
    # when API keys are on and ``prefix_cache_scope`` is "tenant"); None: the server-wide scope.
    # The embedded engine salts its prefix cache with it and the client's ``cache_salt``.
    cache_scope: str | None = None

    def prefix_cache_salt(self) -> str | None:
        """The engine's prefix-cache salt: the scope and the client's ``cache_salt`` (vLLM's), or None."""
        client = self.extra.get("cache_salt")
        if self.cache_scope is None and client is None:
            return None
        return json.dumps([self.cache_scope, client])

    @property
    def num_choices(self) -> int:
        """Choices in the response: ``n`` for each prompt (engine sequences, for quotas)."""
        return max(1, self.options.n) * (len(self.prompts) if self.prompts else 1)


@dataclass(slots=True)
class TokenLogprob:
    token: str
    # None for an echoed prompt's first token: nothing predicts it.
    logprob: float | None
    bytes: list[int] | None = None
    top: list[tuple[str, float]] = field(default_factory=list)
    # Each ``top`` entry's bytes, in order; None: the UTF-8 of its text.
    top_bytes: list[list[int]] | None = None


@dataclass(slots=True)
class PromptLogprob:
    """One prompt token's log-probability given the tokens before it (vLLM's ``prompt_logprobs``)."""

    token_id: int
    token: str
    logprob: float
    # 1 + the number of more likely tokens.
    rank: int
    # The most likely tokens at this position: (token id, text, logprob), best first.
    top: list[tuple[int, str, float]] = field(default_factory=list)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Delta:
    """One increment of one choice: new text (possibly empty), why it ended, usage at the end."""

    index: int = 0
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    # With ``finish_reason`` "stop": the stop string that ended the choice (vLLM's ``stop_reason``),
    # None when the model ended it itself. Anthropic's ``stop_sequence`` reports it.
    stop_reason: str | None = None
    # Set on the last delta of the whole request (after every choice finished).
    usage: Usage | None = None
    # OpenAI-shaped tool-call fragments: passed through from upstreams, or parsed from the embedded
    # engine's output (blink/backends/embedded_tools.py).
    tool_calls: list[dict[str, Any]] | None = None
    # On a choice's first delta, when asked: its prompt's logprobs (the first entry None) and
    # its prompt's token ids (``return_token_ids``).
    prompt_logprobs: list[PromptLogprob | None] | None = None
    prompt_token_ids: list[int] | None = None
    # On the request's first delta, when the backend counted it (the embedded engine): every
    # prompt's tokens, as ``usage.prompt_tokens`` will say. ``usage`` comes only at the end, and a
    # response cut short before it is still charged its prompt (token limits, spend).
    prompt_tokens: int | None = None
    # The next delta of this stream is already in memory (same upstream read): a writer may hold
    # this one and send both in one write. Never set when the next one still needs I/O.
    more: bool = False


@dataclass(slots=True)
class Health:
    """``ok``: may requests go to this backend now (``/ready``)."""

    ok: bool
    detail: str = ""


@dataclass(slots=True)
class Load:
    """A server's own gauges: queue depth, KV usage, batch and speculation figures.

    Latency is not here: the router measures every replica's TTFT itself, with one estimator
    (``PeakEwma`` in blink/gateway/router/balancer.py), so replicas of every kind compare on one
    scale.
    """

    running: int = 0
    waiting: int = 0
    kv_usage: float | None = None
    prefix_cache_hit_rate: float | None = None
    # Sequences in the last engine step, and the speculative-decoding acceptance rate (None
    # while speculation is off): exported as gauges at scrape time (blink/obs/engine_collector.py).
    batch_size: int | None = None
    spec_acceptance_rate: float | None = None
    # Mean tokens emitted per verifying sequence-step (1 + accepted proposals).
    spec_tokens_per_step: float | None = None
    # Per priority class ("voice", "interactive", "batch"): queue depth and running requests now,
    # and (cumulative, for rate()) requests admitted and their summed queue wait in seconds.
    waiting_by_class: dict[str, int] | None = None
    running_by_class: dict[str, int] | None = None
    admitted_by_class: dict[str, int] | None = None
    queue_wait_s_by_class: dict[str, float] | None = None


@dataclass(slots=True)
class ModelCard:
    id: str
    owned_by: str = "blink"
    max_model_len: int | None = None


StreamFn = Callable[[GenerationRequest], AsyncIterator[Delta]]
"""One request's deltas. Raise ``BlinkError`` before the first delta for request errors (context
length, bad params). Closing the iterator early (client disconnect) must abort the generation and
release its resources."""

StreamMiddleware = Callable[[StreamFn], StreamFn]
"""Per-request behaviour around a stream: takes the stream it wraps, returns the wrapped one."""


@runtime_checkable
class StreamSource(Protocol):
    """What a response streams from: a stream and the name it reports (``x-blink-backend``).

    Every ``ModelServer`` is one; so is a server's stream with middleware around it (``Source``).
    """

    name: str

    def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]: ...


@dataclass(frozen=True, slots=True)
class Source:
    """A named stream function: a server's stream after per-request middleware."""

    name: str
    stream: StreamFn


def with_middleware(source: StreamSource, *middleware: StreamMiddleware) -> Source:
    """``source``'s stream inside ``middleware`` (the first listed is the outermost)."""
    fn: StreamFn = source.stream
    for mw in reversed(middleware):
        fn = mw(fn)
    return Source(source.name, fn)


@runtime_checkable
class ModelServer(Protocol):
    """A model server's lifecycle: the embedded engine, an OpenAI-compatible upstream, a pool."""

    name: str

    def models(self) -> list[ModelCard]:
        """Model ids this server serves."""
        ...

    def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        """Yield deltas as they are produced (the contract of ``StreamFn``)."""
        ...

    async def health(self) -> Health: ...

    def load(self) -> Load:
        """The server's own gauges (engine queue, KV usage); never latency, which routing measures."""
        ...

    async def start(self) -> None:
        """Start background resources (processes, connection pools); idempotent."""
        ...

    async def aclose(self) -> None: ...


# The name most of the tree knows a model server by (registries, tiers, replicas).
Backend = ModelServer


@runtime_checkable
class Supervised(Protocol):
    """A backend that restarts what it runs (the embedded engine core) and knows when to give up.

    ``live()`` answers ``/health`` without I/O: False once restarts keep failing, so a liveness
    probe replaces the process. Backends without it count as live: an unreachable upstream is a
    readiness matter, never a reason to restart the gateway.
    """

    def live(self) -> bool: ...


@runtime_checkable
class TokenCounter(Protocol):
    """A backend that can count a request's prompt tokens without generating (Anthropic's
    ``count_tokens``): the embedded engine, which holds the tokenizer and chat template."""

    async def count_tokens(self, req: GenerationRequest) -> int: ...


@dataclass(frozen=True, slots=True)
class Tokenized:
    """A prompt's token ids as the model would read them, with their vocabulary entries when asked."""

    ids: list[int]
    pieces: list[str] | None
    max_model_len: int


@runtime_checkable
class Tokenization(Protocol):
    """A backend that holds its model's tokenizer and chat template (vLLM's ``/tokenize`` and
    ``/detokenize``): the embedded engine. ``InvalidRequestError`` names the field at fault."""

    async def tokenize(self, req: GenerationRequest, add_special_tokens: bool, pieces: bool) -> Tokenized: ...

    async def detokenize(self, ids: list[int]) -> str: ...
