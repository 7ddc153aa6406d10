"""Where ``/v1/responses`` spends more than ``/v1/chat/completions`` before the first token: per stage.

In-process CPU time of the gateway's own work on the first token's path for the same request
in both APIs (the body ``gateway_overhead.py`` sends): validating the body, mapping it to a
``GenerationRequest`` (for Responses: ``translate``, which also validates the chat body it builds),
and rendering the first write (the opening events and the first text delta). ``prepare`` (the
Responses snapshot and the message item's opening events) runs while the upstream is asked, so it
is printed apart and not counted in the first-token total. Min over ``--rounds`` of ``--n`` calls.

    PYTHONPATH=$PWD python benchmarks/responses_stages.py [--n 3000] [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from blink.backends.base import Delta
from blink.engine.cpu_features import read_cpu_features
from blink.gateway.chat.request_mapping import chat_request
from blink.gateway.http.request_parsing import validate
from blink.gateway.rendering.wire import ChatWire
from blink.gateway.responses.http_response import ResponsesWire
from blink.gateway.responses.render import ResponseRenderer
from blink.gateway.responses.translate import translate
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.responses import ResponsesRequest

RAW_RESPONSES: dict[str, Any] = {"model": "fake", "input": "hi 1 2", "stream": True, "temperature": 0,
                                 "max_output_tokens": 32}
RAW_CHAT: dict[str, Any] = {"model": "fake", "messages": [{"role": "user", "content": "hi 1 2"}], "stream": True,
                            "temperature": 0, "max_tokens": 32}
FIRST = Delta(text="Hello")


def _us(fn: Callable[[], object], n: int, rounds: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def _chat_first() -> bytes:
    req = chat_request(validate(ChatCompletionRequest, RAW_CHAT), RAW_CHAT, "fake", 4096, 60.0)
    wire = ChatWire(req, False)
    return wire.opening(FIRST) + wire.encode(FIRST)


def _responses_first() -> bytes:
    body = validate(ResponsesRequest, RAW_RESPONSES)
    req = translate(body, RAW_RESPONSES, "fake", [], 4096, 60.0).request
    wire = ResponsesWire(ResponseRenderer(req.request_id, "fake", body, [], "auto"), None)
    wire.prepare()
    return wire.opening(FIRST) + wire.encode(FIRST)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a short run that proves the script works")
    args = ap.parse_args()
    n, rounds = (50, 1) if args.quick else (args.n, args.rounds)
    print(f"CPU: {read_cpu_features().describe()}")

    chat_body = validate(ChatCompletionRequest, RAW_CHAT)
    chat_req = chat_request(chat_body, RAW_CHAT, "fake", 4096, 60.0)
    body = validate(ResponsesRequest, RAW_RESPONSES)
    req = translate(body, RAW_RESPONSES, "fake", [], 4096, 60.0).request

    def chat_write() -> bytes:
        wire = ChatWire(chat_req, False)
        return wire.opening(FIRST) + wire.encode(FIRST)

    def prepared() -> ResponsesWire:
        wire = ResponsesWire(ResponseRenderer(req.request_id, "fake", body, [], "auto"), None)
        wire.prepare()
        return wire

    def prepared_and_written() -> bytes:
        wire = prepared()
        return wire.opening(FIRST) + wire.encode(FIRST)

    chat = {
        "validate": _us(lambda: validate(ChatCompletionRequest, RAW_CHAT), n, rounds),
        "map": _us(lambda: chat_request(chat_body, RAW_CHAT, "fake", 4096, 60.0), n, rounds),
        "first write": _us(chat_write, n, rounds),
    }
    resp = {
        "validate": _us(lambda: validate(ResponsesRequest, RAW_RESPONSES), n, rounds),
        "map": _us(lambda: translate(body, RAW_RESPONSES, "fake", [], 4096, 60.0), n, rounds),
    }
    # The loop has the wire prepared by the first token: the first write is what comes after ``prepare``.
    prepare = _us(prepared, n, rounds)
    resp["first write"] = max(0.0, _us(prepared_and_written, n, rounds) - prepare)
    for name in chat:
        print(f"{name:12s} chat {chat[name]:7.1f} us   responses {resp[name]:7.1f} us   "
              f"added {resp[name] - chat[name]:+7.1f} us")
    total_c, total_r = sum(chat.values()), sum(resp.values())
    print(f"{'first token':12s} chat {total_c:7.1f} us   responses {total_r:7.1f} us   added {total_r - total_c:+7.1f} us")
    print(f"responses prepare (while the upstream is asked, off the first token's path): {prepare:.1f} us")
    # Both full paths end to end, as a cross-check of the stage sum.
    print(f"end to end: chat {_us(_chat_first, n, rounds):.1f} us, "
          f"responses (prepare included) {_us(_responses_first, n, rounds):.1f} us")


if __name__ == "__main__":
    main()
