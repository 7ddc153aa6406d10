"""Where smart-turn v3's ONNX file comes from, without installing ``pipecat-ai``.

The model ships only inside the ``pipecat-ai`` wheel, which pulls in a large dependency tree.
``voice.smart_turn: pipecat`` takes the file from an installed pipecat-ai if there is one;
otherwise ``fetch_smart_turn`` downloads that one wheel with pip (``--no-deps``: nothing is
installed), extracts the .onnx into ``~/.cache/blink/`` and checks its SHA-256.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# The release whose model was measured (benchmarks/voice_latency.py --smart-turn) and tested.
PIPECAT_VERSION = "1.14.0"
MODEL_NAME = "smart-turn-v3.2-cpu.onnx"
_WHEEL_MEMBER = f"pipecat/audio/turn/smart_turn/data/{MODEL_NAME}"
# sha256 of that file in pipecat_ai-1.14.0-py3-none-any.whl.
MODEL_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
# One 12 MB wheel; generous for a slow mirror, bounded so a start-up never hangs on it.
_PIP_TIMEOUT_S = 600


class SmartTurnUnavailable(RuntimeError):
    """The smart-turn model file cannot be found or fetched (the message says why)."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "blink"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def installed_model() -> Path | None:
    """The file inside an installed pipecat-ai (any version), if there is one."""
    try:
        spec = importlib.util.find_spec("pipecat.audio.turn.smart_turn.data")
    except Exception:  # a parent package failing to import (its own dependencies) means not usable
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_NAME
    return path if path.is_file() else None


def fetch_smart_turn(wheel: Path | None = None) -> Path:
    """The checked copy in the cache; downloaded first (or taken from ``wheel``) when missing."""
    target = cache_dir() / MODEL_NAME
    if target.is_file() and _sha256(target) == MODEL_SHA256:
        return target
    with tempfile.TemporaryDirectory(prefix="blink-smart-turn-") as tmp:
        if wheel is None:
            wheel = _download(Path(tmp))
        try:
            with zipfile.ZipFile(wheel) as z:
                data = z.read(_WHEEL_MEMBER)
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            raise SmartTurnUnavailable(f"{wheel} has no {_WHEEL_MEMBER}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != MODEL_SHA256:
        raise SmartTurnUnavailable(f"{MODEL_NAME} from {wheel.name} does not match the pinned SHA-256")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(f".part{os.getpid()}")
    part.write_bytes(data)
    os.replace(part, target)  # atomic: a concurrent reader sees the old file or the whole new one
    return target


def _download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", f"pipecat-ai=={PIPECAT_VERSION}", "--no-deps",
           "--only-binary=:all:", "--dest", str(dest), "--quiet", "--disable-pip-version-check"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SmartTurnUnavailable(f"pip download pipecat-ai=={PIPECAT_VERSION} failed: {exc}") from exc
    wheels = sorted(dest.glob("pipecat_ai-*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise SmartTurnUnavailable(f"pip download pipecat-ai=={PIPECAT_VERSION} failed: {last}")
    return wheels[0]


def resolve_smart_turn(spec: str) -> Path:
    """``"pipecat"``: an installed pipecat-ai's file, else the fetched copy; anything else: a path."""
    if spec == "pipecat":
        return installed_model() or fetch_smart_turn()
    path = Path(spec).expanduser()
    if not path.is_file():
        raise SmartTurnUnavailable(f"voice.smart_turn: {spec} is not a file (use 'pipecat' or an .onnx path)")
    return path
