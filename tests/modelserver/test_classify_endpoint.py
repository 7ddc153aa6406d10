"""/v1/classify: an ONNX sequence classifier, batched, with the label names from its config."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
from live_server import LiveServer
from modelserver_helpers import LABELS

TEXTS = ["you are wonderful", "buy cheap pills now!!!", "the meeting moved to 3pm", "x"]


def reference(path: Path, texts: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(path)
    model = BertForSequenceClassification.from_pretrained(path).eval()
    with torch.inference_mode():
        return torch.softmax(model(**tok(texts, padding=True, return_tensors="pt")).logits, -1).numpy()


def test_classify_returns_label_probabilities_per_input(models_gateway: LiveServer, tiny_classifier: Path) -> None:
    r = httpx.post(f"{models_gateway.url}/v1/classify", json={"model": "tiny-cls", "input": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    got = np.asarray([[d["scores"][label] for label in LABELS] for d in body["data"]])
    np.testing.assert_allclose(got, reference(tiny_classifier, TEXTS), atol=1e-4)
    for d, row in zip(body["data"], got, strict=True):
        assert d["label"] == LABELS[int(row.argmax())] and abs(d["score"] - row.max()) < 1e-6
    assert [d["index"] for d in body["data"]] == [0, 1, 2, 3] and body["usage"]["prompt_tokens"] > 4


def test_classify_default_model_and_errors(models_gateway: LiveServer) -> None:
    ok = httpx.post(f"{models_gateway.url}/v1/classify", json={"input": "hello"})
    assert ok.status_code == 200 and ok.json()["model"] == "tiny-cls"
    wrong_kind = httpx.post(f"{models_gateway.url}/v1/classify", json={"model": "all-MiniLM-L6-v2", "input": "hi"})
    assert wrong_kind.status_code == 404 and wrong_kind.json()["error"]["param"] == "model"
    empty = httpx.post(f"{models_gateway.url}/v1/classify", json={"input": []})
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "input"
    not_json = httpx.post(f"{models_gateway.url}/v1/classify", content=b"{nope")
    assert not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
