from __future__ import annotations

import pytest

from blink.backends.openai_http import OpenAIHTTPBackend
from blink.backends.registry import BackendRegistry
from blink.protocol.errors import InvalidRequestError, ModelNotFoundError


def test_resolve_and_unknown_model() -> None:
    a, b = OpenAIHTTPBackend("a", "http://x/v1"), OpenAIHTTPBackend("b", "http://y/v1")
    reg = BackendRegistry()
    reg.add("a", a)
    reg.add("b", b)
    reg.add("b-alias", b)
    assert reg.resolve("a") is a and reg.resolve("b-alias") is b
    assert reg.backends() == [a, b]
    assert [c.id for c in reg.model_cards()] == ["a", "b", "b-alias"]
    with pytest.raises(ModelNotFoundError) as info:
        reg.resolve("c")
    assert info.value.status == 404 and info.value.param == "model" and info.value.code == "model_not_found"
    with pytest.raises(InvalidRequestError):
        reg.resolve(None)  # two models, no default
    with pytest.raises(ValueError):
        reg.add("a", b)


def test_default_model() -> None:
    a = OpenAIHTTPBackend("a", "http://x/v1")
    reg = BackendRegistry()
    reg.add("a", a)
    assert reg.resolve(None) is a
    reg2 = BackendRegistry(default_model="a")
    reg2.add("a", a)
    reg2.add("z", OpenAIHTTPBackend("z", "http://z/v1"))
    assert reg2.resolve(None) is a
