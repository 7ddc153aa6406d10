"""One ``Settings`` object for the whole server.

Sources, highest precedence first:

1. command-line flags (``blink serve --port 9000``), passed as ``overrides``;
2. environment variables ``BLINK_*``, nested with ``__`` (``BLINK_SERVER__PORT=9000``,
   ``BLINK_MODELS='[{"name": "m", "kind": "openai_http", "base_url": "..."}]'``);
3. the YAML file given with ``--config``;
4. the defaults below.

Nested objects merge key by key across sources; lists (``models``) are replaced whole.
Model flags (``--model``, ``--upstream``, ``--dtype``...) edit the default model (the one
named by ``default_model``, else the first) or create it when no model is configured. With no
model configured at all, ``blink serve`` serves one embedded model with the defaults.
Invalid configuration raises ``ConfigError`` naming the field, before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, TypeAdapter, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from blink.config.batch import BatchSettings
from blink.config.cost import CostSettings
from blink.config.gateway import AuthSettings, CacheSettings, ObsSettings, RateLimitSettings
from blink.config.model_server import ModelServerSettings
from blink.config.models import MODEL_KINDS, EmbeddedModel, ModelSettings, OpenAIHTTPModel
from blink.config.responses import ResponsesSettings
from blink.config.routing import RouteSettings, check_routes
from blink.config.safety import SafetySettings
from blink.config.server import ServerSettings
from blink.config.voice import VoiceSettings


class ConfigError(Exception):
    """The configuration is invalid; the message names the offending field(s)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BLINK_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    server: ServerSettings = ServerSettings()
    models: list[ModelSettings] = Field(default_factory=list)
    default_model: str | None = None
    # Routed models: tiers of the models above behind one name (blink/config/routing.py).
    routes: list[RouteSettings] = Field(default_factory=list)
    auth: AuthSettings = AuthSettings()
    ratelimit: RateLimitSettings = RateLimitSettings()
    cache: CacheSettings = CacheSettings()
    obs: ObsSettings = ObsSettings()
    # Small ONNX models with dynamic batching and the safety filter (blink/config/model_server.py, blink/config/safety.py).
    model_server: ModelServerSettings = ModelServerSettings()
    safety: SafetySettings = SafetySettings()
    batch: BatchSettings = BatchSettings()
    # /v1/responses and its stored responses (blink/config/responses.py).
    responses: ResponsesSettings = ResponsesSettings()
    cost: CostSettings = CostSettings()
    # The /v1/voice WebSocket (blink/config/voice.py); off unless enabled.
    voice: VoiceSettings = VoiceSettings()

    @model_validator(mode="after")
    def _check_models(self) -> Settings:
        if not self.models:
            self.models = [EmbeddedModel()]
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, got {names}")
        check_routes(self.routes, names)
        if self.default_model is not None and self.default_model not in names + [r.name for r in self.routes]:
            raise ValueError(f"default_model {self.default_model!r} is not one of {names}")
        if self.voice.model is not None and self.voice.model not in names + [r.name for r in self.routes]:
            raise ValueError(f"voice.model {self.voice.model!r} is not one of {names}")
        embedded = {m.name for m in self.models if m.kind == "embedded"}
        for m in self.models:
            if isinstance(m, OpenAIHTTPModel) and m.compression is not None and m.compression.scorer not in embedded:
                raise ValueError(f"model {m.name!r}: compression.scorer {m.compression.scorer!r} is not an "
                                 f"embedded model of this server (one of {sorted(embedded)})")
        return self


def load_settings(
    config_file: str | Path | None = None,
    server: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    default_model: str | None = None,
    sections: dict[str, Any] | None = None,
) -> Settings:
    """Build ``Settings`` from flags (``server``/``model``/other ``sections``) > env > YAML > defaults."""
    yaml_data = _read_yaml(config_file) if config_file else {}
    init: dict[str, Any] = dict(sections or {})
    if server:
        init["server"] = server
    if default_model is not None:
        init["default_model"] = default_model
    try:
        settings = _settings_with_yaml(yaml_data)(**init)
        if model:
            settings = _apply_model_flags(settings, model)
        return Settings.model_validate(settings.model_dump())
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def format_validation_error(exc: ValidationError) -> str:
    lines = ["invalid configuration:"]
    for err in exc.errors():
        field = ".".join(str(p) for p in _user_loc(err["loc"])) or "(settings)"
        lines.append(f"  {field}: {err['msg']}")
    return "\n".join(lines)


def _user_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """``models.0.embedded.dtype`` -> ``models.0.dtype``: the union's tag is not a key anyone wrote."""
    return tuple(p for i, p in enumerate(loc) if not (p in MODEL_KINDS and (i == 0 or isinstance(loc[i - 1], int))))


def _read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def _settings_with_yaml(yaml_data: dict[str, Any]) -> type[Settings]:
    """A ``Settings`` subclass whose lowest-precedence source is the YAML mapping."""

    class _Layered(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, InitSettingsSource(settings_cls, yaml_data))

    return _Layered


_MODEL: TypeAdapter[ModelSettings] = TypeAdapter(ModelSettings)


def _apply_model_flags(settings: Settings, flags: dict[str, Any]) -> Settings:
    models = [m.model_dump() for m in settings.models]
    index = 0
    if settings.default_model is not None:
        index = next((i for i, m in enumerate(models) if m["name"] == settings.default_model), 0)
    target = models[index]
    derived_name = target["name"] in (target.get("upstream_model"), target.get("model"), "default")
    if flags.get("kind", target["kind"]) != target["kind"]:
        # Switching kind (e.g. --upstream over the embedded default): start from that kind's defaults.
        target = {} if derived_name else {"name": target["name"]}
    if derived_name and "name" not in flags:
        target.pop("name", None)
    target.update(flags)
    new_model = _MODEL.validate_python(target)
    models[index] = new_model.model_dump()
    data = settings.model_dump()
    data["models"] = models
    if settings.default_model is not None and settings.default_model not in {r.name for r in settings.routes}:
        data["default_model"] = new_model.name
    return Settings.model_validate(data)
