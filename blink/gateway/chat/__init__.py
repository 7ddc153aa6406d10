"""The OpenAI chat and legacy completions API: routes and request mapping."""
