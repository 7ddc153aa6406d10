"""Speculative decoding end to end: greedy output is token-for-token identical with it on and
off, for both proposers, on every prompt; sampled token frequencies match (chi-square)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence as Seq
from pathlib import Path

import pytest
from scipy.stats import chi2_contingency

from blink.engine.config import EngineConfig
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence
from blink.engine.spec_decode import policy
from blink.engine.spec_decode.proposer import Proposal

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


def _engine(path: Path, **kw: object) -> LLMEngine:
    kw = {"max_model_len": 1024, **kw}
    cfg = EngineConfig(model=str(path), dtype="float32", threads=1, **kw)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


def _spec(method: str, draft: Path | None = None, **kw: object) -> dict[str, object]:
    # max_batch 64: speculate in every batch the tests build, so batching is covered too.
    return {
        "speculative": method,
        "speculative_draft_model": str(draft) if draft else None,
        "speculative_max_batch": 64,
        **kw,
    }


def _prompts(engine: LLMEngine, count: int, seed: int = 0) -> list[list[int]]:
    """Half repetitive (what n-gram lookup is for), half free text."""
    rng = random.Random(seed)
    words = "def class return import yield lambda while for if else print open with as".split()
    out = []
    for i in range(count):
        phrase = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        text = f"{phrase}. {phrase}. {phrase}" if i % 2 == 0 else phrase
        out.append(engine.tokenizer.encode(text))
    return out


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """A one-layer random Llama sharing the tiny tokenizer: a weak, mostly wrong draft."""
    from blink.demo.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny-draft"), "llama", tokenizer_dir=tiny_tokenizer_dir, seed=11, num_layers=1
    )


def _assert_no_leak(engine: LLMEngine) -> None:
    bm = engine.block_manager
    assert not engine.has_unfinished()
    assert bm.num_free_blocks == bm.num_blocks


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2", "tiny_qwen3"])
@pytest.mark.parametrize("method", ["ngram", "draft", "self_draft"])
def test_greedy_identical_with_speculation(
    arch: str, method: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    path: Path = request.getfixturevalue(arch)
    # Random tiny models accept few ngram / tiny-draft guesses, under the cost floor, where the
    # policy would stop proposing (test_spec_scheduling covers that); with no floor every step
    # verifies, so partial and full acceptances are exercised.
    monkeypatch.setattr(policy, "_COST_PER_TOKEN", 0.0)
    # "self_draft" drafts with the target itself: every proposal is accepted, which exercises
    # the bonus token and the draft's KV bookkeeping (a stale draft KV would lower acceptance).
    draft = path if method == "self_draft" else request.getfixturevalue("tiny_draft") if method == "draft" else None
    if method == "draft" and arch != "tiny_llama":
        draft = path  # other architectures: their own checkpoint as the draft, at fewer tokens
    base = _engine(path)
    spec = _engine(path, **_spec("draft" if draft else "ngram", draft, num_speculative_tokens=4))
    prompts = _prompts(base, 12)
    want = base.generate(prompts, GREEDY)
    # All at once (batched verification), then one by one (batch 1).
    assert spec.generate(prompts, GREEDY) == want
    for prompt, expected in zip(prompts[:4], want[:4], strict=True):
        assert spec.generate([prompt], GREEDY) == [expected]
    stats = spec.stats()
    assert stats.spec_proposed_tokens > 0 and stats.spec_accepted_tokens > 0
    assert stats.spec_tokens_per_step > 1.0
    if method == "self_draft":
        assert stats.spec_acceptance_rate == 1.0
    _assert_no_leak(spec)


class _OracleProposer:
    """Proposes the known greedy continuation with every third guess corrupted: many partial
    acceptances, full acceptances and stops that land inside an accepted run."""

    def __init__(self, answers: dict[tuple[int, ...], list[int]], prompt_lens: dict[str, int]) -> None:
        self.answers = answers
        self.prompt_lens = prompt_lens
        self.calls = 0

    def propose(self, requests: Seq[tuple[Sequence, int]]) -> list[Proposal]:
        out = []
        for seq, k in requests:
            self.calls += 1
            full = self.answers[tuple(seq.prompt_token_ids)]
            done = seq.num_output_tokens
            guess = list(full[done : done + k])
            if self.calls % 3 == 0 and guess:
                guess[-1] = (guess[-1] + 1) % 500
            out.append(Proposal(guess))
        return out

    def release(self, request_id: str) -> None:
        return None


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=7, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=30, temperature=0.0, logprobs=2, ignore_eos=True),
    ],
    ids=["long", "max_tokens_inside_run", "logprobs"],
)
def test_oracle_proposals_keep_output_exact(tiny_llama: Path, params: SamplingParams) -> None:
    base = _engine(tiny_llama, block_size=4)
    prompts = _prompts(base, 6, seed=3)
    want = base.generate(prompts, params)
    spec = _engine(tiny_llama, block_size=4, **_spec("ngram", num_speculative_tokens=5))
    oracle = _OracleProposer({tuple(p): w for p, w in zip(prompts, want, strict=True)}, {})
    assert spec.speculator is not None
    spec.speculator.proposer = oracle
    got = spec.generate(prompts, params)
    assert got == want
    assert spec.stats().spec_accepted_tokens > 0
    if params.logprobs is not None:
        rid_base, rid_spec = "a", "b"
        base.add_request(rid_base, prompts[0], params)
        spec.add_request(rid_spec, prompts[0], params)
        lp_base = [lp for o in _drain(base) for lp in (o.logprobs or [])]
        lp_spec = [lp for o in _drain(spec) for lp in (o.logprobs or [])]
        assert [x.token_id for x in lp_base] == [x.token_id for x in lp_spec]
        assert all(abs(x.logprob - y.logprob) < 1e-4 for x, y in zip(lp_base, lp_spec, strict=True))
        assert [len(x.top or []) for x in lp_spec] == [2] * len(lp_spec)
    _assert_no_leak(spec)


def _drain(engine: LLMEngine) -> list:
    outs = []
    while engine.has_unfinished():
        outs.extend(engine.step())
    return outs


def test_stop_token_inside_an_accepted_run(tiny_llama: Path) -> None:
    base = _engine(tiny_llama)
    prompts = _prompts(base, 4, seed=5)
    free = base.generate(prompts, GREEDY)
    # Stop on a token each answer emits around its 6th position: it lands inside a proposed run.
    stop_params = [SamplingParams(max_tokens=40, temperature=0.0, stop_token_ids=[w[5]]) for w in free]
    want = base.generate(prompts, stop_params)
    spec = _engine(tiny_llama, **_spec("ngram"))
    oracle = _OracleProposer({tuple(p): w for p, w in zip(prompts, free, strict=True)}, {})
    assert spec.speculator is not None
    spec.speculator.proposer = oracle
    assert spec.generate(prompts, stop_params) == want
    _assert_no_leak(spec)


def test_preemption_under_speculation_is_exact(tiny_llama: Path, tiny_draft: Path) -> None:
    # 40 blocks of 4 tokens hold the longest request (89 + 40 tokens) but not all 8 at once:
    # preemption must happen.
    kw = {"block_size": 4, "kv_cache_memory_bytes": 0}
    base = _engine(tiny_llama)
    prompts = _prompts(base, 8, seed=9)
    want = base.generate(prompts, GREEDY)
    for method, draft in (("ngram", None), ("draft", tiny_draft)):
        spec = _engine(tiny_llama, **_spec(method, draft), **_pool(tiny_llama, 40, **kw))
        assert spec.generate(prompts, GREEDY) == want
        assert spec.scheduler.num_preemptions > 0
        _assert_no_leak(spec)


def _pool(path: Path, blocks: int, block_size: int, kv_cache_memory_bytes: int) -> dict[str, int]:
    """Engine kwargs for a KV pool of exactly ``blocks`` blocks of the tiny model."""
    probe = _engine(path, block_size=block_size)
    per_block = probe.runner.kv_cache[:, :, 0].numel() * probe.runner.kv_cache.element_size()
    return {"block_size": block_size, "kv_cache_memory_bytes": blocks * per_block}


def test_request_can_opt_out(tiny_llama: Path) -> None:
    spec = _engine(tiny_llama, **_spec("ngram"))
    prompt = _prompts(spec, 1)[0]
    off = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True, speculative=False)
    spec.generate([prompt], off)
    assert spec.stats().spec_proposed_tokens == 0
    spec.generate([prompt], GREEDY)
    assert spec.stats().spec_proposed_tokens > 0


def test_large_batches_do_not_speculate(tiny_llama: Path) -> None:
    spec = _engine(tiny_llama, speculative="ngram", speculative_max_batch=2)
    spec.generate(_prompts(spec, 6), SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    spec.generate(_prompts(spec, 1), GREEDY)
    stats = spec.stats()
    assert stats.spec_proposed_tokens > 0  # the batch of 1 did, the batch of 6 did not
    six = _engine(tiny_llama, speculative="ngram", speculative_max_batch=2)
    six.generate(_prompts(six, 6), GREEDY)
    assert six.stats().spec_proposed_tokens < stats.spec_proposed_tokens * 6


# Chi-square: token frequencies of sampled outputs with speculation equal those without.
_SAMPLES = 400
_ALPHA = 1e-3  # fixed seeds make the outcome deterministic; see test_spec_verifier


def _sampled_counts(engine: LLMEngine, prompt: list[int], position: int) -> Counter[int]:
    # top_k=6 keeps the vocabulary that matters small so every cell has expected counts >= 5.
    params = [
        SamplingParams(max_tokens=position + 1, temperature=1.0, top_k=6, seed=i, ignore_eos=True)
        for i in range(_SAMPLES)
    ]
    outs = engine.generate([prompt] * _SAMPLES, params)
    return Counter(o[position] for o in outs if len(o) > position)


@pytest.mark.parametrize("method", ["ngram", "draft", "oracle"])
def test_sampled_frequencies_match_without_speculation(
    tiny_llama: Path, tiny_draft: Path, method: str
) -> None:
    """``ngram`` on a random model is nearly always rejected (exercises resampling), ``draft``
    is a weak one-layer model with a real q distribution, and ``oracle`` proposes the greedy
    continuation as point masses, which sampling often keeps."""
    base = _engine(tiny_llama, max_num_seqs=128)
    draft = tiny_draft if method == "draft" else None
    spec = _engine(
        tiny_llama, max_num_seqs=128, **_spec("draft" if draft else "ngram", draft, speculative_max_batch=128)
    )
    opening = base.tokenizer.encode("print print print")
    prompt = opening + base.generate([opening], GREEDY)[0]
    if method == "oracle":
        assert spec.speculator is not None
        greedy = base.generate([prompt], GREEDY)[0]
        spec.speculator.proposer = _OracleProposer({tuple(prompt): greedy}, {})
    for position in (1, 3):
        a = _sampled_counts(base, prompt, position)
        b = _sampled_counts(spec, prompt, position)
        tokens = sorted(set(a) | set(b))
        # Pool rare tokens into one cell so the chi-square approximation holds.
        common = [t for t in tokens if a[t] + b[t] >= 20]
        table = [
            [a[t] for t in common] + [sum(a[t] for t in tokens if t not in common)],
            [b[t] for t in common] + [sum(b[t] for t in tokens if t not in common)],
        ]
        if table[0][-1] + table[1][-1] == 0:
            table = [row[:-1] for row in table]
        assert chi2_contingency(table).pvalue > _ALPHA, table
    stats = spec.stats()
    assert stats.spec_proposed_tokens > 0
    if method != "ngram":
        assert 0 < stats.spec_accepted_tokens < stats.spec_proposed_tokens
