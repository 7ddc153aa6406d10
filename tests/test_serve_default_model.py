"""Every entry point with no model named serves the same default, through the same fallback.

``blink serve`` (which the dashboard, ``blink chat`` and ``blink voice`` talk to), ``blink
engine serve``, a config file with an embedded model and no ``model``, and the voice agent's
model all end at ``blink.serve.model_fallback``: SmolLM2 from PyPI's wheel when the hub cannot
give it, the random demo model only after that. The CLI is driven for real (typer's runner) up to
the point where it would start serving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import blink.serve
from blink.cli.main import app
from blink.config.models import DEFAULT_EMBEDDED_MODEL
from blink.config.settings import Settings, load_settings
from blink.demo.default_model import default_model_fallback
from blink.serve import build_registry, model_fallback


def _settings_from_cli(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> Settings:
    captured: list[Settings] = []
    monkeypatch.setattr(blink.serve, "run", captured.append)
    result = CliRunner().invoke(app, args, env={k: "" for k in ("BLINK_CONFIG",)})
    assert result.exit_code == 0, result.output
    (settings,) = captured
    return settings


@pytest.fixture(autouse=True)
def _no_blink_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("BLINK_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("args", [["serve"], ["serve", "--port", "0", "--semantic-cache"], ["engine", "serve"]],
                         ids=["serve", "serve-with-caches", "engine-serve"])
def test_cli_entry_points_serve_the_default_model_with_the_pypi_fallback(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    settings = _settings_from_cli(monkeypatch, args)
    (model,) = settings.models
    assert model.kind == "embedded" and model.model == DEFAULT_EMBEDDED_MODEL
    assert model_fallback(model) is default_model_fallback


def test_a_config_file_voice_agent_answers_with_the_default_model(tmp_path: Path) -> None:
    config = tmp_path / "blink.yaml"
    config.write_text("models:\n  - {name: assistant, kind: embedded}\nvoice: {enabled: true}\n"
                      "obs: {dashboard: true}\n")
    settings = load_settings(config)
    (model,) = settings.models
    assert model.model == DEFAULT_EMBEDDED_MODEL and model_fallback(model) is default_model_fallback
    registry = build_registry(settings)
    # The voice agent's model: voice.model, else the registry's default, i.e. this one.
    assert settings.voice.model is None and registry.default_model() == "assistant"
    backend: Any = registry.resolve("assistant")
    assert backend._fallback_model is default_model_fallback


def test_a_model_the_user_names_never_falls_back(tiny_llama: Path) -> None:
    named = load_settings(None, model={"model": str(tiny_llama)})
    assert model_fallback(named.models[0]) is None
    upstream = load_settings(None, model={"kind": "openai_http", "base_url": "http://127.0.0.1:9/v1"})
    assert model_fallback(upstream.models[0]) is None
