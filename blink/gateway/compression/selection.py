"""Keep the most informative words of a text, in order, to a target share of its tokens.

Words, not single tokens, are kept or dropped: a word cut in half reads as noise to the upstream
model and saves little. A word's score is the mean self-information (−log p, from the scoring
model) of the tokens that start inside it. Line breaks of dropped words are kept, so lists and
paragraphs keep their shape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# A word with the white space in front of it.
_WORD = re.compile(r"\s*\S+")
# The most characters searched ahead for a token after ones of no known width (the first token,
# partial UTF-8 bytes): more means the scorer's tokens do not spell this text, which is then
# left as it is.
_MAX_SKIP = 32
_REPLACEMENT = "\ufffd"


@dataclass(slots=True)
class ScoredToken:
    text: str
    # −log p of the token given the ones before it; None where nothing predicts it (the first).
    surprisal: float | None


def align(text: str, tokens: list[ScoredToken]) -> list[int] | None:
    """Each token's start offset in ``text``, or None when the tokens do not spell the text.

    A token whose text is unknown (the unpredicted first one), a special token (BOS) or a partial
    UTF-8 byte sequence (decoded as U+FFFD) takes no width of its own; the next whole token is
    then looked for a few characters ahead, and the characters skipped belong to the token before.
    """
    starts: list[int] = []
    pos = 0
    for tok in tokens:
        piece = tok.text
        if piece and _REPLACEMENT not in piece:
            found = pos if text.startswith(piece, pos) else text.find(piece, pos, pos + _MAX_SKIP + len(piece))
            if found >= 0:
                starts.append(found)
                pos = found + len(piece)
                continue
        starts.append(pos)
    if len(text) - pos > _MAX_SKIP:
        return None
    return starts


def select_words(text: str, tokens: list[ScoredToken], keep_share: float) -> tuple[str, int] | None:
    """(``text`` keeping about ``keep_share`` of its tokens, tokens dropped), or None when the
    tokens cannot be aligned to the text (then it must be sent unchanged)."""
    if not 0.0 < keep_share < 1.0 or not tokens:
        return None
    starts = align(text, tokens)
    if starts is None:
        return None
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    if len(words) < 2:
        return None
    counts = [0] * len(words)
    sums = [0.0] * len(words)
    w = 0
    for start, tok in zip(starts, tokens, strict=True):
        while w + 1 < len(words) and start >= words[w + 1][0]:
            w += 1
        counts[w] += 1
        # The unpredicted first token is as informative as any: never the reason to drop a word.
        sums[w] += tok.surprisal if tok.surprisal is not None else math.inf
    budget = max(1, round(len(tokens) * keep_share))
    order = sorted(range(len(words)), key=lambda i: -(sums[i] / counts[i]) if counts[i] else 0.0)
    keep = [False] * len(words)
    kept_tokens = 0
    for i in order:
        if kept_tokens + counts[i] > budget and kept_tokens > 0:
            continue
        keep[i] = True
        kept_tokens += counts[i]
    return _join(text, words, keep), len(tokens) - kept_tokens


def _join(text: str, words: list[tuple[int, int]], keep: list[bool]) -> str:
    parts: list[str] = []
    newline_pending = False
    for (start, end), kept in zip(words, keep, strict=True):
        word = text[start:end]
        body = word.lstrip()
        lead = word[: len(word) - len(body)]
        if not kept:
            newline_pending = newline_pending or "\n" in lead
            continue
        if newline_pending and "\n" not in lead:
            lead = "\n"
        elif parts and not lead:
            lead = ""
        elif parts and "\n" not in lead:
            lead = " "
        newline_pending = False
        parts.append(lead + body)
    return "".join(parts) + text[words[-1][1] :]
