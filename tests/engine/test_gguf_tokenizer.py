"""A tokenizer rebuilt from GGUF metadata encodes, decodes and renders chats as the original does."""

from __future__ import annotations

from pathlib import Path

import pytest

from blink.engine.errors import UnsupportedModelError
from blink.engine.tokenizer import Tokenizer
from tests.gguf_export import export_tokenizer_gguf

MIXED_TEXT = (
    "Numbers 1234567 and 3.14159, 2024-11-26; café naïve Ünïcödé 日本語の文章 emoji 🙂👍🏽\n"
    "def f(x: int) -> int:\n    return x ** 2  # don't, I'LL, we've\n\n\t\ttabs   and  spaces   \n"
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"
)
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2 = ?"}]

# Pre-tokenizers as the original tokenizer.json files write them, under llama.cpp's names.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPLIT = _QWEN2_SPLIT.replace(r"|\p{N}|", r"|\p{N}{1,3}|")


def _pre_tokenizer(style: str) -> tuple[object, object | None]:
    from tokenizers import Regex, normalizers, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if style == "gpt-2":
        return byte_level, None
    if style == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]), None
    split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT if style == "qwen2" else _LLAMA3_SPLIT), "isolated")
    seq = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return seq, (normalizers.NFC() if style == "qwen2" else None)


def _hf_tokenizer_dir(out: Path, style: str) -> Path:
    """A ChatML byte-level BPE folder (like blink.demo.tiny's) with ``style``'s pre-tokenizer."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from blink.demo.tiny import CHATML_TEMPLATE, EOS_TOKEN, SPECIAL_TOKENS, _stdlib_corpus

    tok = RustTokenizer(models.BPE(ignore_merges=style == "llama-bpe"))
    tok.pre_tokenizer, normalizer = _pre_tokenizer(style)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_stdlib_corpus()[:10], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], clean_up_tokenization_spaces=False)
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(out))
    return out


def _assert_same(reference: Tokenizer, rebuilt: Tokenizer) -> None:
    ids = reference.encode(MIXED_TEXT)
    assert rebuilt.encode(MIXED_TEXT) == ids
    assert rebuilt.encode(MIXED_TEXT, add_special_tokens=False) == reference.encode(MIXED_TEXT, add_special_tokens=False)
    assert rebuilt.decode(ids, skip_special_tokens=False) == MIXED_TEXT
    assert rebuilt.decode(ids) == reference.decode(ids)
    assert rebuilt.apply_chat_template(MESSAGES) == reference.apply_chat_template(MESSAGES)
    assert rebuilt.eos_token_ids == reference.eos_token_ids
    assert rebuilt.all_special_ids >= {reference.hf.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")}
    assert rebuilt.vocab_size == reference.vocab_size


def test_tiny_tokenizer_round_trips(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    file = export_tokenizer_gguf(tiny_tokenizer_dir, tmp_path / "tok.gguf", "gpt-2")
    _assert_same(Tokenizer.from_pretrained(tiny_tokenizer_dir), Tokenizer.from_pretrained(file))


@pytest.mark.parametrize("style", ["smollm", "qwen2", "llama-bpe"])
def test_pre_tokenizer_follows_tokenizer_ggml_pre(style: str, tmp_path: Path) -> None:
    folder = _hf_tokenizer_dir(tmp_path / "hf", style)
    file = export_tokenizer_gguf(folder, tmp_path / "tok.gguf", style)
    reference = Tokenizer.from_pretrained(folder)
    rebuilt = Tokenizer.from_pretrained(file)
    # Digits split differently under each style; the text exercises that difference.
    pieces = rebuilt.hf.backend_tokenizer.pre_tokenizer.pre_tokenize_str("1234567")
    assert len(pieces) == {"smollm": 7, "qwen2": 7, "llama-bpe": 3}[style]
    _assert_same(reference, rebuilt)


def test_unknown_pre_tokenizer_is_a_clear_error(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    file = export_tokenizer_gguf(tiny_tokenizer_dir, tmp_path / "tok.gguf", "made-up")
    with pytest.raises(UnsupportedModelError, match="pre-tokenizer 'made-up' is not supported"):
        Tokenizer.from_pretrained(file)


def test_add_bos_token_puts_bos_before_prompts_not_chats(tiny_tokenizer_dir: Path, tmp_path: Path) -> None:
    file = export_tokenizer_gguf(tiny_tokenizer_dir, tmp_path / "tok.gguf", "gpt-2", add_bos="<|endoftext|>")
    rebuilt, reference = Tokenizer.from_pretrained(file), Tokenizer.from_pretrained(tiny_tokenizer_dir)
    bos = reference.hf.convert_tokens_to_ids("<|endoftext|>")
    assert rebuilt.encode(MIXED_TEXT) == [bos, *reference.encode(MIXED_TEXT)]
    assert rebuilt.encode(MIXED_TEXT, add_special_tokens=False) == reference.encode(MIXED_TEXT)
    assert rebuilt.decode(rebuilt.encode(MIXED_TEXT)) == reference.decode(reference.encode(MIXED_TEXT))
    # The chat template places any BOS itself; none is added to a rendered chat.
    assert rebuilt.apply_chat_template(MESSAGES) == reference.apply_chat_template(MESSAGES)
