"""logit_bias in the sampler: +100 forces a token, -100 bans it, validation names the field."""

from __future__ import annotations

import pytest
import torch

from blink.engine.errors import InvalidParameterError
from blink.engine.request_checks import EngineLimits, check_request
from blink.engine.sampler import Sampler
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence

torch.set_num_threads(1)


def _seq(rid: str = "r", **kw: object) -> Sequence:
    return Sequence(rid, [1], SamplingParams(**kw), frozenset({3}))  # type: ignore[arg-type]


def test_plus_100_forces_a_token_greedy_and_random() -> None:
    logits = torch.randn(4, 200, generator=torch.Generator().manual_seed(0))
    weak = int(logits[0].argmin())
    seqs = [_seq(str(i), temperature=t, seed=i, logit_bias={weak: 100.0}) for i, t in enumerate((0.0, 1.0, 1.5, 0.7))]
    res = Sampler().sample(logits, seqs)
    assert [r.token_id for r in res][:1] == [weak]
    # Random rows: +100 on a logit is e^100 times the rest of the mass: the draw is that token.
    assert all(r.token_id == weak for r in res)


def test_minus_100_bans_the_argmax_and_leaves_other_rows_alone() -> None:
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(1))
    best = int(logits[0].argmax())
    res = Sampler().sample(logits, [_seq("a", temperature=0.0, logit_bias={best: -100.0}),
                                    _seq("b", temperature=0.0)])
    assert res[0].token_id != best
    assert res[0].token_id == int(logits[0].topk(2).indices[1])
    assert res[1].token_id == int(logits[1].argmax())


def test_reported_logprobs_stay_those_of_the_model() -> None:
    logits = torch.randn(1, 30, generator=torch.Generator().manual_seed(2))
    weak = int(logits[0].argmin())
    res = Sampler().sample(logits, [_seq(temperature=0.0, logprobs=0, logit_bias={weak: 100.0})])[0]
    assert res.token_id == weak
    assert res.logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[weak]), abs=1e-5)


@pytest.mark.parametrize("bias", [{5: 100.5}, {5: float("nan")}, {-1: 1.0}, {"5": 1.0}, {True: 1.0}, [1, 2]])
def test_invalid_logit_bias_is_refused_by_name(bias: object) -> None:
    with pytest.raises(InvalidParameterError) as err:
        SamplingParams(logit_bias=bias).validate()  # type: ignore[arg-type]
    assert err.value.param == "logit_bias"


def test_out_of_vocabulary_id_is_refused() -> None:
    limits = EngineLimits(max_model_len=64, num_blocks=16, block_size=16, vocab_size=100)
    check_request([1, 2], SamplingParams(logit_bias={99: 1.0}), limits)
    with pytest.raises(InvalidParameterError) as err:
        check_request([1, 2], SamplingParams(logit_bias={100: 1.0}), limits)
    assert err.value.param == "logit_bias"
