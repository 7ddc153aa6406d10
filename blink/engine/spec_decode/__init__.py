"""Speculative decoding: proposers guess K tokens, one target forward verifies them."""
