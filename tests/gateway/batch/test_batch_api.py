"""The Batch API end to end: a real gateway with the embedded tiny model, the real openai client.

Results are checked against the same requests sent one by one (greedy, so they must match).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from batch_helpers import chat_line, jsonl, read_jsonl, wait_batch
from live_server import LiveServer

from blink.config.batch import BatchSettings
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.serve import build_app


@pytest.fixture(scope="module")
def server(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("batch") / "batch.db"
    settings = Settings(
        server=ServerSettings(max_tokens_limit=64),
        models=[EmbeddedModel(name="tiny", kind="embedded", model=str(tiny_llama), dtype="float32", threads=1,
                              max_model_len=256, max_num_seqs=32)],
        batch=BatchSettings(path=str(db), max_concurrency=32),
    )
    with LiveServer(build_app(settings)) as live:
        yield live


@pytest.fixture()
def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_200_line_batch_matches_individual_greedy_requests(client: openai.OpenAI, server: LiveServer) -> None:
    prompts = {f"req-{i}": f"Question {i}: say something about {i * 7 % 13}" for i in range(200)}
    upload = client.files.create(file=("input.jsonl", jsonl([chat_line(c, p) for c, p in prompts.items()])),
                                 purpose="batch")
    assert upload.purpose == "batch" and upload.bytes > 0
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "eval"})
    assert batch.status in ("validating", "in_progress") and batch.metadata == {"job": "eval"}
    done = wait_batch(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (200, 200, 0)
    assert done.error_file_id is None
    out = read_jsonl(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(prompts)  # every line answered exactly once

    async def individually() -> dict[str, str]:
        aclient = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        sem = asyncio.Semaphore(8)

        async def one(cid: str, prompt: str) -> tuple[str, str]:
            async with sem:
                r = await aclient.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": prompt}], max_tokens=8, temperature=0)
                return cid, r.choices[0].message.content or ""

        pairs = await asyncio.gather(*(one(c, p) for c, p in prompts.items()))
        await aclient.close()
        return dict(pairs)

    expected = asyncio.run(individually())
    for o in out:
        assert o["error"] is None and o["response"]["status_code"] == 200
        body = o["response"]["body"]
        assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] > 0
        assert body["choices"][0]["message"]["content"] == expected[o["custom_id"]], o["custom_id"]
    assert len({o["id"] for o in out}) == 200


def test_malformed_lines_are_per_line_errors(client: openai.OpenAI) -> None:
    lines = [
        chat_line("good-1", "hello"),
        b"{not json",
        {"method": "POST", "url": "/v1/chat/completions", "body": {"model": "tiny", "messages": []}},
        chat_line("good-1", "duplicate id"),
        {**chat_line("bad-url", "x"), "url": "/v1/embeddings"},
        {"custom_id": "bad-body", "method": "POST", "url": "/v1/chat/completions", "body": "text"},
        chat_line("no-model", "x", model="missing-model"),
        chat_line("too-long", "x", max_tokens=10_000),
        {"custom_id": "bad-field", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": 9}},
        chat_line("good-2", "world"),
    ]
    upload = client.files.create(file=("mixed.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_batch(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (10, 2, 8)
    ok = read_jsonl(client, done.output_file_id)
    assert [o["custom_id"] for o in ok] == ["good-1", "good-2"]
    errors = read_jsonl(client, done.error_file_id)
    assert len(errors) == 8
    codes = [(e["custom_id"], (e["error"] or {}).get("code"), (e["response"] or {}).get("status_code"))
             for e in errors]
    assert codes == [
        (None, "invalid_json", None),
        (None, "missing_custom_id", None),
        ("good-1", "duplicate_custom_id", None),
        ("bad-url", "invalid_url", None),
        ("bad-body", "invalid_body", None),
        ("no-model", None, 404),
        ("too-long", None, 400),
        ("bad-field", None, 400),
    ]
    by_id = {e["custom_id"]: e for e in errors}
    assert by_id["no-model"]["response"]["body"]["error"]["code"] == "model_not_found"
    assert by_id["too-long"]["response"]["body"]["error"]["param"] == "max_tokens"
    assert by_id["bad-field"]["response"]["body"]["error"]["param"] == "temperature"


def test_completions_endpoint_and_listing(client: openai.OpenAI) -> None:
    earlier = _completed_batch(client)
    line = {"custom_id": "c1", "method": "POST", "url": "/v1/completions",
            "body": {"model": "tiny", "prompt": "Once upon", "max_tokens": 4, "temperature": 0}}
    upload = client.files.create(file=("c.jsonl", jsonl([line])), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/completions", completion_window="24h")
    done = wait_batch(client, batch.id)
    (out,) = read_jsonl(client, done.output_file_id)
    assert out["response"]["body"]["object"] == "text_completion"
    page = client.batches.list(limit=1)
    assert page.data[0].id == batch.id and page.has_more
    second = client.batches.list(limit=1, after=batch.id)
    assert second.data[0].id == earlier  # newest first, even within one second
    meta = client.files.retrieve(done.output_file_id or "")
    assert meta.purpose == "batch_output"


def test_cancel_stops_the_batch(client: openai.OpenAI) -> None:
    lines = [chat_line(f"long-{i}", f"tell a long story {i}", max_tokens=64) for i in range(300)]
    upload = client.files.create(file=("long.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    cancelled = client.batches.cancel(batch.id)
    assert cancelled.status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    assert done.request_counts is not None and done.request_counts.completed < 300
    assert len(read_jsonl(client, done.output_file_id)) == done.request_counts.completed
    with pytest.raises(openai.BadRequestError) as exc:  # a completed batch cannot be cancelled
        client.batches.cancel(_completed_batch(client))
    assert exc.value.body["code"] == "invalid_state"  # type: ignore[index]


def _completed_batch(client: openai.OpenAI) -> str:
    upload = client.files.create(file=("one.jsonl", jsonl([chat_line("x", "y", max_tokens=2)])), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    return wait_batch(client, batch.id).id


def _error(resp: httpx.Response, status: int, param: str | None) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]
    return err


def test_bad_inputs_are_openai_style_4xx(server: LiveServer, client: openai.OpenAI) -> None:
    base = f"{server.url}/v1"
    with httpx.Client(timeout=30) as h:
        _error(h.post(f"{base}/files", files={"file": ("a.jsonl", b"{}\n")}, data={"purpose": "fine-tune"}),
               400, "purpose")
        _error(h.post(f"{base}/files", data={"purpose": "batch"}), 400, "file")
        _error(h.post(f"{base}/files", json={"purpose": "batch"}), 400, "file")
        _error(h.post(f"{base}/files", files={"file": ("a.jsonl", b"  \n")}, data={"purpose": "batch"}), 400, "file")
        _error(h.get(f"{base}/files/file-nope"), 404, "file_id")
        _error(h.get(f"{base}/files/file-nope/content"), 404, "file_id")
        good = client.files.create(file=("g.jsonl", jsonl([chat_line("a", "b")])), purpose="batch").id
        post = h.post
        _error(post(f"{base}/batches", content=b"nope"), 400, None)
        _error(post(f"{base}/batches", json={"endpoint": "/v1/chat/completions"}), 400, "input_file_id")
        _error(post(f"{base}/batches", json={"input_file_id": good, "endpoint": "/v1/embeddings"}), 400, "endpoint")
        _error(post(f"{base}/batches", json={"input_file_id": good, "endpoint": "/v1/chat/completions",
                                             "completion_window": "1h"}), 400, "completion_window")
        _error(post(f"{base}/batches", json={"input_file_id": good, "endpoint": "/v1/chat/completions",
                                             "metadata": {"k": 1}}), 400, "metadata")
        _error(post(f"{base}/batches", json={"input_file_id": good, "endpoint": "/v1/chat/completions",
                                             "priority": "high"}), 400, "priority")
        _error(post(f"{base}/batches", json={"input_file_id": "file-nope", "endpoint": "/v1/chat/completions"}),
               404, "input_file_id")
        _error(h.get(f"{base}/batches/batch_nope"), 404, "batch_id")
        _error(post(f"{base}/batches/batch_nope/cancel"), 404, "batch_id")
        _error(h.get(f"{base}/batches", params={"limit": "0"}), 400, "limit")
        _error(h.get(f"{base}/batches", params={"limit": "abc"}), 400, "limit")
        _error(h.get(f"{base}/batches", params={"after": "batch_nope"}), 404, "after")
