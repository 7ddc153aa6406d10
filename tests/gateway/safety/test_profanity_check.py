"""The offline offensive-language classifier (alt-profanity-check) as a check and in /v1/moderations."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from live_server import LiveServer
from safety_helpers import safety_settings
from scripted_upstream import ScriptedUpstream

from blink.config.safety import SafetySettings
from blink.gateway.safety.build import build_pipeline
from blink.gateway.safety.checks import ProfanityCheck
from blink.serve import build_app

PROFANE = "you are a fucking idiot and a piece of shit"
BENIGN = ["have a lovely day", "the meeting moved to 3pm", "how do I stop a python process?"]


async def test_scores_profane_text_above_and_benign_text_below_the_threshold() -> None:
    check = ProfanityCheck(0.5)
    bad = await check.check(PROFANE)
    assert bad.flagged and bad.categories == {"profanity"} and bad.scores["profanity"] >= 0.9
    for text in BENIGN:
        ok = await check.check(text)
        assert not ok.flagged and ok.scores["profanity"] < 0.5 and not ok.categories


def test_auto_serves_the_endpoint_and_on_also_the_request_path() -> None:
    def covered(profanity: str, endpoint: bool) -> bool:
        return "profanity" in build_pipeline(SafetySettings(profanity=profanity), None, endpoint).thresholds

    assert covered("auto", endpoint=True) and not covered("auto", endpoint=False)
    assert covered("on", endpoint=True) and covered("on", endpoint=False)
    assert not covered("off", endpoint=True) and not covered("off", endpoint=False)


def test_on_in_blocking_mode_refuses_a_profane_prompt(scripted: ScriptedUpstream) -> None:
    settings = safety_settings(scripted, safety={"enabled": True, "mode": "blocking", "profanity": "on"})
    with LiveServer(build_app(settings)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="fake", messages=[{"role": "user", "content": PROFANE}])
        assert err.value.code == "content_filter"
        ok = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": BENIGN[0]}])
        assert ok.choices[0].message.content


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedUpstream) -> Iterator[LiveServer]:
    settings = safety_settings(scripted, safety={"enabled": True, "threshold": 0.5})
    with LiveServer(build_app(settings)) as server:
        yield server


def test_moderations_flag_profanity_with_the_openai_client(gateway: LiveServer) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)
    resp = client.moderations.create(input=[PROFANE, *BENIGN])
    bad, *good = resp.results
    assert bad.flagged and bad.categories.model_extra["profanity"] is True
    assert bad.category_scores.model_extra["profanity"] >= 0.9
    assert all(not r.flagged and r.categories.model_extra["profanity"] is False for r in good)
    assert bad.categories.harassment is None  # profanity is its own category, not OpenAI's harassment
