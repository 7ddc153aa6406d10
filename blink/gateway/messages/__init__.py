"""Anthropic's Messages API: routes, request mapping, responses and errors."""
