"""Shared helpers for Batch API tests: build input files, wait for a batch, read result files."""

from __future__ import annotations

import time
from typing import Any

import openai
import orjson


def chat_line(custom_id: str, content: str, max_tokens: int = 8, model: str = "tiny") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": content}],
                     "max_tokens": max_tokens, "temperature": 0}}


def jsonl(lines: list[Any]) -> bytes:
    return b"".join((x if isinstance(x, bytes) else orjson.dumps(x)) + b"\n" for x in lines)


def wait_batch(client: openai.OpenAI, batch_id: str, timeout_s: float = 120.0,
               until: tuple[str, ...] = ("completed", "failed", "cancelled")) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in until:
            return batch
        assert time.monotonic() < deadline, f"batch stuck in {batch.status}: {batch.request_counts}"
        time.sleep(0.2)


def read_jsonl(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [orjson.loads(x) for x in client.files.content(file_id).content.splitlines() if x.strip()]
