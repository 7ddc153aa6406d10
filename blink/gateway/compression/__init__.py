"""Prompt compression for expensive upstream tiers (issue #27), opt-in per model.

Long context (documents, earlier turns) dominates what a large upstream model costs. Before a
request goes to such a tier, the words of that context the embedded small model finds most
predictable (lowest self-information, LLMLingua's and Selective Context's measure) are dropped to
a target ratio. The system instructions, the last user turn and code blocks are never touched
(``spans.py``); scoring (``scorer.py``) and choosing words (``selection.py``) are separate, and
``backend.py`` is the stream middleware that applies them and reports what it saved.
"""
