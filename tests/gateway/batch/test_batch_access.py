"""Tenant isolation in the Batch API: the access matrix over a real gateway with real keys.

Files and batches belong to the key that made them. Another key, of another tenant or of the same
one, gets exactly the 404 of an id that does not exist (no existence oracle) for metadata,
content, delete, batch create, retrieve, cancel and output files, and never sees them in a
list; an ``admin`` key sees and manages everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from batch_helpers import chat_line, jsonl, read_jsonl, wait_batch
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.batch import BatchSettings
from blink.config.gateway import AuthSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.gateway.auth.keys import SCOPE_ADMIN, ApiKeyStore
from blink.serve import build_app


@dataclass
class Keys:
    owner: openai.OpenAI  # tenant A
    same_tenant: openai.OpenAI  # tenant A, another key
    other_tenant: openai.OpenAI  # tenant B
    admin: openai.OpenAI  # tenant ops, admin scope


@pytest.fixture(scope="module")
def server(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    tmp = tmp_path_factory.mktemp("batch-access")
    settings = Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url)],
        auth=AuthSettings(enabled=True, keys_db=str(tmp / "keys.db")),
        batch=BatchSettings(path=str(tmp / "batch.db"), max_concurrency=4),
    )
    with LiveServer(build_app(settings)) as live:
        yield live, tmp / "keys.db"


@pytest.fixture(scope="module")
def keys(server: tuple[LiveServer, Path]) -> Keys:
    live, keys_db = server
    store = ApiKeyStore(keys_db)

    def client(tenant: str, scopes: list[str] | None = None) -> openai.OpenAI:
        _, secret = store.create(tenant, scopes=scopes)
        return openai.OpenAI(base_url=f"{live.url}/v1", api_key=secret, max_retries=0)

    return Keys(client("tenant-a"), client("tenant-a"), client("tenant-b"), client("ops", [SCOPE_ADMIN]))


def _upload(client: openai.OpenAI, lines: list[dict[str, Any]]) -> str:
    return client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch").id


def _line(cid: str, user: str = "") -> dict[str, Any]:
    line = chat_line(cid, "hello", model="fake")
    if user:  # FakeUpstream reads its behaviour from ``user``
        line["body"]["user"] = user
    return line


def _not_found(param: str, call: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """The 404 a missing id gets: same status, type, code and param, nothing else to tell them apart."""
    with pytest.raises(openai.NotFoundError) as exc:
        call(*args, **kwargs)
    err = exc.value.body
    assert isinstance(err, dict)
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "not_found", param)


def _file_ids(client: openai.OpenAI) -> set[str]:
    return {f.id for f in client.files.list()}


def _batch_ids(client: openai.OpenAI) -> set[str]:
    return {b.id for b in client.batches.list(limit=100)}


def test_other_keys_get_404_for_everything_the_owner_made(keys: Keys) -> None:
    owner = keys.owner
    file_id = _upload(owner, [_line("a"), _line("b")])
    done = wait_batch(owner, owner.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                                  completion_window="24h").id)
    assert done.status == "completed" and done.output_file_id
    output_id = done.output_file_id
    assert len(read_jsonl(owner, output_id)) == 2  # the batch's owner reads its output
    # A missing id, for comparison: the other keys' answers must look exactly like these.
    _not_found("file_id", owner.files.retrieve, "file-missing")
    _not_found("batch_id", owner.batches.retrieve, "batch_missing")

    for other in (keys.same_tenant, keys.other_tenant):
        for fid in (file_id, output_id):
            _not_found("file_id", other.files.retrieve, fid)
            _not_found("file_id", other.files.content, fid)
            _not_found("file_id", other.files.delete, fid)
        _not_found("input_file_id", other.batches.create, input_file_id=file_id, endpoint="/v1/chat/completions",
                   completion_window="24h")
        _not_found("batch_id", other.batches.retrieve, done.id)
        _not_found("batch_id", other.batches.cancel, done.id)
        _not_found("after", other.batches.list, after=done.id)
        _not_found("after", other.files.list, after=file_id)
        assert not {file_id, output_id} & _file_ids(other)
        assert done.id not in _batch_ids(other)

    # Nothing the others tried changed the owner's objects.
    assert owner.files.retrieve(file_id).id == file_id
    assert {file_id, output_id} <= _file_ids(owner)
    assert owner.batches.retrieve(done.id).status == "completed"


def test_lists_show_only_the_callers_own_objects(keys: Keys) -> None:
    mine = _upload(keys.owner, [_line("x")])
    colleague = _upload(keys.same_tenant, [_line("y")])
    stranger = _upload(keys.other_tenant, [_line("z")])
    theirs = keys.other_tenant.batches.create(input_file_id=stranger, endpoint="/v1/chat/completions",
                                              completion_window="24h").id
    own_files = _file_ids(keys.owner)
    assert mine in own_files and colleague not in own_files and stranger not in own_files
    assert theirs not in _batch_ids(keys.owner) and theirs in _batch_ids(keys.other_tenant)
    assert colleague in _file_ids(keys.same_tenant) and mine not in _file_ids(keys.same_tenant)


def test_cancel_by_another_key_is_404_and_leaves_the_batch_running(keys: Keys) -> None:
    slow = [_line(f"s{i}", user="tokens=40;delay=0.05") for i in range(40)]
    batch = keys.owner.batches.create(input_file_id=_upload(keys.owner, slow), endpoint="/v1/chat/completions",
                                      completion_window="24h")
    for other in (keys.same_tenant, keys.other_tenant):
        _not_found("batch_id", other.batches.cancel, batch.id)
    assert keys.owner.batches.retrieve(batch.id).status in ("validating", "in_progress")
    cancelled = keys.owner.batches.cancel(batch.id)  # its owner may
    assert cancelled.status in ("cancelling", "cancelled")
    assert wait_batch(keys.owner, batch.id).status == "cancelled"


def test_admin_sees_and_manages_every_tenants_objects(keys: Keys) -> None:
    admin, owner = keys.admin, keys.owner
    file_id = _upload(owner, [_line("a")])
    done = wait_batch(owner, owner.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                                  completion_window="24h").id)
    assert done.output_file_id
    assert admin.files.retrieve(file_id).id == file_id
    assert admin.files.content(file_id).content == jsonl([_line("a")])
    assert len(read_jsonl(admin, done.output_file_id)) == 1
    assert {file_id, done.output_file_id} <= _file_ids(admin)
    assert admin.batches.retrieve(done.id).id == done.id and done.id in _batch_ids(admin)
    # A batch the admin makes from the tenant's file is the admin's (the owner does not see it).
    own = wait_batch(admin, admin.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                                 completion_window="24h").id)
    assert own.status == "completed" and own.id not in _batch_ids(owner)
    running = owner.batches.create(input_file_id=_upload(owner, [_line(f"s{i}", "tokens=40;delay=0.05")
                                                                   for i in range(40)]),
                                   endpoint="/v1/chat/completions", completion_window="24h")
    assert admin.batches.cancel(running.id).status in ("cancelling", "cancelled")
    assert wait_batch(owner, running.id).status == "cancelled"
    deleted = admin.files.delete(file_id)
    assert deleted.id == file_id and deleted.deleted
    _not_found("file_id", owner.files.retrieve, file_id)


def test_owner_deletes_its_file(keys: Keys) -> None:
    file_id = _upload(keys.owner, [_line("a")])
    deleted = keys.owner.files.delete(file_id)
    assert (deleted.id, deleted.object, deleted.deleted) == (file_id, "file", True)
    _not_found("file_id", keys.owner.files.retrieve, file_id)
    _not_found("file_id", keys.owner.files.content, file_id)
    _not_found("file_id", keys.owner.files.delete, file_id)
    assert file_id not in _file_ids(keys.owner)
