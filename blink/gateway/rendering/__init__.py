"""Deltas -> bytes on the wire: the one response loop and each API's wire format."""
