"""Semantic end of turn: the real smart-turn v3 model (fetched the way users fetch it) and the
turn stage's use of it, driven by small real callables that answer a fixed probability."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import numpy as np
import pytest
from voice_audio import frames_of, pcm_to_float, silence, speak
from voice_helpers import run_stage

from blink.backends.embedded import EmbeddedBackend
from blink.voice.frames import (
    AudioInFrame,
    EndFrame,
    Frame,
    InterruptFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TurnEndFrame,
)
from blink.voice.smart_turn import WINDOW_SAMPLES, SmartTurnModel
from blink.voice.smart_turn_fetch import (
    MODEL_SHA256,
    SmartTurnUnavailable,
    fetch_smart_turn,
    installed_model,
    resolve_smart_turn,
)
from blink.voice.turn import TurnStage

HANG_S, EXTRA_S = 0.2, 1.0
FRAME_S = 0.032  # frames_of() cuts 32 ms frames: a turn ends within one frame of its due time


@pytest.fixture(scope="session")
def smart_turn_path() -> Path:
    """The model as ``voice.smart_turn: pipecat`` gets it: pip downloads pipecat-ai's wheel once
    (no dependencies) into ~/.cache/blink. No skip: without the registry this fails loudly."""
    return fetch_smart_turn()


@pytest.fixture(scope="session")
def smart_turn(smart_turn_path: Path) -> SmartTurnModel:
    return SmartTurnModel(str(smart_turn_path))


def test_the_fetched_model_is_the_pinned_file(smart_turn_path: Path) -> None:
    assert hashlib.sha256(smart_turn_path.read_bytes()).hexdigest() == MODEL_SHA256
    assert fetch_smart_turn() == smart_turn_path  # cached: the second call downloads nothing


def test_a_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SmartTurnUnavailable, match="is not a file"):
        resolve_smart_turn(str(tmp_path / "nope.onnx"))


def test_a_finished_sentence_scores_higher_than_the_same_words_cut_off(smart_turn: SmartTurnModel) -> None:
    # espeak-ng reads each text as a whole utterance; the cut-off ones stop on an article that
    # cannot end an English sentence. (Measured: 0.78 vs 0.30 and 0.98 vs 0.01; some other cuts,
    # "Can you tell me how to get to the", still score high from espeak-ng's final intonation.)
    pairs = [("I would like to order a large pizza with mushrooms.", "I would like to order a"),
             ("What time does the museum open tomorrow?", "What time does the")]
    for complete, cut in pairs:
        p_complete = smart_turn(pcm_to_float(speak(complete) + silence(0.2)))
        p_cut = smart_turn(pcm_to_float(speak(cut) + silence(0.2)))
        assert p_complete > p_cut, (complete, p_complete, p_cut)
        assert p_complete >= 0.5 > p_cut, (complete, p_complete, p_cut)  # on either side of Pipecat's threshold


def test_the_features_are_the_models_8_second_window(smart_turn: SmartTurnModel) -> None:
    rng = np.random.default_rng(0)
    long = smart_turn.features(rng.normal(0, 0.1, WINDOW_SAMPLES * 2).astype(np.float32))
    short = smart_turn.features(rng.normal(0, 0.1, WINDOW_SAMPLES // 16).astype(np.float32))  # 0.5 s
    assert long.shape == short.shape == (1, 80, 800)


class FixedVerdicts:
    """A turn-completion model that answers the given probabilities in order and keeps the audio it got."""

    def __init__(self, *probabilities: float) -> None:
        self.answers = list(probabilities)
        self.clips: list[np.ndarray] = []

    def __call__(self, audio: np.ndarray) -> float:
        self.clips.append(audio)
        return self.answers.pop(0)


def _turn(speech_s: float = 0.5) -> list[Frame]:
    return [*frames_of(silence(0.1)), SpeechStartFrame(), *frames_of(silence(speech_s)), SpeechStopFrame()]


async def test_complete_ends_the_turn_at_the_hang() -> None:
    model = FixedVerdicts(0.9)
    out = await run_stage(TurnStage(HANG_S, smart_turn=model, max_extra_s=EXTRA_S),
                          [*_turn(), *frames_of(silence(2.0))],
                          [InterruptFrame, SpeechStartFrame, SpeechStopFrame, TurnEndFrame], ignore=(AudioInFrame,))
    end = next(f for f in out if isinstance(f, TurnEndFrame))
    assert HANG_S <= end.hang_s < HANG_S + FRAME_S
    assert end.smart_turn_probability == 0.9 and end.smart_turn_s is not None and end.smart_turn_s >= 0
    # The model heard the turn (0.5 s of it and the 0.1 s before the speech start) and the hang.
    assert len(model.clips) == 1 and 0.5 + HANG_S <= len(model.clips[0]) / 16_000 <= 0.6 + HANG_S + FRAME_S


async def test_incomplete_waits_the_extra_silence_then_ends_the_turn() -> None:
    model = FixedVerdicts(0.1)
    out = await run_stage(TurnStage(HANG_S, smart_turn=model, max_extra_s=EXTRA_S),
                          [*_turn(), *frames_of(silence(2.0))],
                          [InterruptFrame, SpeechStartFrame, SpeechStopFrame, TurnEndFrame], ignore=(AudioInFrame,))
    end = next(f for f in out if isinstance(f, TurnEndFrame))
    assert HANG_S + EXTRA_S <= end.hang_s < HANG_S + EXTRA_S + FRAME_S
    assert end.smart_turn_probability == 0.1 and len(model.clips) == 1  # one check per pause
    # In audio time: the turn ends after the frames that make up hang + extra silence, not before.
    quiet = sum(f.duration_s for f in out[out.index(next(f for f in out if isinstance(f, SpeechStopFrame))):
                                         out.index(end)] if isinstance(f, AudioInFrame))
    assert quiet == pytest.approx(end.hang_s)


async def test_speech_resuming_during_the_extra_wait_continues_the_same_turn() -> None:
    model = FixedVerdicts(0.1, 0.9)  # "I would like to order a ..." pause ... "a pizza."
    frames = [*_turn(), *frames_of(silence(0.6)), SpeechStartFrame(), *frames_of(silence(0.4)), SpeechStopFrame(),
              *frames_of(silence(1.0))]
    out = await run_stage(TurnStage(HANG_S, smart_turn=model, max_extra_s=EXTRA_S), frames,
                          [InterruptFrame, SpeechStartFrame, SpeechStopFrame, SpeechStartFrame, SpeechStopFrame,
                           TurnEndFrame], ignore=(AudioInFrame,))
    end = next(f for f in out if isinstance(f, TurnEndFrame))
    assert HANG_S <= end.hang_s < HANG_S + FRAME_S and end.smart_turn_probability == 0.9
    # The second check heard the whole turn so far, both stretches of speech and the pause between.
    assert len(model.clips[1]) > len(model.clips[0]) + 0.9 * 16_000


async def test_a_model_failure_ends_the_turn_on_silence_alone() -> None:
    def broken(audio: np.ndarray) -> float:
        raise RuntimeError("onnx runtime fell over")

    out = await run_stage(TurnStage(HANG_S, smart_turn=broken), [*_turn(), *frames_of(silence(0.5))],
                          [InterruptFrame, SpeechStartFrame, SpeechStopFrame, TurnEndFrame], ignore=(AudioInFrame,))
    end = next(f for f in out if isinstance(f, TurnEndFrame))
    assert HANG_S <= end.hang_s < HANG_S + FRAME_S and end.smart_turn_probability is None


async def test_an_end_frame_is_not_held_behind_a_running_check() -> None:
    release, entered, returned = threading.Event(), threading.Event(), threading.Event()

    def slow(audio: np.ndarray) -> float:
        entered.set()
        release.wait(10)
        returned.set()
        return 0.9

    async def source(frames: Iterable[Frame]) -> AsyncIterator[Frame]:
        for f in frames:
            yield f
        await asyncio.to_thread(entered.wait, 10)  # the model is now deciding
        yield EndFrame()

    out: list[Frame] = []
    try:
        async for f in TurnStage(HANG_S, smart_turn=slow).run(source([*_turn(), *frames_of(silence(0.5))])):
            out.append(f)
            if isinstance(f, EndFrame):
                assert not release.is_set()  # it came out while the model was still running
    finally:
        release.set()
        await asyncio.to_thread(returned.wait, 10)  # its thread ends while this test's loop still runs
    kinds = [type(f) for f in out if not isinstance(f, AudioInFrame)]
    assert kinds == [InterruptFrame, SpeechStartFrame, SpeechStopFrame, EndFrame]


async def test_the_real_model_ends_a_finished_question_at_the_hang(smart_turn: SmartTurnModel) -> None:
    pcm = speak("What time does the museum open tomorrow?")
    frames = [*frames_of(silence(0.2)), SpeechStartFrame(), *frames_of(pcm), SpeechStopFrame(),
              *frames_of(silence(1.5))]
    out = await run_stage(TurnStage(HANG_S, smart_turn=smart_turn, max_extra_s=EXTRA_S), frames,
                          [InterruptFrame, SpeechStartFrame, SpeechStopFrame, TurnEndFrame], ignore=(AudioInFrame,))
    end = next(f for f in out if isinstance(f, TurnEndFrame))
    assert end.smart_turn_probability is not None and end.smart_turn_probability >= 0.5
    assert HANG_S <= end.hang_s < HANG_S + FRAME_S


async def test_voice_smart_turn_pipecat_builds_sessions_whose_turn_stage_asks_the_model(
        smart_turn_path: Path, tiny_backend: EmbeddedBackend) -> None:
    from blink.config.voice import VoiceSettings
    from blink.voice.build import build_voice_agent
    from blink.voice.turn import TurnStage as Stage

    # An installed pipecat-ai's own file wins; without one, the fetched copy.
    assert resolve_smart_turn("pipecat") == (installed_model() or smart_turn_path)
    settings = VoiceSettings(enabled=True, smart_turn="pipecat", smart_turn_threshold=0.7, smart_turn_max_extra_ms=1500)
    agent = build_voice_agent(settings, backend=None, model="tiny")
    assert isinstance(agent.turn_completion, SmartTurnModel)
    turn = next(s for s in agent.pipeline(backend=tiny_backend).stages if isinstance(s, Stage))
    assert turn.smart_turn is agent.turn_completion and turn.threshold == 0.7 and turn.max_extra_s == 1.5
    assert build_voice_agent(VoiceSettings(enabled=True), backend=None, model="tiny").turn_completion is None

