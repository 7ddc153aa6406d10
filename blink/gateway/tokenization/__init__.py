"""vLLM's tokenizer endpoints: ``/tokenize`` and ``/detokenize``."""
