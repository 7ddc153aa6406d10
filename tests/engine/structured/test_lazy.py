"""Lazy masking (sample unmasked, mask only a refused row): exact for greedy and for plain
temperature sampling, never used where it would not be, and backing off for requests whose
samples keep being refused. Real grammars on the tiny tokenizer, the real sampler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blink.engine.sampler import Sampler
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence
from blink.engine.structured.compiler import GrammarCompiler
from blink.engine.structured.lazy import LazyPolicy, lazy_exact, resample_refused
from blink.engine.structured.masks import GrammarMasker, new_bitmask
from blink.engine.structured.matcher import GrammarState
from blink.engine.tokenizer import Tokenizer

# Enough draws that sampling noise (total variation about 0.02 here) is far below the gap between
# the masked and the unmasked distributions (about 0.5 by construction below).
DRAWS = 4000


@pytest.mark.parametrize(("kw", "exact"), [
    ({"temperature": 0.0}, True),
    ({"temperature": 0.8}, True),
    ({"temperature": 0.8, "repetition_penalty": 1.2, "logit_bias": {1: 5.0}}, True),
    ({"temperature": 0.8, "top_k": 1}, True),  # greedy
    ({"temperature": 0.8, "top_p": 0.9}, False),
    ({"temperature": 0.8, "top_k": 5}, False),
    ({"temperature": 0.8, "min_p": 0.1}, False),
    ({"temperature": 0.0, "logprobs": 0}, False),  # logprobs are reported over the masked logits
])
def test_lazy_only_where_it_is_exact(kw: dict, exact: bool) -> None:
    assert lazy_exact(SamplingParams(**kw)) is exact


def test_policy_backs_off_after_refusals_and_resets_on_a_hit() -> None:
    policy = LazyPolicy()
    assert policy.lazy_now()
    policy.record(False)
    assert [policy.lazy_now() for _ in range(2)] == [False, True]
    policy.record(False)
    assert [policy.lazy_now() for _ in range(3)] == [False, False, True]
    for _ in range(10):  # capped: a hopeless request still tries lazily now and then
        policy.record(False)
        while not policy.lazy_now():
            pass
    assert policy.backoff == 32
    policy.record(True)
    assert policy.backoff == 1 and policy.lazy_now()


@pytest.fixture(scope="module")
def regex_state(tiny_tokenizer_dir: Path, engine: str):  # type: ignore[no-untyped-def]
    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    gc = GrammarCompiler(tok.hf, tok.vocab_size, sorted(tok.eos_token_ids), engine=engine)
    state = GrammarState(gc.get("regex", "[a-e][a-z]*").result(), gc.extra_mask("regex", engine))
    yield tok, state
    gc.close()


def _allowed(state: GrammarState, vocab: int) -> torch.Tensor:
    bitmask = new_bitmask(1, vocab)
    state.fill(bitmask, 0)
    bits = (bitmask[0].unsqueeze(1) >> torch.arange(32)) & 1
    return bits.flatten()[:vocab].bool()


def test_allows_agrees_with_the_mask_and_leaves_the_state(regex_state) -> None:  # type: ignore[no-untyped-def]
    tok, state = regex_state
    allowed = _allowed(state, tok.vocab_size)
    assert 0 < int(allowed.sum()) < tok.vocab_size
    assert [state.allows(t) for t in range(tok.vocab_size)] == allowed.tolist()
    assert torch.equal(_allowed(state, tok.vocab_size), allowed)  # nothing was consumed


def _draw(state: GrammarState, logits: torch.Tensor, kw: dict, lazy: bool) -> tuple[torch.Tensor, int]:
    """DRAWS samples of one row of ``logits`` under the grammar, lazily or mask-first."""
    vocab = logits.shape[0]
    seqs = [Sequence(str(i), [1], SamplingParams(**kw), frozenset()) for i in range(DRAWS)]
    batch = logits.expand(DRAWS, vocab).clone()
    masker = GrammarMasker(vocab)
    mask = masker.new_mask(DRAWS)
    sampler = Sampler()
    rows = list(range(DRAWS))
    torch.manual_seed(1234)
    if lazy:
        mask.lazy = [(r, state) for r in rows]
        results: list = list(sampler.sample(batch, seqs))
        checked, refused = resample_refused(mask, batch, rows, seqs, results, sampler.sample)
        assert checked == DRAWS and 0 < refused < DRAWS  # both paths taken
    else:
        masker.start(mask, [(r, state) for r in rows])
        mask.apply(batch)
        results = list(sampler.sample(batch, seqs))
        refused = 0
    masker.close()
    return torch.bincount(torch.tensor([r.token_id for r in results]), minlength=vocab).double() / DRAWS, refused


def test_temperature_sampling_draws_the_masked_distribution(regex_state) -> None:  # type: ignore[no-untyped-def]
    tok, state = regex_state
    vocab = tok.vocab_size
    allowed = _allowed(state, vocab)
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(vocab, generator=gen) * 2
    # Give the allowed tokens about half the mass, so many draws are refused and redrawn.
    logits[allowed] += torch.log((~allowed).sum() / allowed.sum()).float()
    kw = {"temperature": 1.0}
    target = torch.softmax(logits.double().masked_fill(~allowed, float("-inf")), dim=0)
    unmasked_mass = float(torch.softmax(logits.double(), dim=0)[allowed].sum())
    assert 0.2 < unmasked_mass < 0.8
    lazy, refused = _draw(state, logits, kw, lazy=True)
    eager, _ = _draw(state, logits, kw, lazy=False)
    assert float(lazy[~allowed].sum()) == 0.0
    # The refusal rate is what the unmasked distribution predicts (1 - p(A)), within noise.
    assert abs(refused / DRAWS - (1 - unmasked_mass)) < 0.04
    # Total variation to the exact masked distribution: both within sampling noise.
    tv_lazy = 0.5 * float((lazy - target).abs().sum())
    tv_eager = 0.5 * float((eager - target).abs().sum())
    assert tv_lazy < 0.06 and tv_eager < 0.06, (tv_lazy, tv_eager)


def test_greedy_lazy_equals_mask_first(regex_state) -> None:  # type: ignore[no-untyped-def]
    tok, state = regex_state
    vocab = tok.vocab_size
    gen = torch.Generator().manual_seed(3)
    sampler = Sampler()
    for _ in range(20):
        logits = torch.randn(4, vocab, generator=gen)
        seqs = [Sequence(str(i), [1], SamplingParams(temperature=0.0), frozenset()) for i in range(4)]
        masker = GrammarMasker(vocab)
        eager_mask, lazy_mask = masker.new_mask(4), masker.new_mask(4)
        masker.start(eager_mask, [(r, state) for r in range(4)])
        masked = logits.clone()
        eager_mask.apply(masked)
        expected = [r.token_id for r in sampler.sample(masked, seqs)]
        lazy_logits = logits.clone()
        lazy_mask.lazy = [(r, state) for r in range(4)]
        results: list = list(sampler.sample(lazy_logits, seqs))
        resample_refused(lazy_mask, lazy_logits, list(range(4)), seqs, results, sampler.sample)
        masker.close()
        assert [r.token_id for r in results] == expected
