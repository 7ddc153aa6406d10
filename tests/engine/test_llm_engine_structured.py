"""Structured outputs through the sync engine, on tiny random models: whatever the weights, the
output is what the grammar allows (valid JSON for the schema, one of the choices, a regex match),
with or without speculative decoding, batched or alone; a bad spec fails its request only."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence as Seq
from pathlib import Path

import jsonschema
import pytest

from blink.engine.config import EngineConfig
from blink.engine.errors import InvalidParameterError
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence
from blink.engine.spec_decode.proposer import Proposal

# Bounded fields, so even a random model completes the document well within max_tokens.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "ok": {"type": "boolean"},
        "level": {"enum": ["low", "mid", "high"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "ok", "level", "tags"],
}
CHOICES = ["yes", "no", "maybe so"]
REGEX = r"[a-c]{3}-\d{2}"


def _engine(path: Path, **kw: object) -> LLMEngine:
    cfg = EngineConfig(model=str(path), dtype="float32", threads=1, max_model_len=512, **kw)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


def _params(kind: str, spec: str, **kw: object) -> SamplingParams:
    kw.setdefault("max_tokens", 120)
    return SamplingParams(structured=(kind, spec), **kw)  # type: ignore[arg-type]


def _prompts(engine: LLMEngine, n: int) -> list[list[int]]:
    words = ["def", "class", "return", "json", "value", "for", "while", "print"]
    return [engine.tokenizer.encode(" ".join(words[(i + j) % len(words)] for j in range(3 + 2 * i))) for i in range(n)]


def _check(kind: str, text: str) -> None:
    if kind == "json_schema":
        jsonschema.validate(json.loads(text), SCHEMA)
    elif kind == "choice":
        assert text in CHOICES
    elif kind == "regex":
        assert re.fullmatch(REGEX, text), text


SPECS = [("json_schema", json.dumps(SCHEMA)), ("choice", json.dumps(CHOICES)), ("regex", REGEX)]


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2"])
def test_outputs_follow_the_grammar_greedy_and_sampled(arch: str, request: pytest.FixtureRequest) -> None:
    engine = _engine(request.getfixturevalue(arch))
    prompts = _prompts(engine, 6)
    params = [_params(kind, spec, temperature=t, seed=i) for i, (kind, spec) in enumerate(SPECS)
              for t in (0.0, 1.0)]
    outs = engine.generate(prompts, params)
    for (kind, _), ids in zip([(k, s) for k, s in SPECS for _ in (0, 1)], outs, strict=True):
        assert ids[-1] in engine.tokenizer.eos_token_ids  # ended by the grammar, not by max_tokens
        _check(kind, engine.tokenizer.decode(ids))
    # The same schema again is served from the compiled-grammar cache.
    assert engine._grammars is not None and len(engine._grammars) == len(SPECS)


def test_unconstrained_requests_in_the_same_batch_are_unchanged(tiny_llama: Path) -> None:
    plain = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    engine = _engine(tiny_llama)
    prompts = _prompts(engine, 2)
    alone = engine.generate([prompts[0]], plain)[0]
    mixed = engine.generate(prompts, [plain, _params(*SPECS[0], temperature=0.0)])
    assert mixed[0] == alone
    _check("json_schema", engine.tokenizer.decode(mixed[1]))


def test_json_object_output_is_an_object(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    ids = engine.generate(_prompts(engine, 1), _params("json_object", "", temperature=0.0, max_tokens=400))[0]
    text = engine.tokenizer.decode(ids)
    assert text.startswith("{")
    if ids[-1] in engine.tokenizer.eos_token_ids:  # a random model may write one long string
        assert isinstance(json.loads(text), dict)


class _MixedProposer:
    """Proposes the constrained greedy answer with every other guess replaced by a token the
    grammar cannot take at that point ('}' where the schema needs more, or a letter in a number)."""

    def __init__(self, answers: dict[tuple[int, ...], list[int]], bad: int) -> None:
        self.answers, self.bad, self.calls = answers, bad, 0

    def propose(self, requests: Seq[tuple[Sequence, int]]) -> list[Proposal]:
        out = []
        for seq, k in requests:
            self.calls += 1
            done = seq.num_output_tokens
            guess = list(self.answers[tuple(seq.prompt_token_ids)][done : done + k])
            if self.calls % 2 == 0 and guess:
                guess[len(guess) // 2] = self.bad
            out.append(Proposal(guess))
        return out

    def release(self, request_id: str) -> None:
        return None


def test_speculative_drafts_are_checked_against_the_grammar(tiny_llama: Path) -> None:
    base = _engine(tiny_llama)
    prompts = _prompts(base, 3)
    params = [_params(kind, spec, temperature=0.0) for kind, spec in SPECS]
    want = base.generate(prompts, params)
    spec = _engine(tiny_llama, speculative="ngram", num_speculative_tokens=4)
    assert spec.speculator is not None
    bad = spec.tokenizer.encode("}", add_special_tokens=False)[0]
    spec.speculator.proposer = _MixedProposer({tuple(p): w for p, w in zip(prompts, want, strict=True)}, bad)
    got = spec.generate(prompts, params)
    assert got == want
    assert spec.stats().spec_accepted_tokens > 0
    for (kind, _), ids in zip(SPECS, got, strict=True):
        _check(kind, spec.tokenizer.decode(ids))


def test_ngram_speculation_with_a_schema_stays_valid(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama, speculative="ngram", num_speculative_tokens=4)
    prompt = engine.tokenizer.encode('{"name": "ab", "ok": true, "level": "low", "tags": ["a"]} ' * 3)
    for t in (0.0, 1.0):
        ids = engine.generate([prompt], _params(*SPECS[0], temperature=t, seed=5))[0]
        _check("json_schema", engine.tokenizer.decode(ids))


def test_a_spec_that_fails_to_compile_fails_only_its_request(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    prompts = _prompts(engine, 2)
    engine.add_request("bad", prompts[0], _params("regex", "(("))
    engine.add_request("good", prompts[1], _params(*SPECS[1], temperature=0.0))
    outs: dict[str, list] = {"bad": [], "good": []}
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id].append(o)
    assert outs["bad"][-1].finish_reason == "error" and "did not compile" in (outs["bad"][-1].error or "")
    assert ".cc" not in (outs["bad"][-1].error or "")
    good = [t for o in outs["good"] for t in o.new_token_ids]
    _check("choice", engine.tokenizer.decode(good))


def test_abort_while_compiling_leaves_nothing_behind(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama)
    enum = json.dumps({"enum": [f"value {i}" for i in range(2000)]})
    engine.add_request("slow", _prompts(engine, 1)[0], _params("json_schema", enum))
    assert engine.abort_request("slow")
    assert not engine.has_unfinished() and not engine._compiling
    assert engine.block_manager.num_free_blocks == engine.runner.num_blocks


@pytest.mark.parametrize(
    ("field", "value"), [("min_tokens", 3), ("ignore_eos", True)]
)
def test_fields_that_contradict_a_grammar_are_refused(tiny_llama: Path, field: str, value: object) -> None:
    engine = _engine(tiny_llama)
    with pytest.raises(InvalidParameterError) as info:
        engine.add_request("r", [5, 6], _params(*SPECS[0], **{field: value}))
    assert info.value.param == field


@pytest.mark.parametrize("grammar_engine", ["llguidance", "xgrammar"])
def test_lazy_masking_gives_the_eager_tokens_greedy(tiny_llama: Path, grammar_engine: str) -> None:
    """Sampling before masking (structured.lazy) changes no greedy token; random weights make
    the grammar refuse many of the unmasked samples, so both paths run."""
    lazy = _engine(tiny_llama, structured_engine=grammar_engine)
    eager = _engine(tiny_llama, structured_engine=grammar_engine, structured_lazy_mask=False)
    # The random model breaks these grammars at almost every step; the last regex it mostly
    # follows (most tokens hold neither '{' nor '}'), so its unmasked samples are mostly kept.
    specs = [*SPECS, ("regex", "[^{}]{1,40}")]
    prompts = _prompts(lazy, len(specs))
    params = [_params(kind, spec, temperature=0.0) for kind, spec in specs]
    outs = lazy.generate(prompts, params)
    assert outs == eager.generate(prompts, params)
    for (kind, _), ids in zip(SPECS, outs, strict=False):
        _check(kind, lazy.tokenizer.decode(ids))
    assert re.fullmatch("[^{}]{1,40}", lazy.tokenizer.decode(outs[-1]))
    checked, refused = lazy.lazy_mask_counts()
    assert 0 < refused < checked
    assert eager.lazy_mask_counts() == (0, 0)
    # Truncated sampling and logprobs always mask first: lazy would not be exact there.
    lazy.generate(prompts[:2], [_params(*SPECS[0], temperature=1.0, top_p=0.9, seed=1),
                                _params(*SPECS[0], temperature=0.0, logprobs=2)])
    assert lazy.lazy_mask_counts() == (checked, refused)
    lazy.close()
    eager.close()
