"""Build every kernel library at once, one compiler per library, before anything needs them.

An engine builds the kernels it uses when it starts (~20 s each cold on an idle core, minutes on a
loaded one); the test run calls this first so no single test's timeout pays for cold builds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from blink.engine.kernels.attention import decode_kernel_available
from blink.engine.kernels.decode_step import fused_decode_available
from blink.engine.kernels.int8_gemv import int8_gemv_available
from blink.engine.kernels.prefill_ops import prefill_ops_available
from blink.engine.kernels.rope_kv import rope_kv_available
from blink.engine.kernels.w8a8 import w8a8_available

log = logging.getLogger(__name__)

_LIBRARIES: dict[str, Callable[[], bool]] = {
    "decode_attention": decode_kernel_available,
    "int8_gemv": int8_gemv_available,
    "decode_step": fused_decode_available,
    "prefill_ops": prefill_ops_available,
    "rope_kv": rope_kv_available,
    "w8a8": w8a8_available,
}


def build_all() -> dict[str, bool]:
    """Build (or load) each library in parallel; name -> usable here. Never raises: a library
    that fails here fails the same way where an engine loads it, which is where it is reported."""
    # The compilers are subprocesses, so threads overlap them despite the GIL.
    with ThreadPoolExecutor(len(_LIBRARIES)) as pool:
        futures = {name: pool.submit(check) for name, check in _LIBRARIES.items()}
    usable: dict[str, bool] = {}
    for name, future in futures.items():
        try:
            usable[name] = future.result()
        except Exception as exc:  # noqa: BLE001 - e.g. registering an op the library lacks
            log.warning("kernel library %s failed to load (%s: %s)", name, type(exc).__name__, exc)
            usable[name] = False
    return usable
