"""Speed options travel from settings / the request body to the engine's own config and params."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from blink.backends.embedded import serving_choice
from blink.config.models import EmbeddedModel
from blink.engine.config import EngineConfig
from blink.gateway.chat.request_mapping import chat_request
from blink.protocol.chat import ChatCompletionRequest


def test_engine_config_gets_speculation_and_quantization() -> None:
    ms = EmbeddedModel(
        model="m", speculative="draft", speculative_draft_model="d", num_speculative_tokens=3, quantization="int8"
    )
    cfg = _engine_config(ms)
    assert (cfg.speculative, cfg.speculative_draft_model, cfg.num_speculative_tokens) == ("draft", "d", 3)
    assert cfg.quantization == "int8"
    plain = _engine_config(EmbeddedModel(model="m"))
    # No quantization set: the fast default for this CPU (tests/engine/test_fast_defaults.py).
    assert (plain.speculative, plain.quantization) == ("none", serving_choice(EmbeddedModel(model="m")).quantization)
    assert (plain.compile, plain.compile_mode) == (False, "frozen")
    compiled = _engine_config(EmbeddedModel(model="m", compile=True, compile_mode="layers"))
    assert (compiled.compile, compiled.compile_mode) == (True, "layers")
    assert plain.fused_decode is True
    assert _engine_config(EmbeddedModel(model="m", fused_decode=False)).fused_decode is False


def test_unknown_values_are_config_errors() -> None:
    with pytest.raises(ValidationError):
        EmbeddedModel(model="m", speculative="medusa")
    with pytest.raises(ValidationError):
        EmbeddedModel(model="m", quantization="int4")
    with pytest.raises(ValidationError):
        EmbeddedModel(model="m", compile_mode="cudagraphs")


@pytest.mark.parametrize(("body", "expected"), [({}, True), ({"speculative": False}, False)])
def test_request_can_turn_speculation_off(body: dict[str, object], expected: bool) -> None:
    raw = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    req = chat_request(ChatCompletionRequest.model_validate(raw), raw, "m", 4096, None)
    assert req.options.speculative is expected


def _engine_config(ms: EmbeddedModel) -> EngineConfig:
    """What the embedded backend hands the engine for ``ms`` (its "auto" settings resolved)."""
    from blink.backends.embedded import serving_choice

    return serving_choice(ms).apply(ms)
