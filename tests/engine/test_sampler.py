"""Sampler: exact masks and penalties on crafted logits, seeded reproducibility, logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from blink.engine.sampler import Sampler, apply_min_p, apply_penalties, apply_top_k_top_p
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence

torch.set_num_threads(1)

EOS = 3
NEG = -float("inf")


def seq(prompt: list[int] | None = None, output: list[int] | None = None, rid: str = "r", **kw) -> Sequence:
    s = Sequence(rid, prompt or [1], SamplingParams(**kw), frozenset({EOS}))
    for t in output or []:
        s.append_token(t)
    return s


def probs_logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs]).log()


def test_greedy_is_exact_argmax_fast_path() -> None:
    logits = torch.randn(8, 1000, generator=torch.Generator().manual_seed(0))
    seqs = [seq(rid=str(i), temperature=0.0) for i in range(8)]
    res = Sampler().sample(logits, seqs)
    assert [r.token_id for r in res] == logits.argmax(-1).tolist()
    assert all(r.logprob is None and r.top_logprobs is None for r in res)


def test_greedy_ignores_seed_and_top_k_one_is_greedy() -> None:
    logits = torch.tensor([[0.1, 2.0, 1.9, -1.0]])
    assert Sampler().sample(logits, [seq(temperature=0.0, seed=7)])[0].token_id == 1
    for _ in range(20):
        assert Sampler().sample(logits, [seq(temperature=1.5, top_k=1)])[0].token_id == 1


def test_mixed_batch_greedy_rows_stay_exact() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 300, generator=g)
    seqs = [seq(rid=str(i), temperature=0.0 if i % 2 else 1.0, seed=i) for i in range(6)]
    res = Sampler().sample(logits, seqs)
    for i in (1, 3, 5):
        assert res[i].token_id == int(logits[i].argmax())


def test_seeded_sampling_is_reproducible_regardless_of_batch() -> None:
    g = torch.Generator().manual_seed(2)
    target_logits = torch.randn(5, 500, generator=g)  # one row per step
    others = torch.randn(5, 3, 500, generator=g)

    def run(batch_with_others: bool, position: int) -> list[int]:
        s = seq(rid="target", temperature=0.9, top_p=0.95, top_k=50, seed=1234)
        out = []
        for step in range(5):
            rows = [target_logits[step]]
            seqs = [s]
            if batch_with_others:
                rows = list(others[step]) + rows
                seqs = [seq(rid=f"o{j}", temperature=1.0) for j in range(3)] + seqs
                rows.insert(position, rows.pop())
                seqs.insert(position, seqs.pop())
            res = Sampler().sample(torch.stack(rows), seqs)
            out.append(res[seqs.index(s)].token_id)
        return out

    alone = run(False, 0)
    assert run(False, 0) == alone
    assert run(True, 0) == alone
    assert run(True, 2) == alone
    different = []
    for seed in (1, 2, 3):
        s = seq(temperature=1.0, seed=seed)
        different.append([Sampler().sample(target_logits[i : i + 1], [s])[0].token_id for i in range(5)])
    assert len({tuple(d) for d in different}) > 1


def test_sampling_distribution_matches_softmax_with_temperature() -> None:
    base = torch.tensor([1.0, 0.5, 0.0, -1.0])
    n = 20000
    seqs = [seq(rid=str(i), temperature=0.7) for i in range(n)]
    torch.manual_seed(0)
    res = Sampler().sample(base.repeat(n, 1), seqs)
    counts = torch.bincount(torch.tensor([r.token_id for r in res]), minlength=4).float() / n
    expected = torch.softmax(base / 0.7, -1)
    assert torch.allclose(counts, expected, atol=0.015)


def test_top_k_mask_is_exact() -> None:
    logits = torch.tensor([[0.3, 2.0, -1.0, 1.5, 0.9], [0.3, 2.0, -1.0, 1.5, 0.9]])
    out = apply_top_k_top_p(logits, torch.tensor([2, 5]), torch.tensor([1.0, 1.0]))
    assert torch.equal(out[0], torch.tensor([NEG, 2.0, NEG, 1.5, NEG]))
    assert torch.equal(out[1], logits[1])


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [(0.4, [0]), (0.75, [0, 1]), (0.85, [0, 1, 2]), (0.99, [0, 1, 2, 3]), (1.0, [0, 1, 2, 3])],
)
def test_top_p_mask_is_exact(top_p: float, kept: list[int]) -> None:
    # Shuffled so that the mask has to be scattered back through the sort order.
    probs = [0.15, 0.5, 0.05, 0.3]
    rank = [2, 0, 3, 1]  # position of each token in descending order
    logits = probs_logits(probs)
    out = apply_top_k_top_p(logits, torch.tensor([4]), torch.tensor([top_p]))
    for tok in range(4):
        assert math.isfinite(out[0, tok]) == (rank[tok] in kept), tok


def test_top_k_then_top_p_renormalises() -> None:
    logits = probs_logits([0.5, 0.3, 0.15, 0.05])
    # After top-2 the mass is 0.625 / 0.375: top_p 0.6 keeps only the first.
    out = apply_top_k_top_p(logits, torch.tensor([2]), torch.tensor([0.6]))
    assert [math.isfinite(v) for v in out[0].tolist()] == [True, False, False, False]


def test_min_p_mask_is_exact() -> None:
    logits = probs_logits([0.5, 0.3, 0.15, 0.05])
    out = apply_min_p(logits, torch.tensor([0.2]))  # threshold 0.1
    assert [math.isfinite(v) for v in out[0].tolist()] == [True, True, True, False]


def test_truncation_restricts_samples() -> None:
    logits = probs_logits([0.4, 0.3, 0.2, 0.1]).repeat(2000, 1)
    for kw, allowed in (
        ({"top_k": 2}, {0, 1}),
        ({"top_p": 0.65}, {0, 1}),
        ({"min_p": 0.6}, {0, 1}),
    ):
        seqs = [seq(rid=str(i), **kw) for i in range(2000)]
        got = {r.token_id for r in Sampler().sample(logits, seqs)}
        assert got == allowed, kw


def test_repetition_penalty_hf_semantics() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5, 4.0]])
    s = seq(prompt=[0], output=[1], repetition_penalty=2.0)
    apply_penalties(logits, [s], [0])
    assert torch.equal(logits, torch.tensor([[1.0, -4.0, 1.0, 0.5, 4.0]]))


def test_frequency_and_presence_penalties_openai_semantics() -> None:
    logits = torch.zeros(2, 5)
    a = seq(prompt=[4, 4], output=[2, 2, 3], rid="a", frequency_penalty=0.5, presence_penalty=0.25)
    b = seq(prompt=[1], output=[2], rid="b", presence_penalty=-1.0)
    apply_penalties(logits, [a, b], [0, 1])
    # Prompt tokens (4) are not penalised by OpenAI penalties.
    assert torch.allclose(logits[0], torch.tensor([0.0, 0.0, -1.25, -0.75, 0.0]))
    assert torch.allclose(logits[1], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))


def test_penalties_change_greedy_choice_and_ignore_out_of_vocab_ids() -> None:
    logits = torch.tensor([[0.0, 3.0, 2.9, 0.0]])
    s = seq(prompt=[999], output=[1], temperature=0.0, frequency_penalty=0.2)
    assert Sampler().sample(logits, [s])[0].token_id == 2
    plain = seq(output=[1], temperature=0.0)
    assert Sampler().sample(logits, [plain])[0].token_id == 1
    assert torch.equal(logits, torch.tensor([[0.0, 3.0, 2.9, 0.0]]))  # input untouched


def test_min_tokens_masks_eos_and_stop_token_ids() -> None:
    logits = torch.tensor([[0.0, 0.0, 1.0, 5.0, 4.0]])  # EOS=3 best, stop id 4 second
    s = seq(output=[2], temperature=0.0, min_tokens=2, stop_token_ids=[4])
    assert Sampler().sample(logits, [s])[0].token_id == 2
    s.append_token(2)  # two outputs now: EOS allowed
    assert Sampler().sample(logits, [s])[0].token_id == EOS


def test_logprobs_equal_raw_log_softmax() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 50, generator=g)
    seqs = [
        seq(rid="a", temperature=0.0, logprobs=5, repetition_penalty=1.5, output=[7]),
        seq(rid="b", temperature=0.8, logprobs=0, seed=1),
        seq(rid="c", temperature=0.0),
    ]
    res = Sampler().sample(logits, seqs)
    ref = torch.log_softmax(logits, -1)
    for i in (0, 1):
        assert res[i].logprob == pytest.approx(float(ref[i, res[i].token_id]), abs=1e-6)
    top_vals, top_ids = ref[0].topk(5)
    assert [t for t, _ in res[0].top_logprobs] == top_ids.tolist()
    assert [v for _, v in res[0].top_logprobs] == pytest.approx(top_vals.tolist(), abs=1e-6)
    assert res[1].top_logprobs == []
    assert res[2].logprob is None and res[2].top_logprobs is None


def test_shape_mismatch_is_rejected() -> None:
    with pytest.raises(ValueError):
        Sampler().sample(torch.zeros(2, 4), [seq()])


def reference_top_k_top_p(logits: torch.Tensor, k: int, top_p: float) -> torch.Tensor:
    """Brute force: full sort, renormalise over the top k, keep until the mass reaches top_p."""
    vals, order = logits.sort(descending=True)
    keep = torch.zeros_like(vals, dtype=torch.bool)
    keep[: min(k, len(vals))] = True
    probs = torch.softmax(vals.masked_fill(~keep, NEG), -1)
    before = 0.0
    for j in range(len(vals)):
        if not keep[j]:
            break
        if top_p < 1.0 and before >= top_p:
            keep[j:] = False
            break
        before += float(probs[j])
    out = torch.full_like(logits, NEG)
    out[order[keep]] = logits[order[keep]]
    return out


@pytest.mark.parametrize("scale", [0.01, 1.0, 5.0])  # 0.01: nucleus far wider than 256 candidates
def test_top_k_top_p_matches_full_sort_reference(scale: float) -> None:
    g = torch.Generator().manual_seed(4)
    vocab = 3000
    settings = [(vocab, 0.9), (40, 1.0), (40, 0.5), (vocab, 0.999), (1000, 0.95), (vocab, 1.0)]
    logits = torch.randn(len(settings), vocab, generator=g, dtype=torch.float64).float() * scale
    k = torch.tensor([s[0] for s in settings])
    top_p = torch.tensor([s[1] for s in settings])
    out = apply_top_k_top_p(logits, k, top_p)
    for row, (kk, pp) in enumerate(settings):
        ref = reference_top_k_top_p(logits[row], kk, pp)
        assert torch.equal(torch.isfinite(out[row]), torch.isfinite(ref)), (row, scale)
        assert torch.equal(out[row][torch.isfinite(ref)], ref[torch.isfinite(ref)])
    assert torch.equal(out[-1], logits[-1])  # untouched row
