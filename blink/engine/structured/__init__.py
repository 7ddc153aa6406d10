"""Structured outputs: grammar-constrained decoding as a token mask in the sampler.

The grammar library is chosen by ``EngineConfig.structured_engine``: ``llguidance`` (the default)
or ``xgrammar``; EBNF grammars always use xgrammar, whose dialect they are written in. Either is
imported only when a constrained request arrives, so an engine that never sees one pays nothing.
The pieces, one job each:

- ``spec``: what a request may ask for (JSON object, JSON schema, regex, choice, EBNF grammar), its
  size and nesting limits, and the parse check that turns a bad spec into a 400 before any token.
- ``grammar_engine``: the protocols a grammar library implements (``llguidance_engine``,
  ``xgrammar_engine``), so the rest never names one.
- ``compiler``: compiles each distinct spec once against the model's vocabulary, off the step loop,
  and keeps the results in a bounded LRU.
- ``matcher``: one request's position in its grammar (accept a token, fill its mask row, check
  speculative drafts).
- ``masks``: one step's bitmask, filled on a worker thread while the model runs, then applied to
  the logits before sampling.
- ``lazy``: where it is exact (greedy, untruncated temperature sampling), a row is sampled before
  any mask and masked only if the grammar refuses the sample.
"""
