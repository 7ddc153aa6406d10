"""Settings: defaults, precedence (flags > env > YAML > defaults) and start-up validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from blink.byte_size import parse_bytes
from blink.config.models import DEFAULT_EMBEDDED_MODEL
from blink.config.settings import ConfigError, Settings, load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BLINK_SERVER__PORT", "BLINK_SERVER__HOST", "BLINK_MODELS", "BLINK_DEFAULT_MODEL"):
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "blink.yaml"
    path.write_text(text)
    return path


def test_defaults_serve_one_embedded_model() -> None:
    s = Settings()
    assert s.server.host == "127.0.0.1" and s.server.port == 8000
    (m,) = s.models
    assert m.kind == "embedded" and m.model == DEFAULT_EMBEDDED_MODEL and m.name == DEFAULT_EMBEDDED_MODEL
    assert m.kv_cache_memory_bytes == 512 * 2**20


def test_precedence_flags_over_env_over_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write(tmp_path, "server:\n  port: 1000\n  host: 0.0.0.0\n  max_body_bytes: 2MiB\n")
    assert load_settings(cfg).server.port == 1000
    monkeypatch.setenv("BLINK_SERVER__PORT", "2000")
    s = load_settings(cfg)
    assert (s.server.port, s.server.host, s.server.max_body_bytes) == (2000, "0.0.0.0", 2 * 2**20)
    s = load_settings(cfg, server={"port": 3000})
    assert (s.server.port, s.server.host) == (3000, "0.0.0.0")


def test_models_from_yaml_env_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write(tmp_path, """
models:
  - {name: small, kind: embedded, model: /models/small, kv_cache_memory_bytes: 256MiB}
  - {name: big, kind: openai_http, base_url: "http://up/v1", upstream_model: big-v2}
default_model: big
""")
    s = load_settings(cfg)
    assert [m.name for m in s.models] == ["small", "big"]
    assert s.models[0].kv_cache_memory_bytes == 256 * 2**20
    # Model flags edit the default model.
    s = load_settings(cfg, model={"read_timeout_s": 9.0})
    assert s.models[1].read_timeout_s == 9.0 and not hasattr(s.models[0], "read_timeout_s")
    monkeypatch.setenv("BLINK_MODELS", '[{"name": "env-model", "kind": "openai_http", "base_url": "http://e/v1"}]')
    monkeypatch.setenv("BLINK_DEFAULT_MODEL", "env-model")
    s = load_settings(cfg)
    assert [m.name for m in s.models] == ["env-model"] and s.default_model == "env-model"


def test_upstream_flag_replaces_embedded_default() -> None:
    s = load_settings(model={"kind": "openai_http", "base_url": "http://u/v1", "upstream_model": "llama"})
    (m,) = s.models
    assert (m.kind, m.name, m.upstream_model) == ("openai_http", "llama", "llama") and not hasattr(m, "model")
    s = load_settings(model={"model": "/tmp/tiny", "kv_cache_memory_bytes": "64MiB", "enable_prefix_caching": False})
    (m,) = s.models
    assert (m.name, m.model, m.kv_cache_memory_bytes, m.enable_prefix_caching) == (
        "/tmp/tiny", "/tmp/tiny", 64 * 2**20, False)


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("server:\n  port: abc\n", "server.port"),
        ("server:\n  port: 70000\n", "server.port"),
        ("server:\n  bogus: 1\n", "server.bogus"),
        ("models:\n  - {kind: embedded, kv_cache_memory_bytes: lots}\n", "models.0.kv_cache_memory_bytes"),
        ("models:\n  - {kind: openai_http}\n", "models.0"),
        ("models:\n  - {kind: quantum}\n", "models.0: 'kind' must be one of embedded, openai_http, vllm"),
        ("models:\n  - {kind: vllm}\n", "models.0.model: Field required"),
        ("models:\n  - {name: a, base_url: http://u/v1}\n", "models.0: Value error, 'base_url' applies to openai_http models, not embedded ones"),
        ("models:\n  - {kind: openai_http, base_url: http://u/v1, dtype: bfloat16, warp: 9}\n",
         "'dtype' applies to embedded models, not openai_http ones; 'warp' is not a setting of any model kind"),
        ("models:\n  - {kind: vllm, model: m, compression: {scorer: x}}\n", "'compression' applies to openai_http models, not vllm ones"),
        ("default_model: nope\n", "(settings)"),
    ],
)
def test_invalid_config_names_the_field(tmp_path: Path, yaml_text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, yaml_text))
    assert field in str(info.value)


def test_invalid_env_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLINK_SERVER__PORT", "not-a-port")
    with pytest.raises(ConfigError, match="server.port"):
        load_settings()


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"))


def test_parse_bytes() -> None:
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes("4096") == 4096 and parse_bytes(7) == 7
    with pytest.raises(ValueError):
        parse_bytes("12 parsecs")


def test_serve_fails_at_startup_naming_the_field(tmp_path: Path) -> None:
    cfg = write(tmp_path, "server:\n  max_concurrent_streams: 0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "blink.cli", "serve", "--config", str(cfg)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "server.max_concurrent_streams" in proc.stderr


def test_embedded_model_settings_are_the_engine_config_declared_once() -> None:
    from blink.config.models import EmbeddedModel
    from blink.engine.config import EngineConfig

    assert issubclass(EmbeddedModel, EngineConfig)
    for name, field in EngineConfig.model_fields.items():
        if name != "model":  # required by the engine; the server's default model otherwise
            assert EmbeddedModel.model_fields[name].default == field.default, name
    (m,) = load_settings(model={"model": "/m", "max_batch_seqs": 0, "engine_nice": 5, "tool_parser": "hermes"}).models
    engine = EngineConfig(**m.engine_fields())  # what the engine-core process is handed
    assert (engine.model, engine.max_batch_seqs, engine.engine_nice) == ("/m", 0, 5)
    assert not hasattr(engine, "tool_parser") and not hasattr(engine, "supervision")
