"""Driving an ``LLMEngine`` the way a server does, for tests that compare its outputs."""

from __future__ import annotations

from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams


def run_staggered(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    """Add requests while others run (one new request every other step); outputs in request order."""
    pending = list(enumerate(prompts))
    tokens: dict[str, list[int]] = {}
    step = 0
    while pending or engine.has_unfinished():
        if pending and step % 2 == 0:
            i, p = pending.pop(0)
            engine.add_request(f"r{i}", p, params)
            tokens[f"r{i}"] = []
        for out in engine.step():
            tokens[out.request_id].extend(out.new_token_ids)
        step += 1
    return [tokens[f"r{i}"] for i in range(len(prompts))]
