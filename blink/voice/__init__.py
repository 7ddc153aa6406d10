"""Streaming voice pipeline: VAD -> turn -> STT -> LLM -> TTS, each stage streaming into the next."""
