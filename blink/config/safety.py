"""Settings of the safety filter (``safety:``); its classifiers run in the model server (model_server.py).

```yaml
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
