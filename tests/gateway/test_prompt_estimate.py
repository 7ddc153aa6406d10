"""The gateway's prompt-token estimate, charged for a response cut short before its backend
counted the prompt (front.py ``on_abandon``; end to end in tests/gateway/ratelimit/test_ratelimit.py)."""

from __future__ import annotations

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.gateway.prompt_estimate import estimate_prompt_tokens


def _req(**fields: object) -> GenerationRequest:
    return GenerationRequest("r", "m", "chat" if "messages" in fields else "completion", SamplingOptions(),
                             **fields)  # type: ignore[arg-type]


def test_text_counts_four_characters_a_token_and_token_ids_exactly() -> None:
    assert estimate_prompt_tokens(_req(prompt="x" * 400)) == 100
    assert estimate_prompt_tokens(_req(prompt=[1, 2, 3], prompts=[[1, 2, 3], "x" * 8])) == 3 + 2


def test_messages_count_their_text_parts_calls_tools_and_template_markers() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "y" * 40}, {"type": "image_url", "image_url": {}}]},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"function": {"name": "f" * 4, "arguments": "z" * 36}}]}]
    plain = estimate_prompt_tokens(_req(messages=messages))
    assert plain == 2 * 4 + 10 + 10
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert estimate_prompt_tokens(_req(messages=messages, extra={"tools": tools})) > plain
