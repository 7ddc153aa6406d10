"""The hit guard: a semantic neighbour is served only if the words that change an answer agree.

Sentence embeddings place "Is the clinic open on Sundays?" and "... closed on Sundays?" at
cosine 0.96: a threshold alone serves a quarter of such traps (shared/data/semantic-cache).
The guard compares what a cosine ignores, and rejects the pair unless all of these agree:

- numbers and quantities (``3pm``, ``£250,000``, ``fifteen``, ``2-bedroom``), time words
  (weekdays, months, today/tomorrow, weekends, am/pm);
- negations (``not``, ``n't``, ``never``, ``without``, ``non-``) and antonym prefixes
  (``safe``/``unsafe``, ``lock``/``unlock``);
- comparatives and superlatives (``most``/``least``, ``cheapest``);
- direction words with what they point at, in order (``from savings to current``);
- named entities (capitalised words) must appear on both sides;
- content words: after dropping function words and generic verbs and pairing spelling
  variants (``centre``/``center``, typos), nothing may be left over on either side — a swapped
  content word (``blue``/``red``, ``eat``/``avoid``) or an added qualifier (``extended
  warranty``, ``in babies``) changes the question.

It is deliberately strict: a missed hit costs one backend call, a wrong hit costs a wrong
answer. ``benchmarks/semantic_cache_quality.py`` measures both sides.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

_CONTRACTIONS = [
    (re.compile(r"\bcan't\b"), "can not"), (re.compile(r"\bwon't\b"), "will not"), (re.compile(r"n't\b"), " not"),
    (re.compile(r"'re\b"), " are"), (re.compile(r"'m\b"), " am"), (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'ve\b"), " have"), (re.compile(r"'d\b"), " would"), (re.compile(r"\b(what|that|it|there|who|where|how|when)'s\b"), r"\1 is"),
]  # fmt: skip
_TOKEN = re.compile(r"[a-z]+|\d+(?:[.,]\d+)*|[%£$€]")
_RAW_WORD = re.compile(r"[A-Za-z][A-Za-z]*")

_NUMBER_WORDS = {
    "zero": "0", "one": "1", "single": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13",
    "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19",
    "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000",
    "million": "1000000", "half": "0.5", "double": "x2", "twice": "x2",
}  # fmt: skip
_UNIT_WORDS = {"percent": "%", "per cent": "%", "pounds": "£", "dollars": "$", "euros": "€"}
_TIME_WORDS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday weekday weekend today tomorrow yesterday tonight "
    "morning afternoon evening night am pm january february march april may june july august september october "
    "november december daily weekly monthly yearly annual annually hourly same next last previous first second third "
    "early late".split()  # "may" is left out: far more often the verb than the month
)
# Only before a number ("under £50", "over 18") do these flip an answer; elsewhere they are phrasing.
_NUMERIC_DIRECTIONS = frozenset("over under above below".split())
# "to" is a direction only with a "from" ("from savings to current"); otherwise mostly an infinitive.
_PAIRED_DIRECTIONS = frozenset({"to"})
_NOT_SUPERLATIVES = frozenset(
    "request interest honest forest guest suggest invest test contest protest digest harvest arrest west nest rest "
    "chest quest vest manifest pest inquest conquest modest".split()
)
_NEGATIONS = frozenset("not no never none nothing nobody neither nor without non cannot".split())
_COMPARATIVES = frozenset("most least more less fewer best worst better worse".split())
_DIRECTIONS = frozenset("from to into onto out off before after above below over under towards".split())
_ANTONYM_PREFIXES = ("un", "in", "im", "ir", "il", "dis", "non", "de", "mis")
# Function words and generic verbs: rewording them does not change what is asked.
_STOP = frozenset(
    """a an the this that these those it its is are was were be been being am do does did doing done have has had
    having will would shall should can could may might must i me my mine we us our you your yours he him his she
    her they them their what which who whom whose when where why how whether if then than so as at by for of on in
    with about any some there here please just also really um uh er hi hello morning thanks thank okay ok oh well
    get got obtain request make create set go going find tell know need needed want like able possible way
    way allowed is it anything something someone much many there any does work take taken give given use used
    usually typically normally currently actually still kind sort thing things lot bit whats steps step
    hey sorry question but wonder wondering quick anyone help hoping kindly let s""".split()
) - _DIRECTIONS - _NEGATIONS
# Spelling variants and typos: stems this similar, with the same first letter, are one word.
_TYPO_RATIO = 0.8
# Stems sharing this long a prefix are forms of one word (quote/quotation, agent/agency).
_SHARED_PREFIX = 4
# On pairs-dev, no trap that adds one word scores above 0.89 and no trap that swaps one content
# word above 0.957 (open/closed, full-time/part-time); the slack stays above both.
ADD_SLACK_COSINE = 0.90
SWAP_SLACK_COSINE = 0.96
_GREETING = re.compile(r"^\s*(good\s+)?(morning|afternoon|evening|hi|hello|hey)\b[\s!,.]*", re.IGNORECASE)


def _normalise(text: str) -> str:
    t = _GREETING.sub("", text.replace("’", "'")).lower()
    for words, unit in _UNIT_WORDS.items():
        t = t.replace(words, unit)
    for pattern, repl in _CONTRACTIONS:
        t = pattern.sub(repl, t)
    return t


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + repl
    return word


@dataclass(slots=True)
class Features:
    critical: Counter[str]
    directions: list[tuple[str, str]]
    entities: set[str]
    tokens: set[str]
    content: Counter[str]


def features(text: str) -> Features:
    """The guard's view of ``text``: a fresh copy (``explain`` adjusts it) of a cached analysis —
    a miss compares one query with several neighbours, and cached questions recur."""
    f = _analyse(text)
    return Features(f.critical.copy(), list(f.directions), set(f.entities), set(f.tokens), f.content.copy())


# Texts analysed by the guard, kept: a few thousand short questions are a few MB.
@lru_cache(maxsize=8192)
def _analyse(text: str) -> Features:
    tokens = _TOKEN.findall(_normalise(text))
    paired = "from" in tokens
    critical: Counter[str] = Counter()
    content: Counter[str] = Counter()
    directions: list[tuple[str, str]] = []
    for i, tok in enumerate(tokens):
        if tok[0].isdigit():
            critical["#" + tok.replace(",", "")] += 1
        elif tok in "%£$€":
            critical[tok] += 1
        elif tok in _NUMBER_WORDS:
            critical["#" + _NUMBER_WORDS[tok]] += 1
        elif tok in ("am", "pm"):
            if i > 0 and tokens[i - 1][0].isdigit():
                critical["t:" + tok] += 1
        elif tok in _TIME_WORDS or _stem(tok) in _TIME_WORDS:
            critical["t:" + _stem(tok)] += 1
        elif tok in _NEGATIONS:
            critical["not"] += 1
        elif tok in _COMPARATIVES or (tok.endswith("est") and len(tok) > 5 and tok not in _NOT_SUPERLATIVES):
            critical["cmp:" + tok] += 1
        elif tok in _DIRECTIONS:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            if tok in _NUMERIC_DIRECTIONS and not (nxt[:1].isdigit() or nxt in "£$€"):
                continue
            if tok in _PAIRED_DIRECTIONS and not paired:
                continue
            target = next((t for t in tokens[i + 1 :] if t not in _STOP and t not in _DIRECTIONS), "")
            directions.append((tok, _stem(target)))
        elif tok not in _STOP:
            content[_stem(tok)] += 1
    entities = set()
    for sentence in re.split(r"[.!?]\s+|^", text):
        words = _RAW_WORD.findall(sentence)
        # Capitalised time words (Monday, March) are compared, typos allowed, as time words.
        entities |= {w.lower() for w in words[1:] if w[0].isupper() and w != "I" and _stem(w.lower()) not in _TIME_WORDS}
    return Features(critical, directions, entities, set(tokens), content)


def _antonyms(a: str, b: str) -> bool:
    """safe/unsafe, lock/unlock, like/dislike: an antonym made with a prefix."""
    return any(a == p + b or b == p + a for p in _ANTONYM_PREFIXES)


def _is_variant(a: str, b: str) -> bool:
    """Spelling variant or typo, but not an antonym made with a prefix."""
    if _antonyms(a, b):
        return False
    if a[:_SHARED_PREFIX] == b[:_SHARED_PREFIX] and min(len(a), len(b)) >= _SHARED_PREFIX:
        return True
    return a[0] == b[0] and SequenceMatcher(None, a, b).ratio() >= _TYPO_RATIO


def _absorb_misspelt_time_words(fa: Features, fb: Features) -> None:
    """'Mondys' is Monday misspelt: a time word of ``fa`` matched by a content-word variant in ``fb``."""
    for key in list((fa.critical - fb.critical).elements()):
        if not key.startswith("t:"):
            continue
        word = key[2:]
        match = next((c for c in fb.content if c not in fa.content and _is_variant(word, c)), None)
        if match is not None:
            fb.content[match] -= 1
            fb.content += Counter()  # drop zero counts
            fb.critical[key] += 1


def _leftover(a: Counter[str], b: Counter[str]) -> tuple[list[str], list[str]]:
    only_a = list((a - b).elements())
    only_b = list((b - a).elements())
    for w in list(only_a):
        match = next((v for v in only_b if _is_variant(w, v)), None)
        if match is not None:
            only_a.remove(w)
            only_b.remove(match)
    return only_a, only_b


def explain(query: str, cached: str, score: float = 0.0) -> str | None:
    """Why the pair must not share an answer, or None when the guard lets it through.

    ``score`` (their cosine) buys a little slack on content words only: one extra word at
    ``ADD_SLACK_COSINE``, one swapped word at ``SWAP_SLACK_COSINE``; critical tokens never bend.
    """
    fa, fb = features(query), features(cached)
    _absorb_misspelt_time_words(fa, fb)
    _absorb_misspelt_time_words(fb, fa)
    if fa.critical != fb.critical:
        return f"numbers/negations/time words differ: {dict(fa.critical - fb.critical)} vs {dict(fb.critical - fa.critical)}"
    if fa.directions != fb.directions:
        return f"direction differs: {fa.directions} vs {fb.directions}"
    stems_a, stems_b = {_stem(t) for t in fa.tokens}, {_stem(t) for t in fb.tokens}
    missing = {e for e in fa.entities - _STOP if _stem(e) not in stems_b}
    missing |= {e for e in fb.entities - _STOP if _stem(e) not in stems_a}
    if missing:
        return f"entities differ: {sorted(missing)}"
    only_a, only_b = _leftover(fa.content, fb.content)
    if not (only_a or only_b):
        return None
    if any(_antonyms(w, v) for w in only_a for v in only_b):
        return f"antonyms: {only_a} vs {only_b}"
    if len(only_a) + len(only_b) == 1 and score >= ADD_SLACK_COSINE:
        return None
    if len(only_a) == 1 and len(only_b) == 1 and score >= SWAP_SLACK_COSINE:
        return None
    return f"content words differ: {only_a} vs {only_b}"


def same_answer(query: str, cached: str, score: float = 0.0) -> bool:
    return explain(query, cached, score) is None
