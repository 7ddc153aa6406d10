"""OpenAI's Responses API on the generation pipeline: translate, run, render, store."""
