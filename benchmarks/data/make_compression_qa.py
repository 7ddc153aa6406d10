"""Writes compression_qa.jsonl: long-context questions whose answer is stated once in the context.

Each item is an office handbook of ~30 statements about departments (floor, meeting day, manager,
access code, budget), with several statements of the same kind about other departments (so the
answer must be read for the right one) and plain connective sentences, and a question about one
statement. Seeded: ``python benchmarks/data/make_compression_qa.py`` rewrites the same file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 27
ITEMS = 20
DEPARTMENTS = ["finance team", "design studio", "legal office", "support desk", "research lab", "sales group",
               "payroll office", "data team", "mail room", "security desk", "training centre", "press office"]
MANAGERS = ["Alice Moreno", "Bilal Haddad", "Chen Wei", "Dana Kowalski", "Emeka Obi", "Farah Nasser",
            "Goran Petrov", "Hana Sato", "Ivan Rossi", "Julia Berg", "Kofi Mensah", "Lena Fischer"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
FLOORS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]
FILLER = [
    "The building was renovated two years ago and the lifts were replaced at the same time.",
    "Visitors are asked to sign in at the reception before they go upstairs.",
    "Coffee and tea are available in the kitchen on every floor during working hours.",
    "The car park closes at nine in the evening on weekdays and is closed at weekends.",
    "Fire drills are held twice a year, and everyone is expected to take part.",
    "Bicycles can be left in the covered racks behind the main entrance.",
    "The cleaning staff work in the early morning, before most people arrive.",
    "Printed documents that are no longer needed go into the locked shredding bins.",
    "The canteen serves a hot lunch between twelve and two o'clock.",
    "Meeting rooms can be booked through the calendar for up to two hours at a time.",
]


def statements(rng: random.Random, dept: str) -> dict[str, tuple[str, str, str]]:
    """kind -> (statement, question, answer) about one department."""
    floor, day, manager = rng.choice(FLOORS), rng.choice(DAYS), rng.choice(MANAGERS)
    code, budget = str(rng.randint(1000, 9999)), f"{rng.randint(12, 95)},000 euros"
    return {
        "floor": (f"The {dept} is on the {floor} floor.", f"On which floor is the {dept}?", floor),
        "day": (f"The {dept} holds its weekly meeting on {day}.", f"On which day does the {dept} meet?", day),
        "manager": (f"The {dept} is managed by {manager}.", f"Who manages the {dept}?", manager),
        "code": (f"The door code of the {dept} is {code}.", f"What is the door code of the {dept}?", code),
        "budget": (f"The yearly budget of the {dept} is {budget}.", f"What is the yearly budget of the {dept}?",
                   budget),
    }


def item(rng: random.Random, index: int) -> dict[str, str]:
    depts = rng.sample(DEPARTMENTS, 6)
    facts = {d: statements(rng, d) for d in depts}
    lines = [s for d in depts for s, _, _ in facts[d].values()] + rng.sample(FILLER, 6)
    rng.shuffle(lines)
    target, kind = depts[0], rng.choice(["floor", "day", "manager", "code", "budget"])
    _, question, answer = facts[target][kind]
    paragraphs = [" ".join(lines[i : i + 4]) for i in range(0, len(lines), 4)]
    return {"id": f"qa-{index:02d}", "context": "\n".join(paragraphs), "question": question, "answer": answer}


def main() -> None:
    rng = random.Random(SEED)
    out = Path(__file__).with_name("compression_qa.jsonl")
    out.write_text("".join(json.dumps(item(rng, i)) + "\n" for i in range(ITEMS)))
    print(f"wrote {ITEMS} items to {out}")


if __name__ == "__main__":
    main()
