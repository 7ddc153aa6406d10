"""``/v1/files`` limits over a real gateway: file size (413 before the body is read, without
holding up other requests), the per-tenant storage quota, delete, expiry and the sweep."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from batch_helpers import chat_line, jsonl, wait_batch
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.batch import BatchSettings
from blink.config.gateway import AuthSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.serve import build_app

MAX_FILE = 64 * 1024
QUOTA = 100 * 1024
RETENTION_S = 3600


@pytest.fixture(scope="module")
def server(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    tmp = tmp_path_factory.mktemp("batch-files")
    settings = Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url)],
        auth=AuthSettings(enabled=True, keys_db=str(tmp / "keys.db")),
        batch=BatchSettings(path=str(tmp / "batch.db"), max_file_bytes=MAX_FILE, max_lines=500,
                            storage_quota_bytes=QUOTA, file_retention_s=RETENTION_S, min_expires_after_s=1,
                            sweep_interval_s=0.3),
    )
    with LiveServer(build_app(settings)) as live:
        yield live, tmp


def _key(server: tuple[LiveServer, Path], tenant: str) -> str:
    return ApiKeyStore(server[1] / "keys.db").create(tenant)[1]


def _client(server: tuple[LiveServer, Path], secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server[0].url}/v1", api_key=secret, max_retries=0)


def _lines_of(size: int) -> bytes:
    """A valid batch file of about ``size`` bytes."""
    one = jsonl([chat_line("c", "x" * 200, model="fake")])
    return b"".join(jsonl([chat_line(f"c{i}", "x" * 200, model="fake")]) for i in range(size // len(one)))


def _error(resp: httpx.Response, status: int, code: str, param: str | None) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["param"]) == (code, param), err


def test_oversize_upload_is_413_and_health_stays_up(server: tuple[LiveServer, Path]) -> None:
    url, secret = server[0].url, _key(server, "big")
    headers = {"authorization": f"Bearer {secret}"}
    health: list[int] = []
    stop = threading.Event()

    def poll_health() -> None:
        with httpx.Client(timeout=10) as h:
            while not stop.is_set():
                health.append(h.get(f"{url}/health").status_code)
                time.sleep(0.02)

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        with httpx.Client(timeout=30, headers=headers) as h:
            # Declared size over the limit: refused from the headers, before any of the body is read.
            big = _lines_of(MAX_FILE * 3)
            resp = h.post(f"{url}/v1/files", files={"file": ("big.jsonl", big)}, data={"purpose": "batch"})
            assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"
            # A body without a length (chunked), 150 MB if it were all sent: refused once the limit passes.

            def chunked() -> Iterator[bytes]:
                boundary = b"--xyz\r\n"
                yield boundary + b'Content-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n'
                for _ in range(150):
                    yield b"x" * (1 << 20)

            try:
                resp = h.post(f"{url}/v1/files", content=chunked(),
                              headers={"content-type": "multipart/form-data; boundary=xyz"})
                assert resp.status_code == 413
            except httpx.TransportError:
                pass  # the server answered 413 and closed while the client was still sending
            # The file part itself just over the limit (the framing fits in the allowance): 413 on the file.
            over = b"{}\n" * (MAX_FILE // 3 + 1)
            _error(h.post(f"{url}/v1/files", files={"file": ("o.jsonl", over)}, data={"purpose": "batch"}),
                   413, "request_too_large", "file")
            # One just under the limit is stored.
            ok = _lines_of(MAX_FILE - 2048)
            resp = h.post(f"{url}/v1/files", files={"file": ("ok.jsonl", ok)}, data={"purpose": "batch"})
            assert resp.status_code == 200 and resp.json()["bytes"] == len(ok)
            assert h.get(f"{url}/v1/files/{resp.json()['id']}/content").content == ok
    finally:
        stop.set()
        poller.join()
    assert health and set(health) == {200}


def test_bad_upload_fields_are_400(server: tuple[LiveServer, Path]) -> None:
    url = server[0].url
    good = jsonl([chat_line("a", "b", model="fake")])
    with httpx.Client(timeout=30, headers={"authorization": f"Bearer {_key(server, 'fields')}"}) as h:
        def upload(data: dict[str, str], content: bytes = good) -> httpx.Response:
            return h.post(f"{url}/v1/files", files={"file": ("a.jsonl", content)}, data={"purpose": "batch", **data})

        _error(upload({"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "10"}), 400,
               "invalid_value", "expires_after.anchor")
        _error(upload({"expires_after[anchor]": "created_at", "expires_after[seconds]": "0"}), 400,
               "invalid_value", "expires_after.seconds")
        _error(upload({"expires_after[anchor]": "created_at"}), 400, "invalid_value", "expires_after.seconds")
        _error(upload({"expires_after[anchor]": "created_at", "expires_after[seconds]": str(10**9)}), 400,
               "invalid_value", "expires_after.seconds")
        _error(upload({"expires_after[anchor]": "created_at", "expires_after[seconds]": "\u00b2"}), 400,
               "invalid_value", "expires_after.seconds")
        _error(upload({"user": "x"}), 400, "unknown_parameter", "user")
        _error(upload({}, b"{}\n" * 501), 400, "too_many_requests", "file")
        _error(upload({}, b"\n  \n"), 400, "empty_file", "file")
        # Bodies Starlette's multipart parser refuses: a 400 naming the file, never a 500.
        _error(h.post(f"{url}/v1/files", content=b"x", headers={"content-type": "multipart/form-data"}), 400,
               "invalid_multipart", "file")
        _error(h.post(f"{url}/v1/files", files=[("file", ("a.jsonl", good)), ("file", ("b.jsonl", good))],
                      data={"purpose": "batch"}), 400, "invalid_multipart", "file")


def test_storage_quota_is_per_tenant(server: tuple[LiveServer, Path]) -> None:
    first, second = _client(server, _key(server, "quota")), _client(server, _key(server, "quota"))
    stranger = _client(server, _key(server, "elsewhere"))
    part = _lines_of(40 * 1024)
    a = first.files.create(file=("a.jsonl", part), purpose="batch")
    first.files.create(file=("b.jsonl", part), purpose="batch")
    with pytest.raises(openai.APIStatusError) as exc:  # the tenant's third 40 KiB file, from its other key
        second.files.create(file=("c.jsonl", part), purpose="batch")
    assert exc.value.status_code == 413
    assert exc.value.body["code"] == "storage_quota_exceeded"  # type: ignore[index]
    assert stranger.files.create(file=("d.jsonl", part), purpose="batch").bytes == len(part)  # another tenant's room
    assert first.files.delete(a.id).deleted
    assert second.files.create(file=("c.jsonl", part), purpose="batch").bytes == len(part)  # room again


def test_expiry_hides_then_sweep_deletes(server: tuple[LiveServer, Path]) -> None:
    client = _client(server, _key(server, "expiry"))
    content = jsonl([chat_line("a", "b", model="fake")])
    kept = client.files.create(file=("kept.jsonl", content), purpose="batch")
    assert kept.expires_at == kept.created_at + RETENTION_S  # the server's default retention
    short = client.files.create(file=("short.jsonl", content), purpose="batch",
                                expires_after={"anchor": "created_at", "seconds": 1})
    assert short.expires_at == short.created_at + 1
    assert client.files.retrieve(short.id).id == short.id
    deadline = time.monotonic() + 30
    while True:
        try:
            client.files.retrieve(short.id)
        except openai.NotFoundError:
            break
        assert time.monotonic() < deadline, "the file did not expire"
        time.sleep(0.2)
    with pytest.raises(openai.NotFoundError):
        client.files.content(short.id)
    assert short.id not in {f.id for f in client.files.list()}
    db = server[1] / "batch.db"
    while True:  # the sweep frees the rows (and the tenant's quota), not only hides them
        with sqlite3.connect(db) as conn:
            left = conn.execute("SELECT COUNT(*) FROM batch_file_chunks WHERE file_id = ?", (short.id,)).fetchone()
            rows = conn.execute("SELECT COUNT(*) FROM batch_files WHERE id = ?", (short.id,)).fetchone()
        if left[0] == 0 and rows[0] == 0:
            break
        assert time.monotonic() < deadline, "the sweep did not delete the expired file"
        time.sleep(0.2)
    assert client.files.retrieve(kept.id).id == kept.id


def test_batch_outputs_belong_to_the_owner_and_expire_with_retention(server: tuple[LiveServer, Path]) -> None:
    client = _client(server, _key(server, "outputs"))
    upload = client.files.create(file=("in.jsonl", jsonl([chat_line("a", "b", model="fake")])), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    client.files.delete(upload.id)  # the batch copied its lines when it was created: it still runs
    done = wait_batch(client, batch.id)
    assert done.status == "completed" and done.output_file_id
    # Stored objects' ids: a 16-digit time prefix, then 96 random bits (24 hex digits), not 32 or 64.
    for object_id, prefix in ((upload.id, "file-"), (batch.id, "batch_"), (done.output_file_id, "file-")):
        assert re.fullmatch(rf"{prefix}[0-9a-f]{{40}}", object_id), object_id
    out = client.files.retrieve(done.output_file_id)
    assert out.purpose == "batch_output" and out.expires_at == out.created_at + RETENTION_S


def test_list_files_pages(server: tuple[LiveServer, Path]) -> None:
    client = _client(server, _key(server, "pages"))
    ids = [client.files.create(file=(f"{i}.jsonl", jsonl([chat_line("a", "b", model="fake")])), purpose="batch").id
           for i in range(3)]
    newest = client.files.list(limit=2)
    assert [f.id for f in newest.data] == ids[:0:-1] and newest.has_more
    rest = client.files.list(limit=2, after=ids[1])
    assert [f.id for f in rest.data] == [ids[0]] and not rest.has_more
    assert [f.id for f in client.files.list(order="asc")] == ids
    assert [f.id for f in client.files.list(purpose="batch_output")] == []
    with pytest.raises(openai.BadRequestError):
        client.files.list(limit=0)
    for hostile in ("\u00b2", "1" * 5000):  # str.isdigit says yes, int() says no: a 400, not a 500
        for listing in (client.files.list, client.batches.list):
            with pytest.raises(openai.BadRequestError):
                listing(limit=hostile)  # type: ignore[arg-type]


@pytest.mark.parametrize(("path", "query", "param"), [
    ("/v1/batches", "after=batch_nope", "after"),  # named 'batch_id', which the client never sent
    ("/v1/files", "after=file-nope", "after"),
    ("/v1/batches", "limit=0", "limit"),
    ("/v1/files", "limit=abc", "limit"),
    ("/v1/files", "order=sideways", "order"),
])
def test_list_errors_name_the_query_parameter(server: tuple[LiveServer, Path], path: str, query: str,
                                              param: str) -> None:
    r = httpx.get(f"{server[0].url}{path}?{query}", headers={"authorization": f"Bearer {_key(server, 'lists')}"})
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param
