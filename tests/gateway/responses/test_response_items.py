"""Ids of stored responses and their items (blink/gateway/responses/items.py)."""

from __future__ import annotations

import random
import re

from blink.gateway.responses.items import new_id


def test_ids_are_192_random_bits_from_the_os_not_the_seedable_generator() -> None:
    """Ids came from ``random.getrandbits``: a Mersenne Twister, whose state (and so every later id,
    including other keys' stored responses) can be recovered from enough of its outputs."""
    ids = [new_id("resp") for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(re.fullmatch(r"resp_[0-9a-f]{48}", i) for i in ids)
    random.seed(7)
    first = new_id("msg")
    random.seed(7)
    assert new_id("msg") != first  # the module's generator state does not decide them
