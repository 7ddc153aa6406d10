"""/v1/embeddings through the real openai client equals the sentence-transformers reference."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
from live_server import LiveServer

from blink.modelserver.embedder import resolve_model_dir

TEXTS = [
    "How do I reset my password?",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "ok",
    "Welche Zeitzone hat Berlin im Sommer?",
]
# The varied set: empty-ish, punctuation, emoji, accents, CJK, code, SQL, and a text of exactly the
# model's 256 word pieces (254 + [CLS] + [SEP]; one more is refused, see the bad-input cases).
VARIED = [
    "?", "\u200b", "🙂🙂", "é", "Ünïcödé façade naïve café", "日本語のテキストです。東京は首都です。",
    "def square(x: int) -> int:\n    return x ** 2  # squares x", "SELECT * FROM users WHERE id = 42;",
    "a " * 254, " ".join(["serving"] * 120),
]


def reference(texts: list[str]) -> np.ndarray:
    """sentence-transformers itself on the packaged folder (Transformer -> mean Pooling -> Normalize)."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(resolve_model_dir("all-MiniLM-L6-v2")), device="cpu")
    return model.encode(texts, normalize_embeddings=True)


@pytest.fixture(scope="module")
def refs() -> tuple[np.ndarray, np.ndarray]:
    rows = reference(TEXTS + VARIED)
    return rows[: len(TEXTS)], rows[len(TEXTS) :]


@pytest.fixture(scope="module")
def ref(refs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return refs[0]


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


def test_the_default_model_is_the_reference_on_a_varied_set(models_gateway: LiveServer, client: openai.OpenAI,
                                                          refs: tuple[np.ndarray, np.ndarray]) -> None:
    # No model named (the SDK always names one, so raw HTTP): the default encoder is the exact export.
    batched = httpx.post(f"{models_gateway.url}/v1/embeddings", json={"input": VARIED}, timeout=60).json()
    got = np.asarray([d["embedding"] for d in sorted(batched["data"], key=lambda d: d["index"])])
    assert batched["model"] == "all-MiniLM-L6-v2" and _cos(got, refs[1]).min() >= 0.999
    # One text per request (the unpadded single-text path), through the SDK's base64 default.
    one = [client.embeddings.create(model="all-MiniLM-L6-v2", input=t).data[0].embedding for t in VARIED]
    assert _cos(np.asarray(one), refs[1]).min() >= 0.999


def test_int8_is_served_only_under_its_own_name(client: openai.OpenAI, refs: tuple[np.ndarray, np.ndarray]) -> None:
    resp = client.embeddings.create(model="all-MiniLM-L6-v2-int8", input=VARIED, encoding_format="float")
    got = np.asarray([d.embedding for d in sorted(resp.data, key=lambda d: d.index)])
    cos = _cos(got, refs[1])
    assert resp.model == "all-MiniLM-L6-v2-int8" and got.shape == (len(VARIED), 384)
    assert cos.min() > 0.9 and cos.min() < 0.999  # close to the reference, but not it: never the default


def test_models_list_names_what_is_served(client: openai.OpenAI) -> None:
    served = {m.id: m for m in client.models.list()}
    assert {"fake", "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8", "tiny-cls"} <= set(served)
    assert client.models.retrieve("all-MiniLM-L6-v2-int8").id == "all-MiniLM-L6-v2-int8"
    assert served["all-MiniLM-L6-v2"].model_extra["max_model_len"] == 256


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
        ({"input": "a " * 255}, "input", 400),  # 257 tokens: one past the limit
        ({"input": [[1, 2], [3]]}, "input", 400),  # token arrays: refused by name
        ({"input": [1, 2, 3], "model": "all-MiniLM-L6-v2-int8"}, "input", 400),
        ({"input": 42}, "input", 400),
        ({"input": [1, 2, 3]}, "input", 400),
        ({}, "input", 400),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", 400),
        ({"input": "x", "dimensions": 0}, "dimensions", 400),
        ({"input": "x", "dimensions": 385}, "dimensions", 400),
        ({"input": "x", "model": "nope"}, "model", 404),
        ({"input": "x", "truncate": True}, "truncate", 400),  # unknown fields are refused, not ignored
    ],
)
def test_bad_input_is_an_openai_style_error(models_gateway: LiveServer, body: dict, param: str, status: int) -> None:
    r = httpx.post(f"{models_gateway.url}/v1/embeddings", json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]
    if isinstance(body.get("input"), list) and body["input"] and not isinstance(body["input"][0], str):
        assert "token arrays" in err["message"]
