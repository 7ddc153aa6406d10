"""A sequence classifier: texts -> label probabilities, one ONNX call per batch.

The folder holds ``tokenizer.json`` and either ``model.onnx`` or a Hugging Face
``*ForSequenceClassification`` checkpoint, exported once (``dynamo=False``) into ``onnx_dir``.
Label names come from the config, else from the checkpoint's ``id2label``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from blink.modelserver.onnx_session import GraphInputs, PaddedTokenizer, one_thread_session

# BERT-family classifiers are trained on at most 512 positions.
DEFAULT_MAX_TOKENS = 512


def export_classifier(model_dir: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    ids = torch.ones(1, 8, dtype=torch.long)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.onnx")

    class _Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    with torch.no_grad():
        torch.onnx.export(
            _Logits().eval(), (ids, torch.ones_like(ids)), str(tmp), input_names=["input_ids", "attention_mask"],
            output_names=["logits"], dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"},
                                                   "logits": {0: "b"}},
            opset_version=17, dynamo=False,
        )  # fmt: skip
    tmp.replace(out)


def _onnx_file(model_dir: Path, onnx_dir: Path) -> Path:
    if (model_dir / "model.onnx").exists():
        return model_dir / "model.onnx"
    weights = model_dir / "model.safetensors"
    stamp = f"{model_dir.resolve()}:{weights.stat().st_mtime_ns if weights.exists() else 0}"
    out = onnx_dir / f"{model_dir.name}-cls-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.onnx"
    if not out.exists():
        export_classifier(model_dir, out)
    return out


class OnnxSequenceClassifier:
    def __init__(self, model: str, onnx_dir: str | Path, labels: list[str] | None = None, multi_label: bool = False,
                 max_tokens: int = DEFAULT_MAX_TOKENS) -> None:  # fmt: skip
        model_dir = Path(model).expanduser()
        self._session = one_thread_session(_onnx_file(model_dir, Path(onnx_dir).expanduser()))
        self._feed = GraphInputs(self._session)
        self.tokenizer = PaddedTokenizer(model_dir / "tokenizer.json", max_tokens)
        self.labels = labels or self._config_labels(model_dir)
        # Multi-label heads (moderation) score each label on its own (sigmoid); others softmax.
        self.multi_label = multi_label

    @staticmethod
    def _config_labels(model_dir: Path) -> list[str]:
        cfg = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").exists() else {}
        id2label = cfg.get("id2label") or {}
        return [id2label[k] for k in sorted(id2label, key=int)]

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.counted(texts)[0]

    def counted(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """Label probabilities and each text's full token count, from one tokenisation."""
        ids, mask, counts = self.tokenizer.encode(texts)
        (logits,) = self._session.run(None, self._feed(ids, mask))
        logits = logits.astype(np.float32)
        if len(self.labels) != logits.shape[1]:
            raise ValueError(f"{len(self.labels)} label names for {logits.shape[1]} model outputs")
        if self.multi_label:
            return 1.0 / (1.0 + np.exp(-logits)), counts
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), counts
