"""The support-conversation trace of benchmarks/precompute.py: flows that repeat with variations.

A broadband provider's support chat. Each *flow* is a typical conversation, a list of *steps*;
each step is a question cluster with a few paraphrases. A generated conversation picks a flow
(some flows are much more common than others), asks one paraphrase of each step in turn, and
now and then leaves the script: an unrelated question, or it ends early. Everything comes from
``random.Random(seed)``, so a seed names a trace exactly.

    python benchmarks/precompute_trace.py [--seed 7] [--conversations 48]   # prints the trace as JSON lines
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass

import orjson

SYSTEM = ("You are the support assistant of Lumen Broadband. Answer in two or three short sentences, "
          "friendly and precise.")

# Each step: paraphrases of one question. Paraphrases keep every number and name, as real
# repeats do; the semantic cache's hit guard refuses pairs that change them.
FLOWS: dict[str, list[list[str]]] = {
    "router_reset": [
        ["How do I reset my router?", "How can I reset my router?", "What is the way to reset my router?"],
        ["The lights are still red after the reset. What should I do?",
         "The lights are still red after the reset, what do I do?",
         "After the reset the lights are still red. What should I do now?"],
        ["How long does it take for the lights to turn green?",
         "How long until the lights turn green?", "How long should it take for the lights to go green?"],
        ["Should I book a technician visit?", "Do I need to book a technician visit?",
         "Is it time to book a technician visit?"],
    ],
    "slow_speed": [
        ["My internet is very slow today.", "My internet is really slow today.", "The internet is very slow today."],
        ["How do I run a speed test?", "How can I run a speed test?", "Where can I run a speed test?"],
        ["The speed test shows much less than my plan. Why?",
         "Why does the speed test show much less than my plan?",
         "The speed test is much lower than my plan, why is that?"],
        ["Would a wired connection help?", "Will a wired connection help?", "Does a wired connection help?"],
    ],
    "billing": [
        ["Why is my bill higher this month?", "Why is this month's bill higher?", "Why did my bill go up this month?"],
        ["Can you explain the one-time charge on my bill?", "What is the one-time charge on my bill?",
         "Could you explain the one-time charge on my bill?"],
        ["How do I set up automatic payments?", "How can I set up automatic payments?",
         "How do I turn on automatic payments?"],
    ],
    "moving": [
        ["I am moving house next month. What do I need to do?",
         "I'm moving house next month, what do I need to do?",
         "I am moving house next month, what should I do?"],
        ["Can I keep my current plan at the new address?", "Can I keep my plan at the new address?",
         "Will I keep my current plan at the new address?"],
        ["How do I return the old router?", "How can I return the old router?", "How should I return the old router?"],
    ],
    "wifi_password": [
        ["How do I change my WiFi password?", "How can I change my WiFi password?",
         "What is the way to change my WiFi password?"],
        ["Will my devices disconnect after I change it?", "Will my devices disconnect after changing it?",
         "Do my devices disconnect after I change it?"],
        ["How do I reconnect my smart TV?", "How can I reconnect my smart TV?", "How should I reconnect my smart TV?"],
    ],
}
# Flow popularity: support traffic is skewed, a few problems make most of it.
WEIGHTS = {"router_reset": 0.3, "slow_speed": 0.25, "billing": 0.2, "moving": 0.15, "wifi_password": 0.1}
OFF_SCRIPT = [
    "Do you have any offers for new customers?", "What are your opening hours?", "Can I add a landline?",
    "Is there a student discount?", "How do I contact a human agent?", "Where can I see my data usage?",
]
P_OFF_SCRIPT = 0.1  # a turn is an unrelated question instead of the flow's next step
P_END_EARLY = 0.08  # the user leaves before the flow's end


@dataclass(frozen=True)
class Turn:
    question: str
    flow: str
    step: int  # -1: off script
    think_s: float  # the user's reading/typing time before this turn


@dataclass(frozen=True)
class Conversation:
    cid: int
    flow: str
    turns: list[Turn]


def generate(seed: int, conversations: int, think_s: tuple[float, float] = (1.5, 3.0)) -> list[Conversation]:
    rng = random.Random(seed)
    names = list(WEIGHTS)
    out = []
    for cid in range(conversations):
        flow = rng.choices(names, weights=[WEIGHTS[n] for n in names])[0]
        turns: list[Turn] = []
        for step, variants in enumerate(FLOWS[flow]):
            if step > 0 and rng.random() < P_END_EARLY:
                break
            think = rng.uniform(*think_s) if turns else 0.0
            if step > 0 and rng.random() < P_OFF_SCRIPT:
                turns.append(Turn(rng.choice(OFF_SCRIPT), flow, -1, think))
                think = rng.uniform(*think_s)
            turns.append(Turn(rng.choice(variants), flow, step, think))
        out.append(Conversation(cid, flow, turns))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--conversations", type=int, default=48)
    args = ap.parse_args()
    for conv in generate(args.seed, args.conversations):
        print(orjson.dumps(conv).decode())


if __name__ == "__main__":
    main()
