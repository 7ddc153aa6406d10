"""blink."""
