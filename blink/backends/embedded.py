"""The embedded engine as a ``Backend``: the only module outside the engine that imports it.

Maps ``GenerationRequest`` to engine requests (chat template, sampling parameters, n
choices) and engine outputs back to ``Delta``s; engine errors become ``BlinkError``s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from blink.backends.base import (
    Delta,
    GenerationRequest,
    Health,
    Load,
    ModelCard,
    SamplingOptions,
    Tokenized,
    TokenLogprob,
    Usage,
)
from blink.backends.embedded_echo import PromptPrefix, engine_prompt_logprobs
from blink.backends.embedded_fields import grammar_engine_of, refuse_unsupported
from blink.backends.embedded_prompt import PromptEncoder
from blink.backends.embedded_tools import prepare_tools, template_inputs
from blink.backends.engine_supervisor import EngineSupervisor
from blink.backends.tool_parsers import ParserName, detect_parser
from blink.backends.tool_prompt import renders_tools
from blink.config.models import EmbeddedModel, ToolParserSetting
from blink.config.supervision import SupervisionSettings
from blink.demo.default_model import FallbackModel
from blink.engine.async_engine import AsyncEngine, default_threads
from blink.engine.config import EngineConfig
from blink.engine.cpu_features import read_cpu_features
from blink.engine.errors import (
    EngineDeadError,
    EngineError,
    InvalidParameterError,
    ModelNotAvailableError,
    PromptTooLongError,
    RequestFailedError,
)
from blink.engine.fast_defaults import ServingChoice, choose_serving_config
from blink.engine.outputs import RequestOutput
from blink.engine.sampling_params import PRIORITY_RANK, SamplingParams
from blink.engine.structured.spec import PARAM as STRUCTURED_PARAM
from blink.protocol.errors import (
    BackendUnavailableError,
    BlinkError,
    ContextLengthExceededError,
    InternalServerError,
    InvalidRequestError,
)
from blink.request_limits import wrap_seed

log = logging.getLogger("blink.backends.embedded")


class EmbeddedBackend:
    """One model served by Blink's own engine in a separate engine-core process."""

    def __init__(
        self,
        name: str,
        config: EngineConfig,
        *,
        fallback_model: Callable[[], FallbackModel] | None = None,
        supervision: SupervisionSettings | None = None,
        tool_parser: ToolParserSetting = "auto",
    ) -> None:
        self.name = name
        # How tool calls are read from this model's output ("auto": from its chat template).
        self.tool_parser_setting = tool_parser
        self.engine = AsyncEngine(config)
        self.supervisor = EngineSupervisor(self.engine, supervision or SupervisionSettings(), name)
        self._fallback_model = fallback_model
        self._encoder: PromptEncoder | None = None
        self.is_demo_model = False

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.engine.start()
        except ModelNotAvailableError as exc:
            if self._fallback_model is None:
                raise
            loop = asyncio.get_running_loop()
            fallback = await loop.run_in_executor(None, self._fallback_model)
            log.debug("model %s is not available (%s); serving %s", self.engine.config.model, exc, fallback.path)
            print(f"blink: {self.engine.config.model!r} cannot be downloaded and is not cached; "
                  f"{fallback.note}.", flush=True)
            self.engine.config.model = str(fallback.path)
            self.is_demo_model = fallback.is_demo
            await self.engine.start()
        self.supervisor.start()

    async def aclose(self) -> None:
        await self.supervisor.stop()
        await self.engine.shutdown()

    def models(self) -> list[ModelCard]:
        limits = self.engine.limits
        return [ModelCard(id=self.name, owned_by="blink-demo" if self.is_demo_model else "blink",
                          max_model_len=limits.max_model_len if limits else None)]

    async def health(self) -> Health:
        detail = self.supervisor.detail()
        if self.supervisor.ready():
            return Health(ok=True, detail=detail or ("demo model" if self.is_demo_model else ""))
        return Health(ok=False, detail=detail or "engine not running")

    def live(self) -> bool:
        """``/health``: False once engine restarts keep failing (see ``EngineSupervisor``)."""
        return self.supervisor.live()

    def load(self) -> Load:
        st = self.engine.stats
        return Load(
            running=st.num_running,
            waiting=st.num_waiting,
            kv_usage=st.kv_usage,
            prefix_cache_hit_rate=st.prefix_cache_hit_rate,
            batch_size=st.batch_size,
            # Nothing proposed yet (speculation off): report no rate rather than a misleading 0.
            spec_acceptance_rate=st.spec_acceptance_rate if st.spec_proposed_tokens else None,
            spec_tokens_per_step=st.spec_tokens_per_step if st.spec_proposed_tokens else None,
            waiting_by_class=_by_class(st.waiting_by_class),
            running_by_class=_by_class(st.running_by_class),
            admitted_by_class=_by_class(st.admitted_by_class),
            queue_wait_s_by_class=_by_class(st.queue_wait_s_by_class),
        )

    # -- generation -------------------------------------------------------------------------

    def _prompt_encoder(self) -> PromptEncoder:
        """The encoder for the engine's current tokenizer (a restarted engine brings a new one)."""
        tok, limits = self.engine.tokenizer, self.engine.limits
        if tok is None or limits is None:
            raise BackendUnavailableError("engine is not running")
        if self._encoder is None or self._encoder.tokenizer is not tok:
            self._encoder = PromptEncoder(tok, limits.max_model_len)
        return self._encoder

    def tool_parser(self) -> ParserName | None:
        """The call format this model writes: the setting, or what its chat template shows (Hermes
        when the template cannot render tools: Blink writes them in that format, tool_prompt.py)."""
        setting = self.tool_parser_setting
        if setting == "none":
            return None
        if setting != "auto":
            return setting
        template = self._chat_template()
        return detect_parser(template) or (None if renders_tools(template) else "hermes")

    def _inlines_tools(self) -> bool:
        """Whether tools and call history go into the messages, the template being unable to render them."""
        template = self._chat_template()
        return template is not None and not renders_tools(template)

    def _chat_template(self) -> str | None:
        tok = self.engine.tokenizer
        template = getattr(tok.hf, "chat_template", None) if tok is not None else None
        if isinstance(template, dict):  # named templates ("default", "tool_use", ...)
            template = "\n".join(str(t) for t in template.values())
        return template if isinstance(template, str) else None

    def _choice_slots(self, n: int) -> asyncio.Semaphore | None:
        """How many of one request's ``n`` choices may run in the engine at once (None: all).

        Each choice is one engine sequence; one request may hold at most its share of the
        engine's ``max_num_seqs``, so an n=128 request cannot starve everyone else. Its other
        choices start as earlier ones finish.
        """
        cfg = self.engine.config
        slots = max(1, int(cfg.max_num_seqs * cfg.max_seqs_per_request_share))
        return asyncio.Semaphore(slots) if n > slots else None

    def _params(self, o: SamplingOptions, prompt_len: int, index: int, priority: str | None = None,
                cache_salt: str | None = None, chat: bool = False) -> SamplingParams:
        limits = self.engine.limits
        # max_tokens 0 (echo only): the engine runs one step, whose token PromptPrefix drops.
        max_tokens = 1 if o.max_tokens == 0 else o.max_tokens
        if max_tokens is None and limits is not None:
            max_tokens = max(1, limits.max_model_len - prompt_len)
        # Choice i draws from seed + i, folded back into int64 so a seed near the top stays valid.
        seed = None if o.seed is None else wrap_seed(o.seed + index)
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=o.temperature,
            top_p=o.top_p,
            top_k=o.top_k,
            min_p=o.min_p,
            seed=seed,
            stop=list(o.stop),
            stop_token_ids=list(o.stop_token_ids),
            presence_penalty=o.presence_penalty,
            frequency_penalty=o.frequency_penalty,
            repetition_penalty=o.repetition_penalty,
            logprobs=o.top_logprobs if o.logprobs else None,
            min_tokens=o.min_tokens,
            ignore_eos=o.ignore_eos,
            skip_special_tokens=o.skip_special_tokens,
            include_stop_str_in_output=o.include_stop_str_in_output,
            speculative=o.speculative,
            priority=_engine_priority(priority),
            logit_bias=dict(o.logit_bias) if o.logit_bias else None,
            prompt_logprobs=engine_prompt_logprobs(o, chat),
            structured=None if o.structured is None else (o.structured.kind, o.structured.spec),
            cache_salt=cache_salt,
        )

    async def count_tokens(self, req: GenerationRequest) -> int:
        """The prompt's token count as ``stream`` would encode it (template, tools), generating nothing."""
        await self.supervisor.wait_running()
        return len(await self._prompt_encoder().encode(req, template_inputs(req, self._inlines_tools())))

    async def tokenize(self, req: GenerationRequest, add_special_tokens: bool, pieces: bool) -> Tokenized:
        """The ids ``stream`` would feed the engine for ``req`` (chat: template, tools and the
        control-token guard included), framed with the tokenizer's special tokens when asked."""
        await self.supervisor.wait_running()
        encoder = self._prompt_encoder()
        tok = encoder.tokenizer
        if req.kind == "chat":
            ids = await encoder.encode_unbounded(req, template_inputs(req, self._inlines_tools()))
            if add_special_tokens:
                ids = tok.frame_special(ids)
        else:
            ids = await asyncio.to_thread(tok.encode, str(req.prompt or ""), add_special_tokens)
        strings = [tok.id_to_token(i) or "" for i in ids] if pieces else None
        return Tokenized(ids, strings, encoder.max_model_len)

    async def detokenize(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens kept (vLLM's ``/detokenize``); an id outside the
        vocabulary is a 400 naming it."""
        await self.supervisor.wait_running()
        tok = self._prompt_encoder().tokenizer
        for i, token_id in enumerate(ids):
            if not 0 <= token_id < tok.vocab_size:
                raise InvalidRequestError(
                    f"Token id {token_id} is outside this model's vocabulary (0 to {tok.vocab_size - 1}).",
                    param=f"tokens[{i}]", code="invalid_value")
        return await asyncio.to_thread(tok.decode, ids, False)

    async def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        await self.supervisor.wait_running()  # mid-restart: wait (bounded) rather than fail
        refuse_unsupported(req)
        setup = prepare_tools(req, self.tool_parser, self._inlines_tools())
        prompts = await self._prompt_encoder().encode_all(req, setup.chat)
        n = max(1, req.options.n)
        # One engine sequence per (prompt, choice); its response index is prompt * n + choice.
        salt = req.prefix_cache_salt()
        chat = req.kind == "chat"
        jobs = [(p * n + i, prompt, self._params(setup.options, len(prompt), i, req.priority, salt, chat))
                for p, prompt in enumerate(prompts) for i in range(n)]
        for k, (_, _, params) in enumerate(jobs):
            # One stream is a user's fair share of their class; the request's other sequences are
            # bulk work, served in the batch lane while other requests' urgent work waits.
            params.group = req.request_id if len(jobs) > 1 else None
            params.bulk = k > 0
        if setup.keep_special_tokens:
            for _, _, params in jobs:
                params.skip_special_tokens = False  # the call marker is a special token
        grammar_engine = grammar_engine_of(req)
        for _, _, params in jobs:
            params.structured_engine = grammar_engine
        tools = setup.calls
        structured = setup.options.structured
        checking = 0  # the job being checked: its prompt is the one an error is about
        try:
            for index, prompt, params in jobs:
                checking = index
                self.engine.check(prompt, params)
            if structured is not None:
                await self.engine.check_structured(structured.kind, structured.spec, grammar_engine)
        except PromptTooLongError as exc:
            raise ContextLengthExceededError(str(exc), param=_client_param(req, exc.param, checking // n)) from exc
        except InvalidParameterError as exc:
            param = structured.param if structured is not None and exc.param == STRUCTURED_PARAM else exc.param
            raise InvalidRequestError(str(exc), param=_client_param(req, param, checking // n)) from exc
        except EngineDeadError as exc:
            raise self.supervisor.unavailable(str(exc)) from exc
        usage = Usage(prompt_tokens=sum(len(p) for p in prompts))
        prefix = PromptPrefix(self.engine.tokenizer, req, prompts, n)
        if len(jobs) == 1:
            source = self._one(req.request_id, jobs[0][1], jobs[0][2], 0)
        else:
            slots = self._choice_slots(len(jobs))
            source = self._merge([self._one(f"{req.request_id}-{index}", prompt, params, index, slots)
                                  for index, prompt, params in jobs])
        tokens = 0
        remaining = len(jobs)
        prompt_tokens: int | None = usage.prompt_tokens  # told on the first delta only
        try:
            async for index, out in source:
                delta = Delta(index=index, text=out.text, token_ids=out.new_token_ids,
                              logprobs=self._logprobs(out) if out.logprobs else None,
                              finish_reason=out.finish_reason if out.finished else None,
                              prompt_tokens=prompt_tokens)
                prompt_tokens = None
                if out.finished and isinstance(out.stop_reason, str):
                    delta.stop_reason = out.stop_reason
                prefix.apply(delta, out)
                tokens += len(delta.token_ids)
                if out.finished:
                    remaining -= 1
                    usage.cached_tokens = max(usage.cached_tokens, out.num_cached_tokens)
                    if remaining == 0:
                        usage.completion_tokens = tokens
                        delta.usage = usage
                if tools is None:
                    yield delta
                else:
                    for part in tools.rewrite(delta):
                        yield part
        except BlinkError:
            raise
        except EngineDeadError as exc:
            raise self.supervisor.unavailable(f"the engine stopped: {exc}") from exc
        except RequestFailedError as exc:  # this request alone; the engine serves on
            raise InternalServerError(str(exc)) from exc
        except InvalidParameterError as exc:  # refused by the engine core (a spec with no output)
            param = structured.param if structured is not None and exc.param == STRUCTURED_PARAM else exc.param
            raise InvalidRequestError(str(exc), param=param) from exc
        except EngineError as exc:
            raise BackendUnavailableError(str(exc)) from exc
        finally:
            with contextlib.suppress(Exception):
                await source.aclose()

    async def _one(
        self, request_id: str, prompt: list[int], params: SamplingParams, index: int,
        slots: asyncio.Semaphore | None = None,
    ) -> AsyncIterator[tuple[int, RequestOutput]]:
        async with slots if slots is not None else contextlib.nullcontext():
            gen = self.engine.generate(request_id, prompt, params)
            try:
                async for out in gen:
                    yield index, out
            finally:
                await gen.aclose()

    async def _merge(
        self, sources: list[AsyncIterator[tuple[int, RequestOutput]]]
    ) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Interleave n choices in arrival order; closing the merge closes every source."""
        queue: asyncio.Queue[tuple[int, RequestOutput] | BaseException | None] = asyncio.Queue()

        async def pump(src: AsyncIterator[tuple[int, RequestOutput]]) -> None:
            try:
                async for item in src:
                    queue.put_nowait(item)
                queue.put_nowait(None)
            except BaseException as exc:  # forwarded to the consumer
                queue.put_nowait(exc)

        tasks = [asyncio.create_task(pump(s)) for s in sources]
        done = 0
        try:
            while done < len(tasks):
                item = await queue.get()
                if item is None:
                    done += 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t

    def _logprobs(self, out: RequestOutput) -> list[TokenLogprob]:
        tok = self.engine.tokenizer
        result: list[TokenLogprob] = []
        for lp in out.logprobs or []:
            text = tok.decode([lp.token_id], skip_special_tokens=False) if tok else str(lp.token_id)
            top = [(tok.decode([t], skip_special_tokens=False) if tok else str(t), v) for t, v in (lp.top or [])]
            result.append(TokenLogprob(token=text, logprob=lp.logprob, bytes=_token_bytes(tok, lp.token_id, text),
                                       top=top, top_bytes=[_token_bytes(tok, t, top_text) for (t, _), (top_text, _)
                                                           in zip(lp.top or [], top, strict=True)]))
        return result


def _token_bytes(tok: Any, token_id: int, text: str) -> list[int]:
    """A token's own bytes (partial UTF-8 included), else its text's UTF-8."""
    raw = tok.token_bytes(token_id) if tok else None
    return list(raw if raw is not None else text.encode())


def _client_param(req: GenerationRequest, param: str | None, prompt_index: int) -> str | None:
    """The request field an engine error is about, as this client spelled it: the engine names the
    prompt ``messages`` (or ``prompt``) and the budget ``max_tokens`` whatever the endpoint."""
    if param in ("messages", "prompt"):
        if req.kind == "chat":
            return "messages"
        return f"prompt[{prompt_index}]" if req.prompts is not None else "prompt"
    if param == "max_tokens" and "max_completion_tokens" in req.sent_options:
        return "max_completion_tokens"
    return param


def _engine_priority(priority: str | None) -> str:
    """The gateway's class name -> the engine's; unset and the gateway's ``normal`` are interactive."""
    return priority if priority in PRIORITY_RANK else "interactive"


def _by_class(values: list[Any]) -> dict[str, Any] | None:
    return dict(zip(PRIORITY_RANK, values, strict=False)) if values else None


def serving_choice(config: EngineConfig) -> ServingChoice:
    """What this machine runs ``config`` with: its explicit settings, the fast defaults for the rest."""
    return choose_serving_config(config.dtype, config.quantization, config.threads, config.device,
                                 read_cpu_features(), default_threads())


def create_embedded_backend(ms: EmbeddedModel, *, fallback_model: Callable[[], FallbackModel] | None = None) -> EmbeddedBackend:
    """Factory used by ``blink.serve``; ``fallback_model`` gives the model served when ``ms.model``
    cannot be had (blink.demo.default_model)."""
    choice = serving_choice(ms)
    print(f"blink: {ms.name}: {choice.line()}", flush=True)
    return EmbeddedBackend(ms.name, choice.apply(ms), fallback_model=fallback_model,
                           supervision=ms.supervision, tool_parser=ms.tool_parser)
