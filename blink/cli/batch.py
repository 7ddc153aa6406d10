"""``blink batch run input.jsonl -o out.jsonl``: run a JSONL file through the Batch API.

Against a running server (``--base-url``), or, with ``--model``, against a private ``blink serve``
started for the run (its job store in a temporary folder) and stopped afterwards. A rich
progress bar follows ``request_counts``; results go to ``-o``, failed lines next to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

batch_app = typer.Typer(help="Run OpenAI Batch API jobs (JSONL in, JSONL out).", no_args_is_help=True)

_DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
# A local server loads its model in seconds; a large checkpoint on a busy machine takes longer.
_START_TIMEOUT_S = 300.0
_TERMINAL = ("completed", "failed", "cancelled", "expired")


@batch_app.command("run")
def run(
    input_file: Annotated[Path, typer.Argument(help="Input JSONL: one request per line, OpenAI batch format.",
                                               exists=True, dir_okay=False, readable=True)],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the results (JSONL).")],
    base_url: Annotated[str, typer.Option(help="Server to run the batch on.")] = _DEFAULT_BASE_URL,
    model: Annotated[str | None, typer.Option(help="Serve this embedded model for the run instead of --base-url.")] = None,
    endpoint: Annotated[str, typer.Option(help="/v1/chat/completions or /v1/completions.")] = "/v1/chat/completions",
    api_key_env: Annotated[str, typer.Option(help="Env var holding the API key, if the server wants one.")] = "BLINK_API_KEY",
    poll_s: Annotated[float, typer.Option(help="Seconds between progress polls.")] = 0.5,
) -> None:
    """Upload INPUT_FILE, run it as a batch, and write the results to -o (errors to <out>.errors.jsonl)."""
    with _local_server(model) if model else contextlib.nullcontext(base_url) as url:
        status = _run_batch(str(url), input_file, output, endpoint, os.environ.get(api_key_env, ""), poll_s)
    raise typer.Exit(0 if status == "completed" else 1)


def _run_batch(base_url: str, input_file: Path, output: Path, endpoint: str, api_key: str, poll_s: float) -> str:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=60) as http:
        upload = _ok(http.post("/files", files={"file": (input_file.name, input_file.read_bytes())},
                               data={"purpose": "batch"}))
        batch = _ok(http.post("/batches", json={"input_file_id": upload["id"], "endpoint": endpoint,
                                                "completion_window": "24h"}))
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn())
        with Progress(*columns, transient=False) as progress:
            task = progress.add_task(batch["id"], total=batch["request_counts"]["total"] or None, failed=0)
            while batch["status"] not in _TERMINAL:
                time.sleep(poll_s)
                batch = _ok(http.get(f"/batches/{batch['id']}"))
                counts = batch["request_counts"]
                progress.update(task, total=counts["total"], completed=counts["completed"] + counts["failed"],
                                failed=counts["failed"])
        _download(http, batch.get("output_file_id"), output)
        errors = output.with_suffix(".errors.jsonl")
        if batch.get("error_file_id"):
            _download(http, batch["error_file_id"], errors)
            typer.echo(f"{batch['request_counts']['failed']} failed lines written to {errors}", err=True)
        typer.echo(f"batch {batch['id']} {batch['status']}: results in {output}", err=True)
        return str(batch["status"])


def _download(http: httpx.Client, file_id: str | None, target: Path) -> None:
    content = b"" if not file_id else _check(http.get(f"/files/{file_id}/content")).content
    target.write_bytes(content)


def _check(resp: httpx.Response) -> httpx.Response:
    if resp.status_code >= 400:
        try:
            message = resp.json()["error"]["message"]
        except Exception:  # not an OpenAI error body: show the raw text
            message = resp.text
        typer.echo(f"error {resp.status_code}: {message}", err=True)
        raise typer.Exit(2)
    return resp


def _ok(resp: httpx.Response) -> dict[str, Any]:
    return dict(_check(resp).json())


@contextlib.contextmanager
def _local_server(model: str) -> Iterator[str]:
    """``blink serve --model MODEL`` on a free loopback port with a throwaway job store."""
    with tempfile.TemporaryDirectory(prefix="blink-batch-") as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "BLINK_BATCH__PATH": str(Path(tmp) / "batch.db")}
        proc = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--model", model, "--port", str(port),
                                 "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_ready(f"http://127.0.0.1:{port}", proc)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            # SIGTERM to the server alone: it stops its engine core itself. Sent to the whole group, it
            # killed the core under the server, which then logged "engine core died" after a clean run.
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            typer.echo("the local server exited before it was ready", err=True)
            raise typer.Exit(2)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return
        time.sleep(0.3)
    typer.echo("the local server did not become ready", err=True)
    raise typer.Exit(2)
