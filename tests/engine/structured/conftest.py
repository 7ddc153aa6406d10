"""Every grammar engine runs the same contract: tests that take ``engine`` run once per engine."""

from __future__ import annotations

import pytest

from blink.engine.structured.grammar_engine import ENGINE_NAMES


@pytest.fixture(scope="module", params=ENGINE_NAMES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)
