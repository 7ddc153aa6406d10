"""``POST /tokenize`` and ``POST /detokenize``: vLLM's tokenizer endpoints, at the root as vLLM serves them.

They run no generation, so they bypass the pipeline (no cache, admission or routing); they are
still behind API keys (``AuthMiddleware`` guards them beside ``/v1/``) and a key's model list.
Only a backend that holds its model's tokenizer answers (``Tokenization``: the embedded engine);
for any other model the request is a 400 naming ``model`` rather than a guess from another
vocabulary.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import SamplingOptions, Tokenization
from blink.backends.registry import BackendRegistry
from blink.backends.request_body import request_from_body
from blink.gateway.auth.keys import PRINCIPAL_STATE_KEY, ApiKey, check_model_allowed
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.json_response import json_response
from blink.gateway.http.request_parsing import parse_json_object, require_json, validate
from blink.protocol.errors import InvalidRequestError
from blink.protocol.tokenization import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest

# The tokenize body's own switches; the rest of a chat body is what a chat request would carry.
_TOKENIZE_ONLY = ("add_special_tokens", "return_token_strs")


def add_tokenization_routes(router: Routes, registry: BackendRegistry) -> None:
    @router.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        require_json(request.headers.get("content-type"))
        raw = parse_json_object(await request.body())
        body = validate(TokenizeChatRequest if "messages" in raw else TokenizeCompletionRequest, raw)
        model, backend = _backend(request, registry, body.model)
        fields = {k: v for k, v in raw.items() if k not in _TOKENIZE_ONLY}
        if isinstance(body, TokenizeChatRequest):
            req = request_from_body("tokenize", model, "chat", SamplingOptions(), fields, messages=raw["messages"])
        else:
            req = request_from_body("tokenize", model, "completion", SamplingOptions(), fields, prompt=body.prompt)
        out = await backend.tokenize(req, body.add_special_tokens, body.return_token_strs)
        return json_response({"count": len(out.ids), "max_model_len": out.max_model_len, "tokens": out.ids,
                              "token_strs": out.pieces})

    @router.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        require_json(request.headers.get("content-type"))
        body = validate(DetokenizeRequest, parse_json_object(await request.body()))
        _, backend = _backend(request, registry, body.model)
        return json_response({"prompt": await backend.detokenize(body.tokens)})


def _backend(request: Request, registry: BackendRegistry, model: str | None) -> tuple[str, Tokenization]:
    """The model asked for (the default when none is named) and its backend, if this key may use it
    and it can tokenize."""
    name = model if model is not None else registry.default_model()
    principal: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
    check_model_allowed(principal, name)
    backend = registry.resolve(name)
    if not isinstance(backend, Tokenization):
        raise InvalidRequestError(
            f"Tokenization is not available for the model '{name}': its backend does not hold its tokenizer.",
            param="model", code="unsupported_parameter")
    return name, backend
