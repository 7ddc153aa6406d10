"""``blink chat``: a streaming chat client for any OpenAI-compatible server, with TTFT and tokens/s."""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated, Any

import typer

from blink.cli.flags import given

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def chat(
    base_url: Annotated[str, typer.Option(help="OpenAI-compatible base URL.")] = DEFAULT_BASE_URL,
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
    extra = given(max_tokens=max_tokens, temperature=temperature)
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
