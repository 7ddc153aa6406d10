"""Flow learning: clusters by embedding, transitions per scope, bounded, never across scopes."""

from __future__ import annotations

import numpy as np

from blink.gateway.precompute.flows import FlowModel


def _vec(*xs: float) -> np.ndarray:
    v = np.zeros(8, dtype=np.float32)
    v[: len(xs)] = xs
    return v


def test_the_most_frequent_follower_is_predicted_with_its_representative_text() -> None:
    flows = FlowModel(similarity=0.9, max_clusters=8, max_scopes=4)
    reset = flows.assign("s", _vec(1, 0), "How do I reset my password?")
    again = flows.assign("s", _vec(1, 0.05), "How can I reset my password?")
    assert reset == again == 0
    email = flows.assign("s", _vec(0, 1), "I did not get the reset email")
    billing = flows.assign("s", _vec(0, 0, 1), "Where is my invoice?")
    assert len({reset, email, billing}) == 3
    for _ in range(3):
        flows.observe("s", reset, email)
    flows.observe("s", reset, billing)
    assert flows.likely_next("s", reset, min_count=2, min_share=0.5) == "I did not get the reset email"
    assert flows.likely_next("s", email, min_count=1, min_share=0.1) is None  # nothing followed it yet


def test_rare_or_ambiguous_followers_are_not_predicted() -> None:
    flows = FlowModel(similarity=0.9, max_clusters=8, max_scopes=4)
    a, b, c = (flows.assign("s", _vec(*np.eye(3)[i]), f"q{i}") for i in range(3))
    assert a is not None and b is not None and c is not None
    flows.observe("s", a, b)
    assert flows.likely_next("s", a, min_count=2, min_share=0.3) is None  # seen once
    flows.observe("s", a, b)
    for _ in range(6):
        flows.observe("s", a, c)
    assert flows.likely_next("s", a, min_count=2, min_share=0.3) == "q2"
    assert flows.likely_next("s", a, min_count=2, min_share=0.9) is None  # c is 75%, not 90%


def test_scopes_never_share_flows() -> None:
    flows = FlowModel(similarity=0.9, max_clusters=8, max_scopes=4)
    a = flows.assign("tenant-a", _vec(1), "reset password")
    b = flows.assign("tenant-a", _vec(0, 1), "reset email missing")
    assert a is not None and b is not None
    flows.observe("tenant-a", a, b)
    flows.observe("tenant-a", a, b)
    other = flows.assign("tenant-b", _vec(1), "reset password")
    assert other is not None
    assert flows.likely_next("tenant-b", other, min_count=1, min_share=0.1) is None
    flows.observe("tenant-b", other, 1)  # no cluster 1 in tenant-b: ignored, never borrowed
    assert flows.likely_next("tenant-b", other, min_count=1, min_share=0.1) is None


def test_clusters_and_scopes_are_bounded() -> None:
    flows = FlowModel(similarity=0.99, max_clusters=2, max_scopes=2)
    assert flows.assign("s", _vec(1), "a") == 0
    assert flows.assign("s", _vec(0, 1), "b") == 1
    assert flows.assign("s", _vec(0, 0, 1), "c") is None  # full: a new topic is not learned
    assert flows.assign("s", _vec(1, 0.01), "a again") == 0  # a known one still is
    flows.assign("t", _vec(1), "x")
    flows.assign("u", _vec(1), "y")  # third scope: the least recently used ("s") is dropped
    assert flows.likely_next("s", 0, min_count=1, min_share=0.1) is None
    assert flows.assign("s", _vec(0, 0, 1), "c") == 0  # "s" starts afresh


def test_a_zero_vector_does_not_break_clustering() -> None:
    flows = FlowModel(similarity=0.9, max_clusters=4, max_scopes=4)
    assert flows.assign("s", np.zeros(8, dtype=np.float32), "") == 0
    assert flows.assign("s", _vec(1), "a") == 1


def test_a_text_seen_before_finds_its_cluster_without_a_vector() -> None:
    flows = FlowModel(similarity=0.9, max_clusters=4, max_scopes=4)
    assert flows.assign("s", _vec(1), "reset password") == 0
    assert flows.assign("s", None, "reset password") == 0  # an exact hit: no embedding computed
    assert flows.assign("s", None, "never seen") is None
    assert flows.assign("other", None, "reset password") is None  # not another scope's text
