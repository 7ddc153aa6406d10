"""Tokenizer: encode/decode, ChatML template, eos ids, template errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blink.engine.errors import InvalidParameterError
from blink.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok(tiny_tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_tokenizer_dir)


def test_round_trip_and_vocab(tok: Tokenizer) -> None:
    text = "def f(x):\n    return 'héllo 世界 🎉'\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.encode(text) == list(tok.hf.encode(text))
    assert tok.vocab_size == 512
    assert tok.id_to_token(ids[0]) is not None
    assert tok.id_to_token(10**6) is None


def test_eos_and_special_tokens(tok: Tokenizer) -> None:
    im_end = tok.hf.convert_tokens_to_ids("<|im_end|>")
    assert im_end in tok.eos_token_ids
    assert im_end in tok.all_special_ids
    assert tok.decode([im_end]) == ""
    assert tok.decode([im_end], skip_special_tokens=False) == "<|im_end|>"


def test_single_token_decodes_are_cached_per_skip_flag(tiny_tokenizer_dir: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    im_end = tok.hf.convert_tokens_to_ids("<|im_end|>")
    # Special tokens: the cache must keep the two skip settings apart, in either order.
    assert tok.decode([im_end], skip_special_tokens=False) == "<|im_end|>"
    assert tok.decode([im_end]) == ""
    assert tok.decode([im_end], skip_special_tokens=False) == "<|im_end|>"
    for token_id in range(tok.vocab_size):
        fresh = tok._decode([token_id], True)  # uncached
        assert tok.decode([token_id]) == fresh
        assert tok.decode((token_id,)) == fresh  # served from the cache, any sequence type
    assert len(tok._one_token) <= 2 * tok.vocab_size
    # Longer windows are never cached: they still decode as a whole (a split character joins).
    ids = tok.encode("世界")
    assert tok.decode(ids) == "世界"


def test_generation_config_eos_ids_are_added(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "tok"
    shutil.copytree(tiny_tokenizer_dir, d)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    t = Tokenizer.from_pretrained(d)
    assert {0, 2} <= t.eos_token_ids
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    assert 1 in Tokenizer.from_pretrained(d).eos_token_ids


def test_chatml_template(tok: Tokenizer) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tok.render_chat(msgs)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok.apply_chat_template(msgs)
    assert ids == tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == text
    no_prompt = tok.render_chat(msgs, add_generation_prompt=False)
    assert not no_prompt.endswith("assistant\n")


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user"}],  # no content: undefined in the template
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],  # str + list
    ],
)
def test_template_errors_become_invalid_parameter(tok: Tokenizer, messages: list) -> None:
    with pytest.raises(InvalidParameterError) as exc:
        tok.apply_chat_template(messages)
    assert exc.value.param == "messages"


def test_raise_exception_in_template(tiny_tokenizer_dir: Path) -> None:
    t = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    t.hf.chat_template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    assert t.render_chat([{"role": "user", "content": "x"}], add_generation_prompt=False) == "x"
    with pytest.raises(InvalidParameterError, match="System role not supported") as exc:
        t.apply_chat_template([{"role": "system", "content": "x"}])
    assert exc.value.param == "messages"


def test_missing_template_is_invalid_parameter(tiny_tokenizer_dir: Path) -> None:
    t = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    t.hf.chat_template = None
    with pytest.raises(InvalidParameterError):
        t.apply_chat_template([{"role": "user", "content": "x"}])


# Texts that stress a bytes-per-token bound: special-token strings (one token, many bytes),
# whitespace runs, multi-byte and combining characters, Hangul jamo (NFC composes 9 bytes into 3).
_HARD_TEXTS = st.lists(
    st.one_of(st.text(max_size=40), st.sampled_from(["<|im_start|>", "<|im_end|>", " " * 64, "\n" * 9,
                                                      "\u1100\u1161\u11a8", "e\u0301", "🎉", "ẞ"])),
    max_size=12,
).map("".join)


def _wrapped(backend: object) -> Tokenizer:
    from transformers import PreTrainedTokenizerFast

    return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>"))


def _bpe(normalizer: object) -> object:
    from tokenizers import Tokenizer as Rust
    from tokenizers import decoders, models, pre_tokenizers, trainers

    rust = Rust(models.BPE())
    rust.normalizer = normalizer
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    corpus = ["def add(a, b): return a + b", "한국어 텍스트 " * 5, "héllo wörld " * 5] * 20
    rust.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return rust


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_HARD_TEXTS)
def test_bytes_per_token_bound_is_never_too_small(tok: Tokenizer, text: str) -> None:
    """The prompt-length shortcut refuses a text only when bytes > bound * context: sound only if
    no text ever needs fewer than bytes / bound tokens."""
    bound = tok.max_bytes_per_token()
    assert bound is not None
    assert len(tok.encode(text, add_special_tokens=False)) * bound >= len(text.encode())


def test_bytes_per_token_bound_covers_unicode_composition() -> None:
    from tokenizers import normalizers

    nfc = _wrapped(_bpe(normalizers.NFC()))
    bound = nfc.max_bytes_per_token()
    assert bound is not None
    jamo = "\u1100\u1161\u11a8" * 200  # 1,800 bytes that NFC composes into 600
    assert len(nfc.encode(jamo, add_special_tokens=False)) * bound >= len(jamo.encode())


def test_no_bytes_per_token_bound_when_a_normalizer_may_delete_text() -> None:
    from tokenizers import Regex, normalizers

    assert _wrapped(_bpe(normalizers.Replace(Regex(" +"), ""))).max_bytes_per_token() is None
    assert _wrapped(_bpe(normalizers.BertNormalizer())).max_bytes_per_token() is None


def test_token_bytes_rebuild_text_byte_level_and_byte_fallback(tok: Tokenizer) -> None:
    """Each token's own bytes (OpenAI's logprobs ``bytes``) join back into the text, characters split
    across tokens included, for GPT-2 byte-level and SentencePiece byte-fallback vocabularies."""
    from tokenizers import Tokenizer as Rust
    from tokenizers import decoders, models

    text = "héllo 🐱 你好"
    ids = tok.encode(text, add_special_tokens=False)
    assert any(tok.decode([i]) == "\ufffd" for i in ids)  # some token ends inside a character
    assert b"".join(tok.token_bytes(i) or b"?" for i in ids).decode() == text
    vocab = {"<unk>": 0, "\u2581h": 1, "llo": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    rust = Rust(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    rust.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    sp = _wrapped(rust)
    pieces = [vocab["\u2581h"], *(3 + b for b in "é".encode()), vocab["llo"]]
    assert sp.decode([pieces[1]]) == "\ufffd" and b"".join(sp.token_bytes(i) or b"?" for i in pieces) == " héllo".encode()
    assert tok.token_bytes(next(iter(tok.eos_token_ids))) is None  # a special token: its text stands


def test_frame_special_puts_the_post_processors_tokens_around_ids(tiny_tokenizer_dir: Path) -> None:
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    bos, eos = hf.convert_tokens_to_ids(["<|im_start|>", "<|endoftext|>"])
    hf.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|im_start|> $A <|endoftext|>", special_tokens=[("<|im_start|>", bos), ("<|endoftext|>", eos)])
    framed = Tokenizer(hf)
    ids = framed.encode("hello world", add_special_tokens=False)
    assert framed.frame_special(ids) == framed.encode("hello world", add_special_tokens=True) == [bos, *ids, eos]
    plain = Tokenizer.from_pretrained(tiny_tokenizer_dir)  # no post-processor tokens: nothing added
    assert plain.frame_special(ids) == ids
