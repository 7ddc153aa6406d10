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


def test_a_source_that_does_not_compile_reports_false(tmp_path: Path) -> None:
    bad = tmp_path / "broken.cpp"
    bad.write_text("this is not C++;\n")
    assert build.load_extension(f"blink_test_broken_{os.getpid()}", [bad]) is False
