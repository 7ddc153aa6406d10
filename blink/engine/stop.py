"""Stop strings over streamed text, where a stop string may span any number of deltas.

Text is released as soon as it can no longer be part of a stop string; only a suffix that is a
proper prefix of some stop string is held back. Output ends right before the earliest match and
never contains the stop string (OpenAI semantics).
"""

from __future__ import annotations


class StopStringMatcher:
    def __init__(self, stops: list[str], include_stop: bool = False) -> None:
        self.stops = [s for s in dict.fromkeys(stops) if s]
        # vLLM's include_stop_str_in_output: the matched stop string ends the text instead of
        # being cut from it.
        self.include_stop = include_stop
        self._max_hold = max((len(s) for s in self.stops), default=1) - 1
        self._held = ""
        self.stopped = False
        # The stop string that ended the text (for the response's stop_reason).
        self.matched: str | None = None

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit now, whether a stop string completed)."""
        if self.stopped:
            return "", True
        buf = self._held + text
        hit = self._earliest_match(buf)
        if hit is not None:
            index, stop = hit
            self.stopped, self.matched, self._held = True, stop, ""
            return buf[: index + len(stop)] if self.include_stop else buf[:index], True
        hold = self._partial_suffix_len(buf)
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        """Release held text at the end of generation (it never became a stop string)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _earliest_match(self, buf: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self.stops:
            i = buf.find(stop)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, stop)
        return best

    def _partial_suffix_len(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that a stop string starts with."""
        for n in range(min(self._max_hold, len(buf)), 0, -1):
            tail = buf[-n:]
            if any(stop.startswith(tail) for stop in self.stops):
                return n
        return 0
