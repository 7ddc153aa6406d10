"""The hit guard: a semantic neighbour is served only if the words that change an answer agree.

Sentence embeddings place "Is the clinic open on Sundays?" and "... closed on Sundays?" at
cosine 0.96, and "convert kilograms to pounds" and "pounds to kilograms" at 0.99: a threshold
alone serves a quarter of such traps (benchmarks/RESULTS.md, "Semantic-cache quality"). The guard compares what a
cosine ignores, and rejects the pair unless all of these agree:

- numbers and quantities (``3pm``, ``£250,000``, ``fifteen``, ``2-bedroom``; ``03/04``,
  ``140/90``, ``2024-25`` as one token each, so their order counts), time words (weekdays,
  months, today/tomorrow, weekends, am/pm), and the unit after a number (``10 km``/``10 miles``,
  ``5 mg``/``5 ml``: no slack bends it, a spelling or WordNet synonym of it pairs up);
- third persons (``he``/``she``/``they``: whom the question is about; I/we/you are the asker);
- negations (``not``, ``n't``, ``never``, ``without``, ``non-``);
- comparatives and superlatives (``most``/``least``, ``cheapest``);
- direction words with what they point at, in order (``from savings to current``), and the
  order around a relation word: the phrase left of ``to``/``into``/``than``/``in``/``per`` …
  in one question must not stand on its right in the other (``PNG to JPEG``/``JPEG to PNG``);
- named entities (capitalised words) and possessors (``my wife's``, ``the cat's``) must appear
  on both sides, or a WordNet synonym ("the US"/"America");
- opposites anywhere among the differing words, generic verbs included: a negating prefix on a
  form of the other word (``subscribe``/``unsubscribing``), opposed prefixes (``enable``/
  ``disable``) or an everyday opposite (``take``/``avoid``) — rules in ``lexicon.py`` — or
  WordNet's antonyms (``won``/``lost``, ``common``/``rare``: ``synonyms.antonyms``);
- content words: after dropping function words and generic verbs and pairing forms of one word
  (inflections, British/American spellings, typos of which one side is not an English word) and
  WordNet synonyms (``synonyms.py``: "dispute"/"challenge", "close"/"shut down"), nothing may be
  left over — except, at a high cosine, one added word (``params.add_slack``)
  or one replaced word (``params.swap_slack``). Never when the word stands right before a word
  both share (``extended warranty``, ``self-employed``: it narrows it), nor when the two
  replaced words are spelt alike (``Niger``/``Nigeria``: two names) or one is no English word
  (``cetirizine``/``loratadine``: two names in lower case) or both are nouns for
  two kinds of one thing by WordNet (``puppy``/``kitten``, ``adults``/``kids``); an added word that closes
  a noun phrase after a shared word (``phone`` -> ``phone card``: a new thing asked about) needs
  the replaced-word slack.

It is deliberately strict: a missed hit costs one backend call, a wrong hit costs a wrong
answer. ``benchmarks/semantic_cache_quality.py --folds K`` measures both sides on pairs held
out from the fit of the two slack cosines.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from blink.gateway.cache.lexicon import english, is_word, look_alike, opposed, variant
from blink.gateway.cache.lexicon import stem as _stem
from blink.gateway.cache.synonyms import antonyms, can_be_noun, co_hyponyms, synonyms

_CONTRACTIONS = [
    (re.compile(r"\bcan't\b"), "can not"), (re.compile(r"\bwon't\b"), "will not"), (re.compile(r"n't\b"), " not"),
    (re.compile(r"'re\b"), " are"), (re.compile(r"'m\b"), " am"), (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'ve\b"), " have"), (re.compile(r"'d\b"), " would"), (re.compile(r"\b(what|that|it|there|who|where|how|when)'s\b"), r"\1 is"),
]  # fmt: skip
# A number keeps its separators between digits: "03/04" is not "04/03", "2024-25" not "2025-24".
_TOKEN = re.compile(r"[a-z]+|\d+(?:[.,/:-]\d+)*|[%£$€]")
# "my wife's", "the cat's": a possessor (not "he's", "let's": a verb), compared as an entity.
_POSSESSOR = re.compile(r"\b([a-z]+)'s\b")
_NOT_POSSESSORS = frozenset("he she let here".split())
# Third persons are whom a question is about ("safe for me"/"safe for her"); I/we/you are the
# asker and are reworded freely ("how do I"/"how do you"), so only these are compared.
_THIRD_PERSONS = {"he": "he", "him": "he", "his": "he", "himself": "he", "she": "she", "her": "she", "hers": "she",
                  "herself": "she", "they": "they", "them": "they", "their": "they", "theirs": "they"}  # fmt: skip
# A word as written; not the letters after an apostrophe ("CAN'T" is no entity "T").
_RAW_WORD = re.compile(r"(?<!['’])\b[A-Za-z]+")
# "45,000" (a thousands separator: three digits follow) vs "1,5" (a decimal comma).
_THOUSANDS = re.compile(r",(?=\d{3}(?!\d))")

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
# Words whose two sides are ordered: "X to Y" is not "Y to X" (conversion, transfer, comparison).
_RELATIONS = frozenset("to into from than per before after over under above below in for".split())
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
# Generic verbs and nouns among the stop words; after a preposition of place or purpose one is
# a thing asked about ("at home"/"at work", "for help"), not phrasing.
_GENERIC = frozenset("work help use set question".split())
_PLACES = frozenset("at from for in on by with".split())  # not "to": mostly an infinitive
# More differing words than this on one side is another question, whatever pairs up; refusing it
# here also bounds the pairwise word comparisons below on long texts.
_MAX_DIFFERING = 16
# Relation words looked at per text: questions have a few; a long text cannot make it quadratic.
_MAX_RELATIONS = 32
# Words that carry no meaning in a question at all: only these are ignored when looking for opposites.
_FILLERS = frozenset("a an the um uh er hi hello hey please thanks thank okay ok oh well so just really sorry".split())


@dataclass(frozen=True, slots=True)
class GuardParams:
    """The cosine slack on content words; fitted by ``benchmarks/semantic_cache_quality.py --folds``
    on training folds (the defaults are its fit on all of pairs-dev, printed by ``--fit``)."""

    add_slack_cosine: float = 0.87  # one added or dropped content word
    swap_slack_cosine: float = 0.92  # one content word replaced by another
    # WordNet synonyms pair content words and names, and only a possible noun heads a new noun
    # phrase; off, the guard is the rules alone (the benchmark's "before" column).
    wordnet: bool = True


DEFAULT_PARAMS = GuardParams()
_GREETING = re.compile(r"^\s*(good\s+)?(morning|afternoon|evening|hi|hello|hey)\b[\s!,.]*", re.IGNORECASE)


def _normalise(text: str) -> str:
    t = _GREETING.sub("", text.replace("’", "'")).lower()
    for words, unit in _UNIT_WORDS.items():
        t = t.replace(words, unit)
    for pattern, repl in _CONTRACTIONS:
        t = pattern.sub(repl, t)
    return t


@dataclass(slots=True)
class Features:
    critical: Counter[str]
    directions: list[tuple[str, str]]
    entities: set[str]
    tokens: set[str]
    content: Counter[str]
    surface: dict[str, str]  # stem -> the word it came from (typos are judged on words)
    relations: list[tuple[str, frozenset[str], frozenset[str]]]  # (to, {celsius}, {fahrenheit})
    sequence: tuple[str, ...]  # every token, in order
    units: frozenset[str]  # content words right after a number: "10 km", "5 mg", "20 weeks"


def features(text: str) -> Features:
    """The guard's view of ``text``: a fresh copy (``explain`` adjusts it) of a cached analysis —
    a miss compares one query with several neighbours, and cached questions recur."""
    f = _analyse(text)
    return Features(f.critical.copy(), list(f.directions), set(f.entities), set(f.tokens), f.content.copy(),
                    f.surface, f.relations, f.sequence, f.units)  # fmt: skip


# Texts analysed by the guard, kept: a few thousand short questions are a few MB.
@lru_cache(maxsize=8192)
def _analyse(text: str) -> Features:
    tokens = _TOKEN.findall(_normalise(text))
    paired = "from" in tokens
    critical: Counter[str] = Counter()
    content: Counter[str] = Counter()
    surface: dict[str, str] = {}
    directions: list[tuple[str, str]] = []
    units: set[str] = set()
    for i, tok in enumerate(tokens):
        if tok in _THIRD_PERSONS:  # who, not how often: "they ... their" is still them
            critical["p:" + _THIRD_PERSONS[tok]] = 1
        if tok[0].isdigit():
            # "8:45" and "8.45" are one time; a decimal comma is a decimal point.
            critical["#" + _THOUSANDS.sub("", tok).replace(",", ".").replace(":", ".")] += 1
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
        elif tok not in _STOP or (tok in _GENERIC and i > 0 and tokens[i - 1] in _PLACES):
            content[_stem(tok)] += 1
            if i > 0 and (tokens[i - 1][0].isdigit() or tokens[i - 1] in _NUMBER_WORDS):
                units.add(_stem(tok))
            surface.setdefault(_stem(tok), tok)
    entities = set()
    for sentence in re.split(r"[.!?]\s+|^", text):
        if sentence.isupper():
            continue  # written in capitals throughout: capitals say nothing about names
        words = _RAW_WORD.findall(sentence)
        # Capitalised time words (Monday, March) are compared, typos allowed, as time words.
        entities |= {w.lower() for w in words[1:] if w[0].isupper() and w != "I" and _stem(w.lower()) not in _TIME_WORDS}
    # Whose thing it is must be asked on both sides, like a name ("my cat's"/"my dog's", "my
    # wife's"/"my"); "Austria's capital"/"the capital of Austria" has it on both.
    entities |= {m.group(1) for m in _POSSESSOR.finditer(_normalise(text)) if m.group(1) not in _NOT_POSSESSORS}
    return Features(critical, directions, entities, set(tokens), content, surface, _relations(tokens), tuple(tokens),
                    frozenset(units))  # fmt: skip


def _is_content(tok: str) -> bool:
    """Currencies count: "dollars to yen" is normalised to "$ to yen"."""
    return tok not in _STOP and tok not in _RELATIONS and tok not in _NEGATIONS


def _phrase(tokens: list[str], i: int, step: int) -> frozenset[str]:
    """The content words of the phrase nearest to ``tokens[i]`` in direction ``step``: function
    words are skipped up to it, and it ends at the next function word."""
    j = i + step
    while 0 <= j < len(tokens) and tokens[j] in _STOP and tokens[j] not in _RELATIONS:
        j += step
    words = []
    while 0 <= j < len(tokens) and _is_content(tokens[j]):
        words.append(_stem(tokens[j]))
        j += step
    return frozenset(words)


def _relations(tokens: list[str]) -> list[tuple[str, frozenset[str], frozenset[str]]]:
    out = []
    for i, tok in enumerate(tokens):
        if tok in _RELATIONS:
            left, right = _phrase(tokens, i, -1), _phrase(tokens, i, 1)
            if left and right:
                out.append((tok, left, right))
                if len(out) == _MAX_RELATIONS:
                    break
    return out


def _modifies(added: str, side: Features, other_stems: set[str]) -> bool:
    """"extended warranty", "self-employed": the added word stands right before a word both
    questions share, so it narrows what they ask about (a premodifier or a compound's first part)."""
    seq = side.sequence
    for i, tok in enumerate(seq[:-1]):
        nxt = seq[i + 1]
        if _stem(tok) == added and _is_content(nxt) and not nxt[0].isdigit() and _stem(nxt) in other_stems:
            return True
    return False


def _new_head(added: str, side: Features, other_stems: set[str], wordnet: bool = True) -> bool:
    """"my phone card": the added word closes a noun phrase right after a word both share. Only a
    word that can be a noun heads one ("Is Wi-Fi available": an adjective adds no new thing)."""
    seq = side.sequence
    for i, tok in enumerate(seq[1:], 1):
        prev, nxt = seq[i - 1], seq[i + 1] if i + 1 < len(seq) else ""
        if _stem(tok) == added and _is_content(prev) and _stem(prev) in other_stems and not (nxt and _is_content(nxt)) \
                and (not wordnet or can_be_noun(tok) or not is_word(tok)):
            return True
    return False


def _swapped(fa: Features, fb: Features) -> str | None:
    """"Celsius to Fahrenheit" vs "Fahrenheit to Celsius": the same relation word with what
    stands on its left in one question on its right in the other, and the other way round."""
    for rel, la, ra in fa.relations:
        for rel_b, lb, rb in fb.relations:
            if rel == rel_b and la & rb and ra & lb:
                return f"order swapped around {rel!r}: {sorted(la)} {rel} {sorted(ra)} vs {sorted(lb)} {rel} {sorted(rb)}"
    return None


def _is_variant(a: str, b: str, fa: Features, fb: Features) -> bool:
    return variant(a, b, fa.surface.get(a, a), fb.surface.get(b, b))


def _misspelt_time_word(word: str) -> bool:
    """"Mondys": compared as the time word it misspells (``_absorb_misspelt_time_words``)."""
    return any(t[0] == word[0] and variant(t, _stem(word), t, word) for t in _TIME_WORDS)


def _absorb_misspelt_time_words(fa: Features, fb: Features) -> None:
    """'Mondys' is Monday misspelt: a time word of ``fa`` matched by a content-word variant in ``fb``."""
    for key in list((fa.critical - fb.critical).elements()):
        if not key.startswith("t:"):
            continue
        word = key[2:]
        match = next((c for c in fb.content if c not in fa.content and variant(word, c, word, fb.surface.get(c, c))), None)
        if match is not None:
            fb.content[match] -= 1
            fb.content += Counter()  # drop zero counts
            fb.critical[key] += 1


def _units(left: list[str], side: Features) -> list[tuple[tuple[str, ...], str]]:
    """The leftover words of one side as WordNet would look them up: two adjacent leftover words
    as one expression first ("shut down", "sign up"), then each word alone; as (stems, lemma)."""
    seq, out = side.sequence, []
    for t1, t2 in zip(seq, seq[1:], strict=False):
        s1, s2 = _stem(t1), _stem(t2)
        if s1 in left and s2 in left and s1 != s2:
            out.append(((s1, s2), f"{t1}_{t2}"))
    out += [((w,), side.surface.get(w, w)) for w in left]
    return out


def _pair_synonyms(only_a: list[str], only_b: list[str], fa: Features, fb: Features) -> None:
    """Drop from both lists the words (or two-word expressions) that share a WordNet synset."""
    for stems_a, lemma_a in _units(only_a, fa):
        if not all(s in only_a for s in stems_a):
            continue
        for stems_b, lemma_b in _units(only_b, fb):
            if all(s in only_b for s in stems_b) and synonyms(lemma_a, lemma_b):
                for s in stems_a:
                    only_a.remove(s)
                for s in stems_b:
                    only_b.remove(s)
                break


def _pair_compounds(only_a: list[str], only_b: list[str], fa: Features, fb: Features) -> None:
    """"e-mail"/"email", "trade mark"/"trademark": two adjacent words of one side written as one
    word on the other are one word (the spellings of a compound)."""
    for x, y, side in ((only_a, only_b, fa), (only_b, only_a, fb)):
        for t1, t2 in zip(side.sequence, side.sequence[1:], strict=False):
            s1, s2 = _stem(t1), _stem(t2)
            # One part may be a stop word ("set up"/"setup"): the other must be left over.
            if (s1 in x or s2 in x) and s1 != s2 and t1.isalpha() and t2.isalpha():
                joined = next((w for w in y if _stem(t1 + t2) == w), None)
                if joined is not None:
                    for part in (s1, s2):
                        if part in x:
                            x.remove(part)
                    y.remove(joined)


def _leftover(fa: Features, fb: Features, wordnet: bool = True) -> tuple[list[str], list[str]]:
    only_a = list((fa.content - fb.content).elements())
    only_b = list((fb.content - fa.content).elements())
    if len(only_a) > _MAX_DIFFERING or len(only_b) > _MAX_DIFFERING:
        return only_a, only_b  # a word repeated many times: another question, and no pairwise work
    _pair_compounds(only_a, only_b, fa, fb)
    for w in list(only_a):
        match = next((v for v in only_b if _is_variant(w, v, fa, fb)), None)
        if match is not None:
            only_a.remove(w)
            only_b.remove(match)
    if wordnet and only_a and only_b:
        _pair_synonyms(only_a, only_b, fa, fb)
    return only_a, only_b


def _only_other(entity: str, fa: Features, fb: Features) -> set[str]:
    """The words only the other side has; none when they are too many to be a rewording."""
    other = fb.tokens - fa.tokens if entity in fa.entities else fa.tokens - fb.tokens
    return other if len(other) <= 4 * _MAX_DIFFERING else set()


def explain(query: str, cached: str, score: float = 0.0, params: GuardParams = DEFAULT_PARAMS) -> str | None:
    """Why the pair must not share an answer, or None when the guard lets it through.

    ``score`` (their cosine) buys a little slack on content words only: one added word at
    ``params.add_slack_cosine``, one replaced word at ``params.swap_slack_cosine``; critical
    tokens, swapped order, entities and opposites never bend.
    """
    fa, fb = features(query), features(cached)
    _absorb_misspelt_time_words(fa, fb)
    _absorb_misspelt_time_words(fb, fa)
    if fa.critical != fb.critical:
        return f"numbers/negations/time words differ: {dict(fa.critical - fb.critical)} vs {dict(fb.critical - fa.critical)}"
    if fa.directions != fb.directions:
        return f"direction differs: {fa.directions} vs {fb.directions}"
    swapped = _swapped(fa, fb)
    if swapped:
        return swapped
    stems_a, stems_b = {_stem(t) for t in fa.tokens}, {_stem(t) for t in fb.tokens}
    missing = {e for e in fa.entities - _STOP if _stem(e) not in stems_b and not _misspelt_time_word(e)}
    missing |= {e for e in fb.entities - _STOP if _stem(e) not in stems_a and not _misspelt_time_word(e)}
    if params.wordnet and len(missing) <= _MAX_DIFFERING:
        # "the US"/"America": the name is there as a synonym of a word only the other side has.
        missing = {e for e in missing if not any(synonyms(e, t) for t in _only_other(e, fa, fb))}
    if missing:
        return f"entities differ: {sorted(missing)}"
    # Opposites are looked for among all differing words, generic verbs included ("take"/"avoid").
    diff_a = {_stem(t) for t in fa.tokens if t not in _FILLERS} - stems_b
    diff_b = {_stem(t) for t in fb.tokens if t not in _FILLERS} - stems_a
    if len(diff_a) > _MAX_DIFFERING or len(diff_b) > _MAX_DIFFERING:
        return f"{max(len(diff_a), len(diff_b))} words differ: not a rewording"
    opposite = next(((w, v) for w in diff_a for v in diff_b if opposed(w, v)), None)
    if opposite is None and params.wordnet:  # WordNet's antonyms, looked up by the words as written
        words_a = {t for t in fa.tokens if _stem(t) in diff_a and t.isalpha()}
        words_b = {t for t in fb.tokens if _stem(t) in diff_b and t.isalpha()}
        opposite = next(((w, v) for w in words_a for v in words_b if antonyms(w, v)), None)
    if opposite:
        return f"opposites: {opposite[0]!r} vs {opposite[1]!r}"
    only_a, only_b = _leftover(fa, fb, params.wordnet)
    if not (only_a or only_b):
        return None
    # A unit is part of its number ("10 km"/"10 miles"): no slack bends it (a spelling or a
    # WordNet synonym, "km"/"kilometres", has already paired up).
    unit = next((w for w in only_a if w in fa.units), None) or next((w for w in only_b if w in fb.units), None)
    if unit:
        return f"unit of a quantity differs: {unit!r}"
    if len(only_a) + len(only_b) == 1:
        added, side, other = (only_a[0], fa, stems_b) if only_a else (only_b[0], fb, stems_a)
        if _modifies(added, side, other):
            return f"added word narrows a shared one: {added!r}"
        # "phone" -> "phone card": a new head noun changes what is asked about, like a swap.
        slack = params.swap_slack_cosine if _new_head(added, side, other, params.wordnet) else params.add_slack_cosine
        if score >= slack:
            return None
    if len(only_a) == 1 and len(only_b) == 1:
        if look_alike(only_a[0], only_b[0]):
            return f"names spelt alike: {only_a[0]!r} vs {only_b[0]!r}"
        # A word no dictionary knows, replaced by another that is not its typo: two names
        # ("cetirizine"/"loratadine", "kotlin"/"swift" written in lower case), not a rewording.
        if params.wordnet and not (english(fa.surface.get(only_a[0], only_a[0])) and english(fb.surface.get(only_b[0], only_b[0]))):
            return f"a name is replaced: {only_a[0]!r} vs {only_b[0]!r}"
        # "my son"/"my cat", "for beginners"/"for seniors": another kind of the same thing.
        if params.wordnet and co_hyponyms(fa.surface.get(only_a[0], only_a[0]), fb.surface.get(only_b[0], only_b[0])):
            return f"another kind of thing: {only_a[0]!r} vs {only_b[0]!r}"
        if _modifies(only_a[0], fa, stems_b) and _modifies(only_b[0], fb, stems_a):
            return f"a word narrowing a shared one is swapped: {only_a[0]!r} vs {only_b[0]!r}"
        if score >= params.swap_slack_cosine:
            return None
    return f"content words differ: {only_a} vs {only_b}"


def same_answer(query: str, cached: str, score: float = 0.0, params: GuardParams = DEFAULT_PARAMS) -> bool:
    return explain(query, cached, score, params) is None
