"""Sequence: token bookkeeping and token-level stop checks."""

from __future__ import annotations

from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence, SequenceStatus

EOS = 2


def make(**kw) -> Sequence:
    return Sequence("r", [5, 6, 7], SamplingParams(**kw), frozenset({EOS}), arrival_time=1.0)


def test_token_views() -> None:
    s = make()
    assert s.status is SequenceStatus.WAITING
    assert (s.num_tokens, s.num_prompt_tokens, s.num_output_tokens) == (3, 3, 0)
    assert s.check_stop(max_model_len=0) is None
    s.append_token(9)
    s.append_token(10)
    assert s.prompt_token_ids == [5, 6, 7]
    assert s.output_token_ids == [9, 10]
    assert s.last_token_id == 10
    assert s.num_tokens == 5 and s.arrival_time == 1.0
    assert not s.is_prefill_done
    s.num_computed_tokens = 5
    assert s.is_prefill_done


def test_prompt_list_is_copied() -> None:
    prompt = [1, 2]
    s = Sequence("r", prompt, SamplingParams(), frozenset())
    s.append_token(3)
    assert prompt == [1, 2]


def test_eos_stops_unless_ignored() -> None:
    s = make()
    s.append_token(EOS)
    assert s.check_stop(0) == "stop" and s.stop_reason is None
    t = make(ignore_eos=True, max_tokens=2)
    t.append_token(EOS)
    assert t.check_stop(0) is None
    t.append_token(EOS)
    assert t.check_stop(0) == "length"


def test_stop_token_id_sets_stop_reason() -> None:
    s = make(stop_token_ids=[11])
    s.append_token(11)
    assert s.check_stop(0) == "stop" and s.stop_reason == 11


def test_min_tokens_defers_stop() -> None:
    s = make(min_tokens=2)
    s.append_token(EOS)
    assert s.check_stop(0) is None
    s.append_token(EOS)
    assert s.check_stop(0) is None
    s.append_token(EOS)  # two tokens came before it
    assert s.check_stop(0) == "stop"


def test_length_limits() -> None:
    s = make(max_tokens=1)
    s.append_token(4)
    assert s.check_stop(0) == "length"
    u = make()
    u.append_token(4)
    assert u.check_stop(max_model_len=5) is None
    u.append_token(4)
    assert u.check_stop(max_model_len=5) == "length"
