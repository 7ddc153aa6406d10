"""/v1/embeddings through the real openai client equals the sentence-transformers reference."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
from live_server import LiveServer

from blink.gateway.cache.embedder import resolve_model_dir

TEXTS = [
    "How do I reset my password?",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "ok",
    "Welche Zeitzone hat Berlin im Sommer?",
]


def reference(texts: list[str]) -> np.ndarray:
    """sentence-transformers' recipe in torch: mean pooling over the mask, then L2 normalisation."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model_dir("all-MiniLM-L6-v2")
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()


@pytest.fixture(scope="module")
def ref() -> np.ndarray:
    return reference(TEXTS)


@pytest.fixture
def client(models_gateway: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{models_gateway.url}/v1", api_key="x", max_retries=0)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def test_float_embeddings_match_the_reference(client: openai.OpenAI, ref: np.ndarray) -> None:
    resp = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS, encoding_format="float")
    got = np.asarray([d.embedding for d in sorted(resp.data, key=lambda d: d.index)])
    assert got.shape == (4, 384) and resp.model == "all-MiniLM-L6-v2"
    assert _cos(got, ref).min() >= 0.999
    assert resp.usage.prompt_tokens == resp.usage.total_tokens > len(TEXTS)


def test_base64_default_of_the_client_and_a_single_string(client: openai.OpenAI, ref: np.ndarray) -> None:
    # The openai client asks for base64 by default and decodes it itself.
    resp = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[1])
    assert len(resp.data) == 1 and _cos(np.asarray(resp.data[0].embedding), ref[1]) >= 0.999


def test_explicit_base64_is_little_endian_float32(models_gateway: LiveServer, ref: np.ndarray) -> None:
    r = httpx.post(f"{models_gateway.url}/v1/embeddings", json={"input": TEXTS[:2], "encoding_format": "base64"})
    rows = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]]
    assert r.status_code == 200 and _cos(np.stack(rows), ref[:2]).min() >= 0.999


def test_dimensions_truncates_and_renormalises(client: openai.OpenAI, ref: np.ndarray) -> None:
    resp = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS, dimensions=64, encoding_format="float")
    got = np.asarray([d.embedding for d in resp.data])
    assert got.shape == (4, 64)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cut = ref[:, :64] / np.linalg.norm(ref[:, :64], axis=1, keepdims=True)
    assert _cos(got, cut).min() >= 0.999


def test_concurrent_requests_each_get_their_own_rows(models_gateway: LiveServer, ref: np.ndarray) -> None:
    import concurrent.futures as cf

    def one(i: int) -> np.ndarray:
        r = httpx.post(f"{models_gateway.url}/v1/embeddings", json={"input": [TEXTS[i % 4], TEXTS[(i + 1) % 4]]})
        return np.asarray([d["embedding"] for d in r.json()["data"]])

    with cf.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(one, range(16)))
    for i, rows in enumerate(outs):
        assert _cos(rows, ref[[i % 4, (i + 1) % 4]]).min() >= 0.999
    metrics = httpx.get(f"{models_gateway.url}/metrics").text
    assert 'blink_modelserver_batches_total{model="all-MiniLM-L6-v2"}' in metrics


@pytest.mark.parametrize(
    ("body", "param", "status"),
    [
        ({"input": ""}, "input", 400),
        ({"input": []}, "input", 400),
        ({"input": ["fine", "  "]}, "input[1]", 400),
        ({"input": ["x"] * 65}, "input", 400),  # max_inputs is 64 in this gateway
        ({"input": "word " * 400}, "input", 400),  # 400 tokens > 256
        ({"input": 42}, "input", 400),
        ({"input": [1, 2, 3]}, "input", 400),
        ({}, "input", 400),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", 400),
        ({"input": "x", "dimensions": 0}, "dimensions", 400),
        ({"input": "x", "dimensions": 385}, "dimensions", 400),
        ({"input": "x", "model": "nope"}, "model", 404),
    ],
)
def test_bad_input_is_an_openai_style_error(models_gateway: LiveServer, body: dict, param: str, status: int) -> None:
    r = httpx.post(f"{models_gateway.url}/v1/embeddings", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]
