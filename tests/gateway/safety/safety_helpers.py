"""Settings for a gateway whose one model ("fake") is the scripted upstream."""

from __future__ import annotations

from typing import Any

from scripted_upstream import ScriptedUpstream

from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings


def safety_settings(up: ScriptedUpstream, **sections: Any) -> Settings:
    return Settings(models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=up.base_url, read_timeout_s=30)],
                    **sections)  # fmt: skip
