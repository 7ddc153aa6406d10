"""What to send: each workload yields the i-th request (messages + max_tokens), reproducibly.

Prompt lengths are in words (about 1.3 tokens each for English-like text with common BPE
tokenizers); the benchmark never needs the server's tokenizer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

_WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
          "government company number group problem fact system program question night state home water room "
          "mother area money story month lot right study book word business issue side kind head house service "
          "friend father power hour game line end member law car city community name president team minute idea "
          "body information back parent face others level office door health art war history party result change "
          "morning reason research girl guy moment air teacher force education").split()

_QUESTIONS = (
    ("What is the capital of France?", "Which city is France's capital?", "Tell me the capital city of France."),
    ("How many legs does a spider have?", "A spider has how many legs?", "Count the legs on a spider."),
    ("What is the boiling point of water?", "At what temperature does water boil?", "When does water boil, in C?"),
    ("Who wrote Hamlet?", "Hamlet was written by whom?", "Name the author of Hamlet."),
    ("What is 12 times 12?", "Multiply 12 by 12.", "What do you get from 12 x 12?"),
    ("Why is the sky blue?", "What makes the sky look blue?", "Explain the blue colour of the sky."),
    ("How far is the Moon?", "What is the distance to the Moon?", "How many km away is the Moon?"),
    ("What is photosynthesis?", "Explain photosynthesis briefly.", "Describe what photosynthesis is."),
)


@dataclass(slots=True)
class BenchRequest:
    messages: list[dict[str, Any]]
    max_tokens: int
    tag: str = ""  # e.g. "long" / "short" in a mix, "repeat" for a cache workload
    extra: dict[str, Any] = field(default_factory=dict)


class Workload(Protocol):
    name: str

    def request(self, i: int) -> BenchRequest: ...


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


@dataclass
class Synthetic:
    """Fixed-length random prompts, every request different (no cache or prefix reuse)."""

    prompt_words: int = 128
    max_tokens: int = 64
    seed: int = 0
    name: str = "synthetic"

    def request(self, i: int) -> BenchRequest:
        rng = random.Random(self.seed * 1_000_003 + i)
        return BenchRequest([{"role": "user", "content": _words(rng, self.prompt_words)}], self.max_tokens)


@dataclass
class SharedPrefix:
    """One long system prompt reused by every request, a short distinct question each: prefix caching."""

    prefix_words: int = 512
    prompt_words: int = 32
    max_tokens: int = 64
    seed: int = 0
    name: str = "shared-prefix"

    def __post_init__(self) -> None:
        self._system = "You are a helpful assistant. " + _words(random.Random(self.seed), self.prefix_words)

    def request(self, i: int) -> BenchRequest:
        rng = random.Random(self.seed * 1_000_003 + i + 1)
        return BenchRequest([{"role": "system", "content": self._system},
                             {"role": "user", "content": _words(rng, self.prompt_words)}], self.max_tokens)


@dataclass
class Repeated:
    """A small pool of questions asked again, verbatim or paraphrased: exact and semantic caches."""

    paraphrase: float = 0.5  # share of repeats worded differently (semantic, not exact, hits)
    max_tokens: int = 64
    seed: int = 0
    name: str = "repeated"

    def request(self, i: int) -> BenchRequest:
        rng = random.Random(self.seed * 1_000_003 + i)
        forms = _QUESTIONS[rng.randrange(len(_QUESTIONS))]
        paraphrased = rng.random() < self.paraphrase
        text = forms[rng.randrange(1, len(forms))] if paraphrased else forms[0]
        return BenchRequest([{"role": "user", "content": text}], self.max_tokens,
                            tag="paraphrase" if paraphrased else "verbatim", extra={"temperature": 0})


@dataclass
class LongMix:
    """Mostly short prompts with a share of long ones: how long prefills hurt everyone's TTFT."""

    short_words: int = 64
    long_words: int = 2048
    long_share: float = 0.1
    max_tokens: int = 64
    seed: int = 0
    name: str = "long-mix"

    def request(self, i: int) -> BenchRequest:
        rng = random.Random(self.seed * 1_000_003 + i)
        long = rng.random() < self.long_share
        n = self.long_words if long else self.short_words
        return BenchRequest([{"role": "user", "content": _words(rng, n)}], self.max_tokens,
                            tag="long" if long else "short")


class Replay:
    """Requests from a JSONL trace: ``{"messages": [...]}`` or ``{"prompt": "..."}``, optional ``max_tokens``."""

    name = "replay"

    def __init__(self, path: str | Path, max_tokens: int = 64) -> None:
        self._items: list[BenchRequest] = []
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
            messages = obj.get("messages") or [{"role": "user", "content": str(obj.get("prompt", ""))}]
            self._items.append(BenchRequest(messages, int(obj.get("max_tokens") or max_tokens), tag=str(obj.get("tag", ""))))
        if not self._items:
            raise ValueError(f"{path}: the trace holds no requests")

    def request(self, i: int) -> BenchRequest:
        return self._items[i % len(self._items)]


WORKLOADS = ("synthetic", "shared-prefix", "repeated", "long-mix", "replay")


def make_workload(name: str, *, prompt_words: int, max_tokens: int, seed: int, trace: str | None) -> Workload:
    if name == "synthetic":
        return Synthetic(prompt_words, max_tokens, seed)
    if name == "shared-prefix":
        return SharedPrefix(prompt_words=max(1, prompt_words // 4), max_tokens=max_tokens, seed=seed,
                            prefix_words=prompt_words)
    if name == "repeated":
        return Repeated(max_tokens=max_tokens, seed=seed)
    if name == "long-mix":
        return LongMix(short_words=prompt_words, max_tokens=max_tokens, seed=seed)
    if name == "replay":
        if not trace:
            raise ValueError("the replay workload needs --trace FILE.jsonl")
        return Replay(trace, max_tokens)
    raise ValueError(f"unknown workload {name!r}: one of {', '.join(WORKLOADS)}")
