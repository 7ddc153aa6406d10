"""Settings of the model server (``model_server:``) and the safety filter (``safety:``).

```yaml
model_server:
  embeddings: true                 # POST /v1/embeddings with the semantic cache's encoder
  models:                          # extra ONNX models; the encoder named by cache.semantic.model is implicit
    - {name: toxicity, kind: classifier, path: ~/models/toxic, labels: [ok, toxic], multi_label: false}
  max_batch_size: 32
  batch_window_ms: 2
safety:
  enabled: true
  mode: async                      # async (off the hot path) | blocking (input + per-sentence output)
  routes: {big: blocking}          # per served model name
  blocklist: [some phrase]
  pii: redact                      # redact | flag | ignore
  profanity: auto                  # alt-profanity-check (extra `moderation`): auto = in /v1/moderations when installed; on = also in the request path
  classifier: toxicity             # a classifier from model_server.models
  webhook: http://127.0.0.1:9000/flagged
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SafetyMode = Literal["async", "blocking", "off"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchingSettings(_Strict):
    # 1 turns dynamic batching off (each input its own model call).
    max_batch_size: int = Field(32, ge=1, le=1024)
    # The first input of a batch waits at most this long for company (≤ 2 ms: small next to a ~7 ms call).
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


class SafetySettings(_Strict):
    enabled: bool = False
    mode: Literal["async", "blocking"] = "async"
    # Per served model name: async | blocking | off.
    routes: dict[str, SafetyMode] = Field(default_factory=dict)
    # Case-insensitive phrases and regexes that flag a text (category "blocklist").
    blocklist: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    prompt_injection: bool = True
    pii: Literal["redact", "flag", "ignore"] = "redact"
    # Offensive language with alt-profanity-check (category "profanity"), the offline classifier
    # of ``pip install 'blink-serve[moderation]'``: auto = /v1/moderations uses it when installed;
    # on = required, and the request path's filter (async/blocking) checks it too.
    profanity: Literal["auto", "on", "off"] = "auto"
    # A classifier served by the model server; labels other than ``safe_labels`` at or above
    # ``threshold`` flag the text (the profanity score too).
    classifier: str | None = None
    safe_labels: list[str] = Field(default_factory=lambda: ["safe", "ok", "neutral", "LABEL_0"])
    threshold: float = Field(0.5, gt=0.0, le=1.0)
    webhook: str | None = None
