"""``blink cache stats|clear|warm``: inspect, empty or pre-fill the response cache store.

``warm --from queries.jsonl`` reads one JSON object per line: a chat request body
(``model``, ``messages``, sampling fields) plus ``response``, the answer to store. Entries land in
the configured store; a running server with the SQLite store sees them after a restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from blink.config.gateway import CacheSettings
from blink.config.settings import ConfigError, load_settings
from blink.gateway.cache.stage import CacheDirectives, ResponseCache
from blink.gateway.chat.request_mapping import chat_request
from blink.gateway.front_builder import build_cache_store, build_matcher
from blink.gateway.http.request_parsing import validate
from blink.protocol.chat import ChatCompletionRequest

cache_app = typer.Typer(help="Inspect, clear or warm the response cache.", no_args_is_help=True)

ConfigOpt = Annotated[Path | None, typer.Option(help="YAML config file (cache section).")]


def _settings(config: Path | None) -> CacheSettings:
    try:
        return load_settings(config).cache
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


@cache_app.command("stats")
def stats(config: ConfigOpt = None) -> None:
    """Entries and namespaces in the store."""

    async def run() -> None:
        store = build_cache_store(_settings(config))
        await store.start()
        s = await store.stats()
        await store.aclose()
        typer.echo(f"entries {s.entries}  namespaces {s.namespaces}  {s.detail}")

    asyncio.run(run())


@cache_app.command("clear")
def clear(config: ConfigOpt = None) -> None:
    """Remove every entry."""

    async def run() -> None:
        store = build_cache_store(_settings(config))
        await store.start()
        n = await store.clear()
        await store.aclose()
        typer.echo(f"removed {n} entries")

    asyncio.run(run())


@cache_app.command("warm")
def warm(
    source: Annotated[Path, typer.Option("--from", help="JSONL: a chat request body + 'response' per line.")],
    tenant: Annotated[str, typer.Option(help="Tenant the entries belong to.")] = "default",
    semantic: Annotated[bool, typer.Option(help="Also index the entries for the semantic cache.")] = True,
    config: ConfigOpt = None,
) -> None:
    """Pre-fill the cache with known answers."""
    settings = _settings(config)
    settings.semantic.enabled = semantic
    added = asyncio.run(_warm(settings, source, tenant))
    typer.echo(f"warmed {added} entries")


async def _warm(settings: CacheSettings, source: Path, tenant: str) -> int:
    cache = ResponseCache(build_cache_store(settings), settings, build_matcher(settings) if settings.semantic.enabled else None)
    await cache.start()
    added = 0
    try:
        for n, line in enumerate(source.read_text().splitlines(), 1):
            if not line.strip():
                continue
            raw: dict[str, Any] = orjson.loads(line)
            answer = raw.pop("response", None)
            if not isinstance(answer, str):
                raise typer.BadParameter(f"line {n}: needs a string 'response'")
            raw.setdefault("temperature", 0)
            body = validate(ChatCompletionRequest, raw)
            req = chat_request(body, raw, body.model or "default", 1 << 30, None)
            lookup = await cache.lookup(req, tenant, CacheDirectives(lookup=False, store=True))
            rendered = {
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0},
            }
            cache.schedule_fill(lookup, rendered)
            added += 1
        await cache.drain()
    finally:
        await cache.aclose()
    return added
