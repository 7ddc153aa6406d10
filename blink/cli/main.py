"""The ``blink`` command: every sub-command, each from its own module in this package."""

from __future__ import annotations

import typer

from blink.cli.batch import batch_app
from blink.cli.bench import bench
from blink.cli.cache import cache_app
from blink.cli.chat import chat
from blink.cli.engine import engine_app
from blink.cli.keys import keys_app
from blink.cli.models import models_app
from blink.cli.serve import serve
from blink.cli.usage import usage
from blink.cli.voice import voice

app = typer.Typer(help="Blink: a real-time, OpenAI-compatible LLM inference server.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(keys_app, name="keys")
app.add_typer(cache_app, name="cache")
app.add_typer(batch_app, name="batch")
app.add_typer(engine_app, name="engine")
app.command()(usage)
app.command()(bench)
app.command()(voice)
app.command()(serve)
app.command()(chat)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
