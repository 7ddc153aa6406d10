"""kernels/build.py: a killed build's lock must not hang engine start; checkouts build apart;
a failed build means aten."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from blink.engine.kernels import build

# A library with no torch code at all: it compiles in about a second, yet goes through the same
# cpp_extension.load path as the real kernels.
_TRIVIAL = "extern \"C\" int blink_test_answer() { return 42; }\n"


@pytest.fixture(autouse=True)
def _own_extensions_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))


def test_a_killed_builds_lock_does_not_block_the_next_build(tmp_path: Path) -> None:
    src = tmp_path / "answer.cpp"
    src.write_text(_TRIVIAL)
    name = f"blink_test_answer_{os.getpid()}"
    directory = build.build_directory(name, [src], build.cflags())
    directory.mkdir(parents=True)
    (directory / "lock").touch()  # what torch leaves behind when its builder is killed mid-build
    assert build.load_extension(name, [src]) is True
    assert not (directory / "lock").exists()
    assert (directory / f"{name}.so").exists()


def test_each_checkout_and_source_version_builds_in_its_own_directory(tmp_path: Path) -> None:
    one, two = tmp_path / "one" / "k.cpp", tmp_path / "two" / "k.cpp"
    for src in (one, two):
        src.parent.mkdir()
        src.write_text(_TRIVIAL)
    flags = build.cflags()
    assert build.build_directory("k", [one], flags) == build.build_directory("k", [one], flags)
    assert build.build_directory("k", [one], flags) != build.build_directory("k", [two], flags)
    before = build.build_directory("k", [one], flags)
    one.write_text(_TRIVIAL + "// edited\n")
    assert build.build_directory("k", [one], flags) != before
    assert build.build_directory("k", [one], flags + ["-DX"]) != build.build_directory("k", [one], flags)


def test_loading_a_library_leaves_every_build_directory_where_it_was(tmp_path: Path) -> None:
    """The directory (its digest) must not depend on which libraries this process loaded before,
    or a process that loads them in another order rebuilds what was prebuilt."""
    src, other = tmp_path / "answer.cpp", tmp_path / "other.cpp"
    src.write_text(_TRIVIAL)
    other.write_text(_TRIVIAL.replace("42", "43"))
    before = build.build_directory("k", [src], build.cflags())
    for name in (f"blink_test_first_{os.getpid()}", f"blink_test_second_{os.getpid()}"):
        assert build.load_extension(name, [other]) is True
    assert build.build_directory("k", [src], build.cflags()) == before


def test_a_source_that_does_not_compile_reports_false(tmp_path: Path) -> None:
    bad = tmp_path / "broken.cpp"
    bad.write_text("this is not C++;\n")
    assert build.load_extension(f"blink_test_broken_{os.getpid()}", [bad]) is False


def _stale_sibling(directory: Path, suffix: str, age: float) -> Path:
    sibling = directory.parent / f"{directory.name.rsplit('-', 1)[0]}-{suffix}"
    sibling.mkdir()
    (sibling / "k.so").write_bytes(b"old build")
    marker = sibling / "blink-build.flock"
    marker.touch()
    stamp = marker.stat().st_mtime - age
    os.utime(marker, (stamp, stamp))
    return sibling


def test_loading_removes_sibling_builds_unused_for_a_week_and_keeps_the_rest(tmp_path: Path) -> None:
    import fcntl

    src = tmp_path / "answer.cpp"
    src.write_text(_TRIVIAL)
    name = f"blink_test_prune_{os.getpid()}"
    directory = build.build_directory(name, [src], build.cflags())
    directory.parent.mkdir(parents=True, exist_ok=True)
    week = build.STALE_SECONDS
    stale = _stale_sibling(directory, "0" * 16, week + 60)
    recent = _stale_sibling(directory, "1" * 16, week - 3600)
    busy = _stale_sibling(directory, "2" * 16, week + 60)
    foreign = directory.parent / f"{name}-notadigest"  # not a directory this module made
    foreign.mkdir()
    with open(busy / "blink-build.flock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a builder inside
        assert build.load_extension(name, [src]) is True
    assert not stale.exists()
    assert recent.exists() and busy.exists() and foreign.exists()
    assert (directory / f"{name}.so").exists()
    # The loaded directory's own marker reads as just used.
    assert os.stat(directory / "blink-build.flock").st_mtime > os.stat(recent / "blink-build.flock").st_mtime
