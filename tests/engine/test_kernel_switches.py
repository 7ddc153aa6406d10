"""Kernel switches are EngineConfig fields; the environment only turns them off (kernels/switches.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from blink.config.settings import ConfigError, load_settings
from blink.engine.config import EngineConfig
from blink.engine.kernels.switches import ENV_OVERRIDES, with_env_overrides

FIELDS = ("int8_kernel", "w8a8_kernel", "fused_decode", "decode_attention_kernel", "prefill_ops")


def test_every_switch_is_a_field_on_by_default() -> None:
    config = EngineConfig(model="m")
    assert sorted(field for _, field in ENV_OVERRIDES.values()) == sorted(FIELDS)
    assert all(getattr(config, field) is True for field in FIELDS)


@pytest.mark.parametrize(("var", "off", "field"), [(v, o, f) for v, (o, f) in ENV_OVERRIDES.items()])
def test_the_documented_value_turns_one_switch_off(var: str, off: str, field: str) -> None:
    config = EngineConfig(model="m")
    got = with_env_overrides(config, {var: off.upper()})
    assert getattr(got, field) is False
    assert all(getattr(got, f) is True for f in FIELDS if f != field)
    assert getattr(config, field) is True  # the caller's config is left as it was


def test_other_values_and_an_empty_environment_change_nothing() -> None:
    config = EngineConfig(model="m", fused_decode=False)
    assert with_env_overrides(config, {}) is config
    assert with_env_overrides(config, {var: "on" for var in ENV_OVERRIDES}) is config
    # The environment only turns kernels off; it never turns a configured-off one back on.
    assert with_env_overrides(config, {"BLINK_FUSED_DECODE": "on"}).fused_decode is False


def test_switches_are_settings_of_an_embedded_model_only() -> None:
    settings = load_settings(model={"model": "/m", "int8_kernel": False, "prefill_attention": "sdpa"})
    (model,) = settings.models
    assert model.int8_kernel is False and model.prefill_attention == "sdpa"
    with pytest.raises(ConfigError, match="'prefill_ops' applies to embedded models, not openai_http ones"):
        load_settings(model={"kind": "openai_http", "base_url": "http://u/v1", "prefill_ops": False})
    with pytest.raises(ValidationError, match="decode_attention_kernel"):
        EngineConfig(model="m", decode_attention_kernel="maybe")  # type: ignore[arg-type]
