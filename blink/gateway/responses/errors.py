"""The Responses request field a chat-side error ``param`` stands for (rendering/error_params.py
says why errors are renamed): ``messages`` is ``input``, ``max_completion_tokens`` is
``max_output_tokens``, ``response_format`` is ``text.format``, tools are flat."""

from __future__ import annotations

import re

# A chat field -> the Responses field it was translated from (the rest of the path follows).
_FIELDS = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens"}
_HEAD = re.compile(r"[a-z_]+")
# ``response_format.json_schema.schema`` is ``text.format.schema``: Responses has no json_schema level.
_FORMAT = re.compile(r"response_format(?:\.json_schema)?")
# ``tools[0].function.parameters`` is ``tools[0].parameters``, ``tool_choice.function.name`` is
# ``tool_choice.name``: Responses tools are flat.
_FUNCTION = re.compile(r"^(tools\[\d+\]|tool_choice)\.function")


def responses_param(param: str) -> str:
    if param == "messages" or param.startswith(("messages[", "messages.")):
        # Chat messages are instructions + history + input items, merged (parallel calls are one
        # message): their indices are not the input's.
        return "input"
    head = _HEAD.match(param)
    if head is not None and head.group(0) in _FIELDS:
        return _FIELDS[head.group(0)] + param[head.end():]
    if param.startswith("response_format"):
        return _FORMAT.sub("text.format", param, count=1)
    return _FUNCTION.sub(r"\1", param, count=1)
