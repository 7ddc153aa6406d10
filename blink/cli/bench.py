"""The ``blink bench`` command: flags -> a bounded run -> report files and a summary on stdout."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

_DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def bench(
    base_url: Annotated[str, typer.Option(help="OpenAI-compatible base URL (A).")] = _DEFAULT_BASE_URL,
    compare: Annotated[str | None, typer.Option(help="A second base URL (B), run interleaved with A; prints B/A ratios.")] = None,
    model: Annotated[str | None, typer.Option(help="Model id (default: the endpoint's first).")] = None,
    compare_model: Annotated[str | None, typer.Option(help="Model id at --compare (default: its first).")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="OPENAI_API_KEY", help="API key (default: $OPENAI_API_KEY).")] = None,
    workload: Annotated[str, typer.Option(help="synthetic | shared-prefix | repeated | long-mix | replay.")] = "synthetic",
    trace: Annotated[Path | None, typer.Option(help="JSONL trace for --workload replay.")] = None,
    prompt_words: Annotated[int, typer.Option(help="Prompt length in words (≈1.3 tokens each).")] = 128,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 64,
    concurrency: Annotated[int | None, typer.Option(help="Closed loop: users in parallel (default 8); with --rate: a cap on requests in flight.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: mean arrivals per second.")] = None,
    burstiness: Annotated[float, typer.Option(help="Open loop gamma shape: 1 = Poisson, <1 burstier.")] = 1.0,
    num_requests: Annotated[int, typer.Option(help="Requests per endpoint (upper bound).")] = 100,
    max_duration: Annotated[float, typer.Option(help="Wall-clock limit in seconds (upper bound).")] = 300.0,
    slo: Annotated[str | None, typer.Option(help="Goodput targets, e.g. ttft=100ms,itl=50ms,e2e=2s.")] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for bench.json, bench.md and PNG plots.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for prompts and arrivals.")] = 0,
    warmup: Annotated[int, typer.Option(help="Uncounted requests per endpoint first, in parallel (opens connections).")] = 0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (default: when stderr is a terminal).")] = sys.stderr.isatty(),
) -> None:
    """Load-test an OpenAI-compatible endpoint: TTFT/ITL/TPOT/E2E percentiles, throughput, goodput."""
    from blink.bench.arrivals import LoadShape
    from blink.bench.slo import parse_slo
    from blink.bench.workloads import make_workload

    try:
        slo_s = parse_slo(slo)
        load = make_workload(workload, prompt_words=prompt_words, max_tokens=max_tokens, seed=seed,
                             trace=str(trace) if trace else None)
        if num_requests < 1 or max_duration <= 0 or (rate is not None and rate <= 0) or burstiness <= 0:
            raise ValueError("--num-requests, --max-duration, --rate and --burstiness must be positive")
    except (ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    shape = LoadShape(concurrency=concurrency if rate is not None else (concurrency or 8), rate=rate,
                      burstiness=burstiness)
    from blink.bench.session import BenchSession

    session = BenchSession(base_url, compare, model, compare_model, api_key)
    try:
        endpoints = session.endpoints()
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    run = asyncio.run(session.run(load, shape, num_requests, max_duration, seed=seed, progress=progress,
                                 warmup=warmup))
    typer.echo(session.write(run, slo_s, out, endpoints))
