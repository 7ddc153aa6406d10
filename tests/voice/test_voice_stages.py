"""Frame sequences of each stage, driven by real models on espeak-ng speech."""

from __future__ import annotations

import pytest
from voice_audio import frames_of, silence, speak
from voice_helpers import run_stage

from blink.backends.embedded import EmbeddedBackend
from blink.voice.frames import (
    AudioInFrame,
    AudioOutFrame,
    EndFrame,
    ErrorFrame,
    FinalTranscriptFrame,
    InterruptFrame,
    PartialTranscriptFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TextDeltaFrame,
    TextEndFrame,
    TurnEndFrame,
)
from blink.voice.llm import LlmStage
from blink.voice.stage import FrameQueue
from blink.voice.stt import SttStage, WhisperTranscriber, agreed_prefix, cut_restart
from blink.voice.tts import EspeakSynthesizer, TtsStage
from blink.voice.turn import TurnStage
from blink.voice.vad import SileroVad, VadStage


async def test_vad_marks_start_and_stop_of_each_utterance(vad: SileroVad) -> None:
    pcm = silence(0.5) + speak("How many apples are left in the basket?") + silence(0.8) \
        + speak("My favorite color is green.") + silence(0.5)
    out = await run_stage(VadStage(vad), frames_of(pcm),
                          [SpeechStartFrame, SpeechStopFrame, SpeechStartFrame, SpeechStopFrame],
                          ignore=(AudioInFrame,))
    assert sum(isinstance(f, AudioInFrame) for f in out) == len(frames_of(pcm))  # audio passes through


async def test_vad_hears_nothing_in_silence(vad: SileroVad) -> None:
    await run_stage(VadStage(vad), frames_of(silence(1.0)), [], ignore=(AudioInFrame,))


def _audio(seconds: float) -> list[AudioInFrame]:
    return frames_of(silence(seconds))


async def test_turn_ends_after_the_hang_time_and_pauses_shorter_than_it_do_not_end_it() -> None:
    frames = [SpeechStartFrame(), *_audio(0.1), SpeechStopFrame(), *_audio(0.1),  # short pause
              SpeechStartFrame(), *_audio(0.3), SpeechStopFrame(), *_audio(0.4)]
    out = await run_stage(TurnStage(hang_s=0.2), frames,
                          [InterruptFrame, SpeechStartFrame, SpeechStopFrame, SpeechStartFrame,
                           SpeechStopFrame, TurnEndFrame], ignore=(AudioInFrame,))
    end = next(f for f in out if isinstance(f, TurnEndFrame))
    assert 0.2 <= end.hang_s < 0.2 + 0.033  # within one 32 ms frame of the hang time


async def test_a_new_turn_interrupts_the_answer_of_the_last_one() -> None:
    frames = [SpeechStartFrame(), SpeechStopFrame(), *_audio(0.3), SpeechStartFrame(), EndFrame(),
              SpeechStartFrame()]
    await run_stage(TurnStage(hang_s=0.2), frames,
                    [InterruptFrame, SpeechStartFrame, SpeechStopFrame, TurnEndFrame, InterruptFrame,
                     SpeechStartFrame, EndFrame], ignore=(AudioInFrame,))


def test_frame_queue_lets_system_frames_overtake_and_an_interrupt_drops_queued_data() -> None:
    q = FrameQueue()
    q.put(SpeechStopFrame())
    q.put(TextDeltaFrame(text="a"))
    q.put(AudioOutFrame(pcm=b"\0\0"))
    q.put(EndFrame())
    assert [type(f) for f in (q._system[0], q._data[0])] == [EndFrame, SpeechStopFrame]
    q.put(InterruptFrame())
    assert [type(f) for f in q._data] == [SpeechStopFrame]  # the user's events stay
    assert [type(f) for f in q._system] == [EndFrame, InterruptFrame]


def test_agreed_prefix_commits_only_words_two_passes_share() -> None:
    assert agreed_prefix("the quick brown", "the quick round fox") == "the quick"
    assert agreed_prefix("", "hello") == ""


async def test_stt_gives_partials_while_speaking_and_a_final_at_speech_stop(
        transcriber: WhisperTranscriber) -> None:
    speech = speak("We should leave for the airport early tomorrow morning.")
    frames = [*frames_of(silence(0.3)), SpeechStartFrame(), *frames_of(speech), SpeechStopFrame(),
              *frames_of(silence(0.3)), TurnEndFrame()]
    out = await run_stage(SttStage(transcriber, partial_every_s=0.8), frames, ignore=(PartialTranscriptFrame,),
                          expected_out=[SpeechStartFrame, SpeechStopFrame, FinalTranscriptFrame, TurnEndFrame])
    final = next(f for f in out if isinstance(f, FinalTranscriptFrame))
    assert "airport" in final.text.lower()
    # Partials are decoded in the background; with 3 s of speech at least one lands before the stop.
    assert any(isinstance(f, PartialTranscriptFrame) for f in out)


async def test_llm_answers_only_after_the_turn_ends(tiny_backend: EmbeddedBackend) -> None:
    out = await run_stage(LlmStage(tiny_backend, "tiny", max_tokens=6, temperature=0.0),
                          [FinalTranscriptFrame(text="hello there"), TurnEndFrame()])
    kinds = [type(f) for f in out]
    assert kinds[:2] == [FinalTranscriptFrame, TurnEndFrame]
    assert kinds[-1] is TextEndFrame and TextDeltaFrame in kinds
    deltas = [f for f in out if isinstance(f, TextDeltaFrame)]
    assert deltas[0].ttft_s is not None and all(d.ttft_s is None for d in deltas[1:])


async def test_llm_discards_the_speculative_answer_when_the_user_goes_on(tiny_backend: EmbeddedBackend) -> None:
    stage = LlmStage(tiny_backend, "tiny", max_tokens=6, temperature=0.0)
    out = await run_stage(stage, [FinalTranscriptFrame(text="book a table"), SpeechStartFrame(),
                                  FinalTranscriptFrame(text="book a table for two"), TurnEndFrame()])
    kinds = [type(f) for f in out]
    assert kinds[:4] == [FinalTranscriptFrame, SpeechStartFrame, FinalTranscriptFrame, TurnEndFrame]
    assert kinds.count(TextEndFrame) == 1  # one answer, to the longer transcript
    assert [m["content"] for m in stage.history if m["role"] == "user"] == ["book a table for two"]


async def test_tts_speaks_each_clause_and_ends_after_the_audio(synthesizer: EspeakSynthesizer) -> None:
    frames = [TextDeltaFrame(text="Sure, I can help with that. "), TextDeltaFrame(text="The train leaves"),
              TextDeltaFrame(text=" at noon."), TextEndFrame()]
    out = await run_stage(TtsStage(synthesizer), frames)
    kinds = [type(f) for f in out]
    assert kinds[-1] is TextEndFrame
    first_audio = kinds.index(AudioOutFrame)
    assert first_audio < kinds.index(TextEndFrame)
    audio = b"".join(f.pcm for f in out if isinstance(f, AudioOutFrame))
    assert len(audio) / 2 / 16_000 > 1.0  # two sentences of speech
    assert all(len(f.pcm) <= 1280 for f in out if isinstance(f, AudioOutFrame))  # 40 ms frames


@pytest.mark.parametrize("end", [InterruptFrame, EndFrame])
async def test_tts_drops_pending_speech_on_a_system_frame(synthesizer: EspeakSynthesizer, end: type) -> None:
    out = await run_stage(TtsStage(synthesizer), [TextDeltaFrame(text="This answer is cut off. " * 5), end()])
    assert type(out[-1]) is end
    assert TextEndFrame not in [type(f) for f in out]


def test_a_restarted_utterance_is_cut_at_the_restart() -> None:
    assert cut_restart("My favorite color is green. My favorite color is") == "My favorite color is green."
    assert cut_restart("I think that I think so") == "I think that I think so"


async def test_tts_speaks_text_with_control_characters(synthesizer: EspeakSynthesizer) -> None:
    # A random model can emit NUL, which no command-line argument can carry.
    out = await run_stage(TtsStage(synthesizer), [TextDeltaFrame(text="Hello\x00 there, friend."), TextEndFrame()])
    assert any(isinstance(f, AudioOutFrame) for f in out) and type(out[-1]) is TextEndFrame


async def test_tts_reports_a_clause_it_cannot_speak_and_still_ends_the_answer() -> None:
    # `true` exits at once with no output: not a WAV, as a crashed synthesiser would leave it.
    out = await run_stage(TtsStage(EspeakSynthesizer(binary="true")), [TextDeltaFrame(text="Hello there."),
                                                                       TextEndFrame()])
    assert [type(f) for f in out] == [TextDeltaFrame, ErrorFrame, TextEndFrame]


async def test_tts_speaks_a_speculative_answer_early_but_releases_it_only_at_the_turn_end(
        synthesizer: EspeakSynthesizer) -> None:
    answer = [TextDeltaFrame(text="Sure, I can help with that. "), TextEndFrame()]
    out = await run_stage(TtsStage(synthesizer), [FinalTranscriptFrame(text="help me"), *answer,
                                                  SpeechStopFrame(), TurnEndFrame()],
                          ignore=(AudioOutFrame,),
                          expected_out=[FinalTranscriptFrame, SpeechStopFrame, TurnEndFrame, TextDeltaFrame,
                                        TextEndFrame])
    turn_end = next(i for i, f in enumerate(out) if isinstance(f, TurnEndFrame))
    audio = [i for i, f in enumerate(out) if isinstance(f, AudioOutFrame)]
    assert audio and min(audio) > turn_end  # made during the hang, heard only after it


async def test_tts_drops_a_speculative_answer_when_the_user_goes_on(synthesizer: EspeakSynthesizer) -> None:
    stale = [TextDeltaFrame(text="This answer is stale. "), TextEndFrame()]
    fresh = [TextDeltaFrame(text="Fresh answer. "), TextEndFrame()]
    out = await run_stage(TtsStage(synthesizer), [FinalTranscriptFrame(text="book a table"), *stale,
                                                  SpeechStartFrame(), FinalTranscriptFrame(text="book a table for two"),
                                                  *fresh, TurnEndFrame()], ignore=(AudioOutFrame,))
    assert [f.text for f in out if isinstance(f, TextDeltaFrame)] == ["Fresh answer. "]
    assert [type(f) for f in out].count(TextEndFrame) == 1
