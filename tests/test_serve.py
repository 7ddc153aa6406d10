"""The composition root: every model ``kind`` has a builder, and one pass wires what it builds."""

from __future__ import annotations

from blink.config.models import DEFAULT_EMBEDDED_MODEL, MODEL_KINDS, EmbeddedModel, OpenAIHTTPModel
from blink.serve import BACKEND_BUILDERS, build_app, build_backend, model_fallback
from tests.routed_gateway import routed_settings


def test_every_model_kind_has_a_builder() -> None:
    # A kind added to the settings union without a builder would fail at start with a KeyError.
    assert set(BACKEND_BUILDERS) == set(MODEL_KINDS)


def test_an_openai_http_model_is_built_by_its_kind() -> None:
    backend = build_backend(OpenAIHTTPModel(name="up", kind="openai_http", base_url="http://127.0.0.1:9/v1"))
    assert type(backend).__name__ == "OpenAIHTTPBackend" and backend.models()[0].id == "up"


def test_only_the_default_embedded_model_falls_back() -> None:
    assert model_fallback(EmbeddedModel(name="d", model=DEFAULT_EMBEDDED_MODEL)) is not None
    assert model_fallback(EmbeddedModel(name="mine", model="./my-model")) is None
    assert model_fallback(OpenAIHTTPModel(name="up", kind="openai_http", base_url="http://127.0.0.1:9/v1")) is None


def test_one_pass_wires_the_pipeline_and_the_router_counters() -> None:
    settings = routed_settings([{"name": "t", "replicas": ["a", "b"]}], {"a": "http://127.0.0.1:9/v1",
                                                                        "b": "http://127.0.0.1:9/v1"})
    app = build_app(settings)
    state = app.state
    # The pipeline the app serves with runs the stages of the app's own front.
    assert state.pipeline.front is state.front and state.pipeline.registry is state.registry
    # The router's collector was registered where the route was built: its series are on /metrics
    # before any request, with a row per replica.
    text = state.metrics.render().decode()
    assert 'blink_breaker_state{replica="a",route="auto",tier="t"}' in text
    assert 'blink_breaker_state{replica="b",route="auto",tier="t"}' in text


def test_logging_keeps_blinks_info_and_quiets_other_libraries() -> None:
    import logging

    from blink.serve import configure_logging

    root, blink_log = logging.getLogger(), logging.getLogger("blink")
    saved = root.level, blink_log.level
    try:
        configure_logging("info")
        assert logging.getLogger("blink.engine").isEnabledFor(logging.INFO)
        assert not logging.getLogger("onnxruntime").isEnabledFor(logging.INFO)  # library chatter
        assert logging.getLogger("onnxruntime").isEnabledFor(logging.WARNING)
        configure_logging("debug")
        assert logging.getLogger("some_library").isEnabledFor(logging.DEBUG)
        configure_logging("error")
        assert not logging.getLogger("blink.engine").isEnabledFor(logging.WARNING)
    finally:
        root.setLevel(saved[0])
        blink_log.setLevel(saved[1])
