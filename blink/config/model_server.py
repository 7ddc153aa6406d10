"""Settings of the model server (``model_server:``): small ONNX encoders and classifiers with dynamic batching.

```yaml
model_server:
  embeddings: true                 # POST /v1/embeddings with the semantic cache's encoder
  models:                          # extra ONNX models; the encoder named by cache.semantic.model is implicit
    - {name: toxicity, kind: classifier, path: ~/models/toxic, labels: [ok, toxic], multi_label: false}
  max_batch_size: 32
  batch_window_ms: 2
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchingSettings(_Strict):
    # 1 turns dynamic batching off (each input its own model call).
    max_batch_size: int = Field(32, ge=1, le=1024)
    # The first input of a batch waits at most this long for company: small next to one model call
    # (benchmarks/RESULTS.md, "Figures behind the code's numbers", batcher).
    batch_window_ms: float = Field(2.0, ge=0.0, le=100.0)
    # Queued longer than this -> 504; more than max_queue waiting -> 503.
    timeout_s: float = Field(2.0, gt=0)
    max_queue: int = Field(4096, ge=1)


class ServedModelSettings(BatchingSettings):
    name: str
    kind: Literal["encoder", "classifier"] = "classifier"
    # A sentence-transformers folder / known name (encoder) or a folder with tokenizer.json plus
    # model.onnx or a Hugging Face sequence-classification checkpoint (classifier).
    path: str
    labels: list[str] = Field(default_factory=list)
    multi_label: bool = False
    quantize: bool = False


class ModelServerSettings(BatchingSettings):
    """Batching knobs here apply to the implicit encoder (the semantic cache's model)."""

    embeddings: bool = False
    models: list[ServedModelSettings] = Field(default_factory=list)
    # Inputs per /v1/embeddings or /v1/classify request (OpenAI allows 2048).
    max_inputs: int = Field(2048, ge=1)
