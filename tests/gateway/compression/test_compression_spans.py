"""What compression may touch: never instructions, the question being asked, tool calls or code."""

from __future__ import annotations

from blink.gateway.compression.spans import compressible_messages, split_code


def test_code_fences_are_their_own_protected_segments() -> None:
    text = "Here is the file:\n```python\nx = 1\n```\nand a closing remark, then ~~~\nraw\n~~~ done"
    segs = split_code(text)
    assert "".join(s.text for s in segs) == text
    code = [s.text for s in segs if not s.compressible]
    assert code == ["```python\nx = 1\n```", "~~~\nraw\n~~~"]


def test_an_unclosed_fence_protects_the_rest() -> None:
    segs = split_code("intro\n```\nunterminated code")
    assert [s.compressible for s in segs] == [True, False]


def test_instructions_the_last_question_and_tool_calls_are_protected() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "developer", "content": "more rules"},
        {"role": "user", "content": "a long document"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
        {"role": "tool", "content": "a tool's long output", "tool_call_id": "c"},
        {"role": "assistant", "content": "an earlier answer"},
        {"role": "user", "content": "the question"},
    ]
    assert compressible_messages(messages) == [2, 4, 5]


def test_a_single_user_message_is_never_compressed() -> None:
    assert compressible_messages([{"role": "user", "content": "only the question"}]) == []
