"""Which priority lane an ``n=128`` hog's sequences occupy while honest chats stream.

The embedded backend (default model settings, built-in demo model) serves eight closed-loop
chat clients (16 tokens each) and one ``n=128, max_tokens=3500, ignore_eos`` request. Every
honest delta samples the engine's running sequences per lane; the script prints how often
each (interactive, batch) pair was seen. A request's sequences after its first are bulk: while
honest work runs they belong in the batch lane, where they never join a step that computes an
honest first token (``blink/engine/scheduler.py``). A correctness figure, not a timing: valid
on a loaded machine.

    python benchmarks/hog_lanes.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HONEST_CLIENTS = 8


async def measure(seconds: float) -> collections.Counter[tuple[int, int]]:
    sys.path.insert(0, str(ROOT))
    from blink.backends.base import GenerationRequest, SamplingOptions
    from blink.backends.embedded import EmbeddedBackend, serving_choice
    from blink.config.models import EmbeddedModel
    from blink.demo.tiny import demo_model_dir

    def chat(rid: str, content: str, **opts: object) -> GenerationRequest:
        return GenerationRequest(request_id=rid, model="m", kind="chat",
                                 options=SamplingOptions(**opts),  # type: ignore[arg-type]
                                 messages=[{"role": "user", "content": content}])

    model = EmbeddedModel(model=str(demo_model_dir()))
    backend = EmbeddedBackend("m", serving_choice(model).apply(model))
    await backend.start()
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    running = True

    async def honest(w: int) -> None:
        i = 0
        while running:
            async for _ in backend.stream(chat(f"h{w}-{i}", f"One fact about {w * 1000 + i}.", max_tokens=16)):
                lanes = backend.load().running_by_class or {}
                seen[(lanes.get("interactive", 0), lanes.get("batch", 0))] += 1
            i += 1

    async def hog() -> None:
        req = chat("hog", "Write forever.", n=128, max_tokens=3500, ignore_eos=True, temperature=1.0)
        async for _ in backend.stream(req):
            pass

    tasks = [asyncio.create_task(honest(w)) for w in range(HONEST_CLIENTS)] + [asyncio.create_task(hog())]
    try:
        await asyncio.sleep(seconds)
    finally:
        running = False
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await backend.aclose()
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from blink.engine.cpu_features import read_cpu_features

    seen = asyncio.run(measure(args.seconds))
    total = sum(seen.values()) or 1
    print(f"CPU: {read_cpu_features().describe()}; {HONEST_CLIENTS} honest clients + one n=128 hog, {args.seconds:g} s")
    print("running sequences (interactive, batch) at honest deltas, share of samples:")
    for (inter, batch), n in seen.most_common(8):
        print(f"  interactive {inter:>3}  batch {batch:>3}  {n / total:6.1%}")


if __name__ == "__main__":
    main()
