"""IncrementalDetokenizer: multi-byte characters across tokens, SentencePiece spaces, cost."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, normalizers

from blink.engine.detokenizer import IncrementalDetokenizer
from blink.engine.tokenizer import Tokenizer

TEXTS = [
    "plain ascii, nothing fancy",
    "emoji 🎉🎉 and family 👨‍👩‍👧 end",
    "中文字符 mixed with 日本語のテキスト and 한국어",
    "accents: héllo wörld — naïve café",
    "🎉",
]


@pytest.fixture(scope="module")
def tiny_tok(tiny_tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_tokenizer_dir)


def stream(detok: IncrementalDetokenizer, ids: list[int]) -> list[str]:
    return [detok.add(t) for t in ids]


@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_deltas_concatenate_to_full_decode(tiny_tok: Tokenizer, text: str) -> None:
    prompt = tiny_tok.encode("Say something:")
    out = tiny_tok.encode(text, add_special_tokens=False)
    deltas = stream(IncrementalDetokenizer(tiny_tok, prompt), out)
    assert "".join(deltas) == tiny_tok.decode(out) == text
    assert not any("\ufffd" in d for d in deltas)


def test_multibyte_characters_really_span_tokens(tiny_tok: Tokenizer) -> None:
    out = tiny_tok.encode("🎉", add_special_tokens=False)
    assert len(out) > 1  # the vocabulary splits the emoji into bytes
    deltas = stream(IncrementalDetokenizer(tiny_tok, []), out)
    assert deltas[:-1] == [""] * (len(out) - 1) and deltas[-1] == "🎉"


def test_complete_prefix_released_before_partial_character(tiny_tok: Tokenizer) -> None:
    out = tiny_tok.encode("ab🎉", add_special_tokens=False)
    deltas = stream(IncrementalDetokenizer(tiny_tok, []), out)
    assert "".join(deltas) == "ab🎉"
    first_emoji_token = len(tiny_tok.encode("ab", add_special_tokens=False))
    assert "".join(deltas[:first_emoji_token]) == "ab"


def test_special_tokens_skipped_or_kept(tiny_tok: Tokenizer) -> None:
    im_end = next(iter(tiny_tok.eos_token_ids))
    out = (
        tiny_tok.encode("hi", add_special_tokens=False)
        + [im_end]
        + tiny_tok.encode(" there", add_special_tokens=False)
    )
    assert "".join(stream(IncrementalDetokenizer(tiny_tok, [], True), out)) == "hi there"
    kept = "".join(stream(IncrementalDetokenizer(tiny_tok, [], False), out))
    assert kept == "hi<|im_end|> there"


@pytest.mark.parametrize("seed", range(5))
def test_random_token_streams_match_full_decode(tiny_tok: Tokenizer, seed: int) -> None:
    """Random ids include stray bytes: whatever is emitted plus flush() equals decode()."""
    rng = random.Random(seed)
    out = [rng.randrange(3, tiny_tok.vocab_size) for _ in range(300)]
    detok = IncrementalDetokenizer(tiny_tok, [])
    text = "".join(stream(detok, out)) + detok.flush()
    assert text == tiny_tok.decode(out)


def test_decode_window_stays_short(tiny_tok: Tokenizer) -> None:
    """Each step decodes a few tokens, not the whole output (vLLM prefix/read offsets)."""
    windows: list[int] = []

    class Spy:
        def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
            windows.append(len(ids))
            return tiny_tok.decode(ids, skip_special_tokens=skip_special_tokens)

    out = tiny_tok.encode(" ".join(TEXTS) * 10, add_special_tokens=False)
    assert len(out) > 500
    deltas = stream(IncrementalDetokenizer(Spy(), tiny_tok.encode("prompt")), out)
    assert "".join(deltas) == tiny_tok.decode(out)
    assert max(windows) <= 12
    assert len(windows) <= 2 * len(out) + 1


def sentencepiece_tokenizer() -> RustTokenizer:
    """Llama-style: '▁' for spaces, byte fallback for anything outside the tiny vocabulary."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in ["▁", *"abcdefghijklmnopqrstuvwxyzHW,.!"]:
        vocab[c] = len(vocab)
    merges = []
    for word in ("hello", "world", "the"):
        cur = "▁"
        for ch in word:
            merges.append((cur, ch))
            cur += ch
            vocab.setdefault(cur, len(vocab))
    tok = RustTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


@pytest.mark.parametrize("text", ["hello world, the end", "the 世界 🎉 hello!", " world"])
def test_sentencepiece_spaces_and_byte_fallback(text: str) -> None:
    tok = sentencepiece_tokenizer()
    prompt = tok.encode("hello").ids
    out = tok.encode(text).ids  # every word carries its leading '▁'
    deltas = [d for d in stream(IncrementalDetokenizer(tok, prompt), out)]
    full = tok.decode(prompt + out)
    assert "".join(deltas) == full[len(tok.decode(prompt)) :]
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas).startswith(" ")  # the first word's space survives in context


def test_sentencepiece_words_keep_their_spaces() -> None:
    tok = sentencepiece_tokenizer()
    out = tok.encode("hello world the world").ids
    # After a BOS-only prompt the text starts here: no leading space, like a full decode.
    assert stream(IncrementalDetokenizer(tok, [1]), out) == ["hello", " world", " the", " world"]
    assert tok.decode([1, *out]) == "hello world the world"
    assert stream(IncrementalDetokenizer(tok, tok.encode("hi").ids), out) == [
        " hello",
        " world",
        " the",
        " world",
    ]


def test_flush_releases_an_unfinished_character(tiny_tok: Tokenizer) -> None:
    out = tiny_tok.encode("ok🎉", add_special_tokens=False)[:-1]  # cut inside the emoji
    detok = IncrementalDetokenizer(tiny_tok, [])
    assert "".join(stream(detok, out)) == "ok"
    assert detok.flush() == "\ufffd"
    assert detok.flush() == ""
