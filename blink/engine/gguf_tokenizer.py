"""A GGUF file's tokenizer rebuilt as a ``transformers`` fast tokenizer.

A GGUF file carries its tokenizer as metadata (``tokenizer.ggml.*``), not as tokenizer.json, and
the engine's :class:`~blink.engine.tokenizer.Tokenizer` wants an HF tokenizer (its chat-template
rendering and special-token rules). This rebuilds the byte-level BPE that llama.cpp's converter
took apart: vocabulary and merges, the pre-tokenizer named by ``tokenizer.ggml.pre`` (the split
regex llama.cpp uses for that name, written the way the original tokenizer.json writes it), control
tokens as special tokens, BOS/EOS and the chat template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blink.engine.errors import UnsupportedModelError
from blink.engine.gguf_loader import field, open_reader

# llama.cpp's token types (llama_token_type / gguf.TokenType).
_CONTROL = 3
_USER_DEFINED = 4

# The split regexes of llama.cpp's llama-vocab.cpp, per ``tokenizer.ggml.pre``.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# GPT-2's regex is ByteLevel's own; these names use it, some after splitting digits one by one.
_GPT2_PRE = frozenset({"gpt-2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "olmo"})
_DIGITS_THEN_GPT2_PRE = frozenset({"smollm", "starcoder", "refact", "command-r"})
_LLAMA3_PRE = frozenset({"llama3", "llama-v3", "llama-bpe", "smaug-bpe", "falcon3"})
_QWEN2_PRE = frozenset({"qwen2", "deepseek-r1-qwen"})
SUPPORTED_PRE = tuple(sorted(_GPT2_PRE | _DIGITS_THEN_GPT2_PRE | _LLAMA3_PRE | _QWEN2_PRE))


def _pre_tokenizer(pre: str) -> tuple[Any, Any, bool]:
    """(normalizer, pre-tokenizer, ignore_merges) for llama.cpp's pre-tokenizer name."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _GPT2_PRE:
        return None, byte_level, False
    if pre in _DIGITS_THEN_GPT2_PRE:
        return None, pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]), False
    split = _LLAMA3_SPLIT if pre in _LLAMA3_PRE else _QWEN2_SPLIT if pre in _QWEN2_PRE else None
    if split is None:
        raise UnsupportedModelError(
            f"GGUF pre-tokenizer {pre!r} is not supported; supported: {', '.join(SUPPORTED_PRE)}"
        )
    seq = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    # Qwen2's tokenizer.json normalises to NFC; Llama 3's ignores merges for whole-vocab words.
    return (normalizers.NFC() if pre in _QWEN2_PRE else None), seq, pre in _LLAMA3_PRE


def load_gguf_tokenizer(path: Path) -> tuple[Any, list[int]]:
    """(``PreTrainedTokenizerFast``, extra end-of-sequence ids) from the file's metadata."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    reader = open_reader(path)
    kind = field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedModelError(
            f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')"
        )
    tokens: list[str] = list(field(reader, "tokenizer.ggml.tokens", []))
    types: list[int] = list(field(reader, "tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges", [])]
    normalizer, pre_tokenizer, ignore_merges = _pre_tokenizer(str(field(reader, "tokenizer.ggml.pre", "gpt-2")))

    bpe = models.BPE(
        vocab={tok: i for i, tok in enumerate(tokens)}, merges=merges, ignore_merges=ignore_merges
    )
    tok = Tokenizer(bpe)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind_ in zip(tokens, types, strict=False) if kind_ == _USER_DEFINED])
    control = [t for t, kind_ in zip(tokens, types, strict=False) if kind_ == _CONTROL]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])

    def token_id(key: str) -> int | None:
        idx = field(reader, f"tokenizer.ggml.{key}")
        return idx if isinstance(idx, int) and 0 <= idx < len(tokens) else None

    def token(key: str) -> str | None:
        idx = token_id(key)
        return None if idx is None else tokens[idx]

    bos, eos = token("bos_token_id"), token("eos_token_id")
    # llama.cpp adds BOS/EOS around a prompt when these flags say so; HF does it in a post-processor.
    add = [(name, tok_id) for name, flag in (("bos", "add_bos_token"), ("eos", "add_eos_token"))
           if field(reader, f"tokenizer.ggml.{flag}", False) and (tok_id := token_id(f"{name}_token_id")) is not None]
    if add:
        ids = dict(add)
        before = [f"{tokens[ids['bos']]}:0"] if "bos" in ids else []
        after = [f"{tokens[ids['eos']]}:0"] if "eos" in ids else []
        tok.post_processor = processors.TemplateProcessing(
            single=[*before, "$A:0", *after],
            pair=[*before, "$A:0", *after, "$B:1", *(f"{t.rpartition(':')[0]}:1" for t in after)],
            special_tokens=[(tokens[i], i) for i in set(ids.values())],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    named = {"bos_token": bos, "eos_token": eos, "unk_token": token("unknown_token_id"),
             "pad_token": token("padding_token_id")}
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **named,
        # Every control token counts as special (skipped when decoding with skip_special_tokens).
        additional_special_tokens=[t for t in control if t not in named.values()],
        clean_up_tokenization_spaces=False,
    )
    template = field(reader, "tokenizer.chat_template")
    if isinstance(template, str) and template:
        hf.chat_template = template
    extra_eos = [
        idx for key in ("eot_token_id", "eom_token_id")
        if isinstance(idx := field(reader, f"tokenizer.ggml.{key}"), int)
    ]
    return hf, extra_eos
