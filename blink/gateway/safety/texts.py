"""The texts a safety check reads: the user's side of a request and the answer's choices."""

from __future__ import annotations

from typing import Any

from blink.backends.base import GenerationRequest


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: only the text parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def input_text(req: GenerationRequest) -> str:
    """User and system turns of a chat, or a completion's prompt (token-id prompts have no text)."""
    if req.messages is not None:
        return "\n".join(_content_text(m.get("content")) for m in req.messages if m.get("role") in ("user", "system"))
    prompts = req.prompts if req.prompts is not None else [req.prompt]
    return "\n".join(p for p in prompts if isinstance(p, str))


def output_texts(rendered: dict[str, Any]) -> list[str]:
    out = []
    for c in rendered.get("choices", []):
        out.append(str((c.get("message") or {}).get("content") or "") if "message" in c else str(c.get("text") or ""))
    return out


def finish_reasons(rendered: dict[str, Any]) -> list[str | None]:
    return [c.get("finish_reason") for c in rendered.get("choices", [])]
