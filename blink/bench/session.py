"""One ``blink bench`` invocation: resolve models, run with a progress bar, write the reports."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from blink.bench.arrivals import LoadShape
from blink.bench.client import Endpoint, RequestResult
from blink.bench.report import markdown, ratios
from blink.bench.runner import BenchRun, run_bench
from blink.bench.workloads import Workload


class BenchSession:
    def __init__(self, base_url: str, compare: str | None, model: str | None, compare_model: str | None,
                 api_key: str | None) -> None:
        self._urls = [(base_url, model)] + ([(compare, compare_model or model)] if compare else [])
        self._api_key = api_key
        self._endpoints: list[Endpoint] | None = None

    def endpoints(self) -> list[Endpoint]:
        """Endpoints with their model ids (asked from ``/models`` when not given)."""
        if self._endpoints is None:
            self._endpoints = [Endpoint(url, model or self._first_model(url), self._api_key)
                               for url, model in self._urls]
        return self._endpoints

    def _first_model(self, base_url: str) -> str:
        headers = {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            resp = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=10)
            resp.raise_for_status()
            return str(resp.json()["data"][0]["id"])
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise RuntimeError(f"cannot list models at {base_url} ({exc}); pass --model") from None

    async def run(self, workload: Workload, shape: LoadShape, num_requests: int, max_duration_s: float,
                  *, seed: int = 0, progress: bool = False, warmup: int = 0) -> BenchRun:
        endpoints = self.endpoints()
        if not progress:
            return await run_bench(endpoints, workload, shape, num_requests, max_duration_s, seed=seed,
                                   warmup=warmup)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("requests", total=num_requests * len(endpoints), errors=0)
            errors = 0

            def done(r: RequestResult) -> None:
                nonlocal errors
                errors += r.error is not None
                bar.update(task, advance=1, errors=errors)

            return await run_bench(endpoints, workload, shape, num_requests, max_duration_s, seed=seed,
                                   on_done=done, warmup=warmup)

    def write(self, run: BenchRun, slo: dict[str, float], out: Path | None, endpoints: list[Endpoint]) -> str:
        """Write bench.json / bench.md / PNGs into ``out`` (when given); return the Markdown."""
        summary = run.summary(slo)
        r = ratios(summary)
        if r:
            summary["ratios_b_over_a"] = r
        text = markdown(summary)
        if out is not None:
            from blink.bench.plots import plot

            out.mkdir(parents=True, exist_ok=True)
            (out / "bench.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            (out / "bench.md").write_text(text)
            pngs = plot(run, out)
            text += "\n" + "\n".join(f"wrote {p}" for p in [out / "bench.json", out / "bench.md", *pngs])
        return text
