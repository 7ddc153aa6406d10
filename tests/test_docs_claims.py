"""README.md and docs/ say what the code does: every Blink YAML block loads into ``Settings``,
the blocks that show defaults show the real ones, and every ``blink ... --flag`` the text tells a
reader to type is a flag of that sub-command. Outside reviewers set Blink up from these pages
alone; a renamed key or a stale default there is a broken promise no other test would notice."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from blink.byte_size import parse_bytes
from blink.cli.main import app as blink_cli
from blink.config.models import EmbeddedModel
from blink.config.settings import Settings

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
YAML_BLOCK = re.compile(r"```ya?ml\n(.*?)```", re.S)
# Blocks whose values are the defaults (the page says so beside each); their first line picks them.
DEFAULT_BLOCKS = ("server:\n", "auth: {enabled: false", "obs:\n", "voice:\n")
# Example values in those blocks, not defaults: the models' names, the default model naming one
# of them, and the switch that turns voice on.
EXAMPLE_KEYS = {"default_model", "models[].name", "voice.enabled"}


def yaml_blocks() -> list[tuple[str, str]]:
    """(``page:line``, text) of every YAML block that configures Blink (top-level keys are settings)."""
    blocks = []
    for page in PAGES:
        text = page.read_text()
        for m in YAML_BLOCK.finditer(text):
            data = yaml.safe_load(m.group(1))
            if isinstance(data, dict) and set(data) <= set(Settings.model_fields):
                blocks.append((f"{page.name}:{text[: m.start()].count(chr(10)) + 1}", m.group(1)))
    return blocks


def with_route_replicas(data: dict[str, Any]) -> dict[str, Any]:
    """A ``routes:`` fragment names models configured elsewhere on the page: stand in for them."""
    if "routes" not in data or "models" in data:
        return data
    names = {r for route in data["routes"] for tier in route["tiers"] for r in tier["replicas"]}
    return {**data, "models": [{"name": n, "kind": "openai_http", "base_url": "http://127.0.0.1:9/v1"} for n in sorted(names)]}


@pytest.mark.parametrize(("where", "text"), yaml_blocks(), ids=[w for w, _ in yaml_blocks()])
def test_every_config_block_loads(where: str, text: str) -> None:
    Settings(**with_route_replicas(yaml.safe_load(text)))


def mismatches(doc: Any, real: Any, path: str) -> list[str]:
    """Leaves of ``doc`` whose value differs from ``real``'s (byte sizes compared as bytes)."""
    if isinstance(doc, dict):
        out = []
        for key, value in doc.items():
            where = f"{path}.{key}" if path else key
            if where in EXAMPLE_KEYS:
                continue
            sub = real.get(key) if isinstance(real, dict) else getattr(real, key, "<no such setting>")
            out += mismatches(value, sub, where)
        return out
    real = getattr(real, "value", real)  # enums
    if isinstance(doc, str) and isinstance(real, int) and not isinstance(real, bool):
        doc = parse_bytes(doc)
    return [] if doc == real else [f"{path}: documented {doc!r}, default {real!r}"]


def test_blocks_that_show_defaults_show_the_real_ones() -> None:
    defaults = Settings()
    found, wrong = 0, []
    for where, text in yaml_blocks():
        if not text.startswith(DEFAULT_BLOCKS):
            continue
        found += 1
        for section, value in yaml.safe_load(text).items():
            if section == "models":
                # The embedded model's fields are defaults; the openai_http one is an example.
                for model in value:
                    if model.get("kind", "embedded") == "embedded":
                        wrong += [f"{where} {m}" for m in mismatches(model, EmbeddedModel(), "models[]")]
            else:
                wrong += [f"{where} {m}" for m in mismatches({section: value}, defaults, "")]
    assert found == len(DEFAULT_BLOCKS)
    assert not wrong, "\n".join(wrong)


SUBCOMMAND = re.compile(r"\bblink ((?:[a-z]+)(?: (?:list|download|create|revoke|stats|clear|warm|run|serve))?)\b([^`\n|]*)")


def flags_of(words: str) -> set[str] | None:
    """Every option string of ``blink WORDS``; None when WORDS is not a sub-command."""
    command: Any = typer.main.get_command(blink_cli)
    for word in words.split():
        if not hasattr(command, "commands") or word not in command.commands:
            return None
        command = command.commands[word]
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_every_documented_flag_exists() -> None:
    checked, unknown = 0, []
    for page in PAGES:
        text = page.read_text()
        for m in SUBCOMMAND.finditer(text):
            flags = flags_of(m.group(1))
            if flags is None:
                continue
            for flag in re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", m.group(2)):
                checked += 1
                if flag not in flags:
                    unknown.append(f"{page.name}:{text[: m.start()].count(chr(10)) + 1}: blink {m.group(1)} {flag}")
    assert checked > 40  # the pattern still finds the commands the pages show
    assert not unknown, "\n".join(unknown)


def test_every_named_extra_and_repository_path_exists() -> None:
    """``pip install 'blink-serve[x]'`` names an extra of pyproject.toml; ``blink/...``, ``docs/...``
    paths name files that are there (``~/.blink/...`` ones are the user's, not the repository's)."""
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    missing = []
    for page in PAGES:
        text = page.read_text()
        missing += [f"{page.name}: extra {x}" for x in re.findall(r"blink-serve\[(\w+)\]", text) if x not in extras]
        for path in re.findall(r"(?<![~\w./-])((?:blink|benchmarks|deploy|docs|tests)/[\w./-]*\w)", text):
            if not (REPO / path).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, "\n".join(missing)


def test_every_field_in_the_compatibility_table_is_a_request_field() -> None:
    """The README's chat/completions table names fields the wire schemas declare (whether they
    implement or refuse them); a field renamed or dropped in ``blink/protocol`` shows up here."""
    from blink.protocol.chat import ChatCompletionRequest
    from blink.protocol.completions import CompletionRequest

    known = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    text = (REPO / "README.md").read_text()
    table = text[text.index("| field (endpoint) | embedded engine |"):text.index("Endpoints beside generation")]
    rows = [line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|")]
    names = [n for row in rows for n in re.findall(r"`([a-z_]+)[`.:]", re.sub(r"\([^)]*\)", "", row))]
    assert len(rows) > 25 and len(names) > 50
    assert [n for n in names if n not in known and n != "openai_http"] == []
