"""Non-generative endpoints over the model server: /v1/embeddings, /v1/classify, /v1/moderations."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response

from blink.gateway.http.dispatch import Routes
from blink.gateway.http.json_response import json_response
from blink.gateway.http.request_parsing import parse_json_object, require_json, validate
from blink.gateway.model_endpoints.inputs import check_token_counts, input_list
from blink.gateway.safety.checks import SafetyPipeline, Verdict
from blink.modelserver.server import ServedModel, ServedModels
from blink.protocol.errors import InvalidRequestError, ModelNotFoundError
from blink.protocol.model_endpoints import ClassifyRequest, EmbeddingRequest, ModerationRequest

# The name /v1/moderations answers to: the configured checks together, not any one model.
MODERATION_MODEL = "blink-safety"



def _pick(models: ServedModels, name: str | None, kind: str) -> ServedModel:
    if name:
        return models.get(name, kind)
    model = models.default(kind)
    if model is None:
        raise ModelNotFoundError(f"No {kind} model is configured on this server.", param="model")
    return model


def _encode(rows: np.ndarray, fmt: str) -> list[object]:
    if fmt == "base64":  # little-endian float32, as OpenAI sends it
        return [base64.b64encode(r.astype("<f4").tobytes()).decode() for r in rows]
    return list(rows)  # numpy rows: orjson writes them directly (OPT_SERIALIZE_NUMPY)


def build_models_router(models: ServedModels, moderation: SafetyPipeline, max_inputs: int) -> Routes:
    router = Routes()

    @router.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        require_json(request.headers.get("content-type"))
        body = validate(EmbeddingRequest, parse_json_object(await request.body()))
        model = _pick(models, body.model, "encoder")
        texts = input_list(body.input, max_inputs)
        if body.dimensions is not None and body.dimensions > model.dim:
            raise InvalidRequestError(f"'dimensions' must be at most {model.dim} for '{model.name}'.",
                                      param="dimensions")  # fmt: skip
        rows, counts = await model.run_counted(texts)
        tokens = sum(check_token_counts(model, counts))
        if body.dimensions is not None and body.dimensions < model.dim:  # Matryoshka-style cut, renormalised
            rows = rows[:, : body.dimensions]
            rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(_encode(rows, body.encoding_format))]
        return json_response({"object": "list", "data": data, "model": model.name,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
                             option=orjson.OPT_SERIALIZE_NUMPY)

    @router.post("/v1/classify")
    async def classify(request: Request) -> Response:
        require_json(request.headers.get("content-type"))
        body = validate(ClassifyRequest, parse_json_object(await request.body()))
        model = _pick(models, body.model, "classifier")
        texts = input_list(body.input, max_inputs)
        probs, counts = await model.run_counted(texts)
        tokens = sum(check_token_counts(model, counts))
        data = []
        for i, row in enumerate(probs.tolist()):
            best = int(np.argmax(row))
            data.append({"index": i, "label": model.labels[best], "score": row[best],
                         "scores": dict(zip(model.labels, row, strict=True))})  # fmt: skip
        return json_response({"object": "list", "model": model.name, "data": data,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
                             option=orjson.OPT_SERIALIZE_NUMPY)

    @router.post("/v1/moderations")
    async def moderations(request: Request) -> Response:
        require_json(request.headers.get("content-type"))
        body = validate(ModerationRequest, parse_json_object(await request.body()))
        if body.model is not None and body.model != MODERATION_MODEL:
            raise ModelNotFoundError(f"The moderation model '{body.model}' does not exist; served: "
                                     f"['{MODERATION_MODEL}'] (the configured safety checks).", param="model")  # fmt: skip
        texts = input_list(body.input, max_inputs)
        results = [_moderation(await moderation.check(t), moderation.thresholds) for t in texts]
        return json_response({"id": f"modr-{uuid.uuid4().hex}", "model": MODERATION_MODEL,
                              "created": int(time.time()), "results": results},
                             option=orjson.OPT_SERIALIZE_NUMPY)

    return router


def _moderation(v: Verdict, thresholds: Mapping[str, float]) -> dict[str, object]:
    """Only the categories a configured check covers: one no check looked at is left out (the
    ``openai`` client reads a missing category as None), never reported as a confident 0.0. A
    category is true when its score reaches its threshold, and ``flagged`` follows, whatever the
    gateway's own policy does with it (PII in ``redact`` mode is redacted there, not refused)."""
    scores = {c: v.scores.get(c, 0.0) for c in thresholds}
    categories = {c: scores[c] >= t for c, t in thresholds.items()}
    return {"flagged": any(categories.values()), "categories": categories, "category_scores": scores,
            "category_applied_input_types": {c: ["text"] for c in thresholds}}  # fmt: skip
