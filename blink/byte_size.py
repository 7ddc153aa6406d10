"""Byte sizes as people write them (``"512MiB"``, ``"2GB"``), for the engine's and the server's settings.

A top-level module so that both ``blink.engine`` (which must not import the config layer) and
``blink.config`` declare their size fields with one parser.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40,
}  # fmt: skip
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: Any) -> Any:
    """``"512MiB"`` -> 536870912; ints pass through; anything else is left for pydantic to reject."""
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"not a byte size: {value!r} (try '512MiB' or '2GB')")
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return value


ByteSize = Annotated[int, BeforeValidator(parse_bytes), Field(gt=0)]
