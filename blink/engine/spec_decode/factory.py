"""Build the speculator an EngineConfig asks for (or None when speculation is off)."""

from __future__ import annotations

from collections.abc import Callable

from blink.engine.config import EngineConfig
from blink.engine.errors import EngineError
from blink.engine.model_runner import ModelRunner
from blink.engine.spec_decode.ngram import NgramProposer
from blink.engine.spec_decode.policy import SpeculationPolicy
from blink.engine.spec_decode.proposer import Proposer
from blink.engine.spec_decode.speculator import Speculator

SPECULATIVE_METHODS = ("ngram", "draft")


def build_speculator(
    config: EngineConfig, runner: ModelRunner, num_running: Callable[[], int]
) -> Speculator | None:
    method = config.speculative
    if not method or method == "none":
        return None
    proposer: Proposer
    if method == "ngram":
        proposer = NgramProposer(config.ngram_max, config.ngram_min)
    elif method == "draft":
        from blink.engine.spec_decode.draft import DraftModelProposer

        if not config.speculative_draft_model:
            raise EngineError("speculative 'draft' needs speculative_draft_model")
        proposer = DraftModelProposer(config, runner)
    else:
        raise EngineError(
            f"unknown speculative method {method!r}; expected one of {', '.join(SPECULATIVE_METHODS)}"
        )
    policy = SpeculationPolicy(
        config.num_speculative_tokens, config.speculative_max_batch, runner.max_model_len, num_running
    )
    return Speculator(proposer, policy)
