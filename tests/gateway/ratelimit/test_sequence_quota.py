"""The per-key sequence quota: which limit applies, who it counts, and that a lease returns once."""

from __future__ import annotations

import pytest

from blink.gateway.auth.keys import ApiKey
from blink.gateway.ratelimit.sequence_quota import SequenceQuota
from blink.protocol.errors import RateLimitError


def test_the_key_limit_overrides_the_server_default() -> None:
    quota = SequenceQuota(default_per_key=3)
    own, default = ApiKey("own", "t", max_sequences=5), ApiKey("default", "t")
    quota.acquire(own, 5)
    with pytest.raises(RateLimitError) as exc:
        quota.acquire(default, 4)
    assert exc.value.code == "too_many_sequences" and exc.value.param == "n"
    assert exc.value.headers["retry-after"] == "1"
    quota.acquire(default, 3)
    assert (quota.in_flight("own"), quota.in_flight("default")) == (5, 3)


def test_a_lease_is_returned_once_however_often_it_is_released() -> None:
    quota = SequenceQuota(default_per_key=4)
    key = ApiKey("k", "t")
    first, second = quota.acquire(key, 2), quota.acquire(key, 2)
    with pytest.raises(RateLimitError) as exc:
        quota.acquire(key, 1)
    assert exc.value.param is None  # n fits the limit; the key is just busy
    first.release()
    first.release()  # every end path may release: the second call gives nothing back twice
    assert quota.in_flight("k") == 2
    second.release()
    assert quota.in_flight("k") == 0
    quota.acquire(key, 4)


def test_zero_turns_the_default_off_and_anonymous_traffic_is_not_counted() -> None:
    quota = SequenceQuota(default_per_key=0)
    quota.acquire(ApiKey("k", "t"), 1000)
    assert quota.in_flight("k") == 0
    assert SequenceQuota(1).acquire(None, 1000) is not None
