"""One tokenisation gives the model's arrays and the full token counts (validation, usage)."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

from blink.modelserver.embedder import resolve_model_dir
from blink.modelserver.onnx_session import PaddedTokenizer

# Small on purpose: the long text below crosses it without a long test input.
_MAX = 16


def _reference(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The tokenizers library's own truncation and padding (what the arrays must equal)."""
    tok = Tokenizer.from_file(str(resolve_model_dir("all-MiniLM-L6-v2") / "tokenizer.json"))
    tok.enable_truncation(_MAX)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"))
    encs = tok.encode_batch(texts)
    return np.asarray([e.ids for e in encs]), np.asarray([e.attention_mask for e in encs])


def test_arrays_equal_the_tokenizers_padding_and_truncation_and_counts_are_uncut() -> None:
    pt = PaddedTokenizer(resolve_model_dir("all-MiniLM-L6-v2") / "tokenizer.json", _MAX)
    texts = ["ok", "How do I reset my password?", "word " * 40]
    ids, mask, counts = pt.encode(texts)
    ref_ids, ref_mask = _reference(texts)
    assert np.array_equal(ids, ref_ids) and np.array_equal(mask, ref_mask)
    assert counts == pt.count(texts) and counts[2] == 42 > _MAX  # 40 words + [CLS] + [SEP]
    assert ids.shape == (3, _MAX) and ids[2, -1] == ref_ids[2, -1]  # the cut row still ends in [SEP]


def test_a_batch_is_padded_to_its_longest_input_not_to_the_limit() -> None:
    pt = PaddedTokenizer(resolve_model_dir("all-MiniLM-L6-v2") / "tokenizer.json", 256)
    ids, mask, counts = pt.encode(["ok", "hello there"])
    assert ids.shape == (2, max(counts)) and mask.sum(axis=1).tolist() == counts


def test_one_text_gives_the_batch_rows_ids_and_count_cut_or_not() -> None:
    pt = PaddedTokenizer(resolve_model_dir("all-MiniLM-L6-v2") / "tokenizer.json", _MAX)
    for text in ("How do I reset my password?", "word " * 40):
        ids, count = pt.encode_one(text)
        ref_ids, _, ref_counts = pt.encode([text])
        assert np.array_equal(ids, ref_ids) and ids.dtype == np.int64 and count == ref_counts[0]
