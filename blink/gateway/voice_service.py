"""The voice endpoint on the gateway: ``/v1/voice`` turns go through the gateway's own request path.

blink/voice/ may not import the gateway, and the gateway knows nothing of voice; this adapter
sits between them (serve.py wires it). Each session is authenticated like an HTTP request
(the same API keys), and each of its turns is one call of the gateway's generation pipeline
(``GenerationPipeline.run``), exactly what a chat completion makes: model permission, budget,
sequence quota and rate limit, the safety guard, the exact and semantic cache, the router
(routes are registry entries), then the cache fill and token charge when the answer is complete.
A turn asks for the ``voice`` lane; a key without the ``priority:voice`` scope runs it at the
default lane instead (the session works, it just does not jump the queue).

The voice models (Whisper, Silero, espeak-ng) load in the app's lifespan only when
``voice.enabled``; when voice is off, or its extra is not installed, the endpoint accepts the
socket only to say why and close (1008 / 1011), so a client never hangs on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from starlette.websockets import WebSocket

from blink.backends.base import Delta, GenerationRequest, StreamSource
from blink.config.voice import VoiceSettings
from blink.gateway.auth.keys import PRINCIPAL_STATE_KEY, ApiKey, KeyStore
from blink.gateway.http.dispatch import Routes
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.ratelimit.sequence_quota import SequenceLease
from blink.gateway.ratelimit.voice_session_quota import VoiceSessionQuota
from blink.protocol.errors import AuthenticationError

if TYPE_CHECKING:
    from blink.voice.websocket import VoiceSessions

log = logging.getLogger("blink.voice")

# Close codes the endpoint uses before a session exists (RFC 6455): refused, server fault.
_CLOSE_POLICY, _CLOSE_SERVER_ERROR = 1008, 1011
# Where an admitted socket keeps its voice-session lease until ``VoiceGate.close``.
_LEASE_STATE_KEY = "blink_voice_session"


class GatewayPath:
    """One session's turns as chat completions through the gateway's generation pipeline.

    A ``StreamSource``, not a model server: the voice session only streams from it, and the
    servers behind it are the registry's (their health and load are theirs).
    """

    name = "gateway"

    def __init__(self, pipeline: GenerationPipeline, key: ApiKey | None) -> None:
        self.pipeline = pipeline
        # The session's principal, checked again on every turn (limits and budget move between turns).
        self.key = key

    async def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        gen = await self.pipeline.run(self.key, req, Directives(demote_lane=True))
        # aclosing: when the voice pipeline drops this stream (barge-in), the backend's stream is
        # closed at once, which aborts the engine request, frees its KV blocks and the sequence lease.
        try:
            async with contextlib.aclosing(gen.stream()) as deltas:  # type: ignore[type-var]
                async for delta in deltas:
                    yield delta
        finally:
            gen.close()


class VoiceGate:
    """Admits a WebSocket like AuthMiddleware admits a request (it only sees HTTP scopes), within
    the key's share of the voice sessions (``close`` gives it back)."""

    def __init__(self, pipeline: GenerationPipeline, key_store: KeyStore | None,
                 quota: VoiceSessionQuota | None = None) -> None:
        self.pipeline = pipeline
        self.key_store = key_store
        self.quota = quota or VoiceSessionQuota(0)

    async def open(self, ws: WebSocket) -> StreamSource:
        key: ApiKey | None = None
        if self.key_store is not None:
            secret = _presented_key(ws)
            if secret is None:
                raise AuthenticationError("You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.",
                                          code="missing_api_key")
            key = await self.key_store.alookup(secret)
            if key is None:
                raise AuthenticationError("Incorrect API key provided.")
            ws.scope.setdefault("state", {})[PRINCIPAL_STATE_KEY] = key
        ws.scope.setdefault("state", {})[_LEASE_STATE_KEY] = self.quota.acquire(key)
        return GatewayPath(self.pipeline, key)

    def close(self, ws: WebSocket) -> None:
        """The session ``open`` admitted on ``ws`` ended: its slot is the key's again."""
        lease: SequenceLease | None = ws.scope.get("state", {}).pop(_LEASE_STATE_KEY, None)
        if lease is not None:
            lease.release()


def _presented_key(ws: WebSocket) -> str | None:
    scheme, _, token = ws.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return ws.headers.get("x-api-key", "").strip() or None


class VoiceService:
    """``/v1/voice`` as an app service (gateway/app.py ``AppService``): models load at start-up."""

    body_limits: dict[str, int] = {}

    def __init__(self, settings: VoiceSettings, pipeline: GenerationPipeline, key_store: KeyStore | None,
                 metrics_registry: CollectorRegistry) -> None:  # fmt: skip
        self.settings = settings
        self.registry = pipeline.registry
        self.gate = VoiceGate(pipeline, key_store, VoiceSessionQuota(settings.max_sessions_per_key))
        self.metrics_registry = metrics_registry
        self.sessions: VoiceSessions | None = None
        self.unavailable = None if settings.enabled else (
            "Voice is disabled on this server; enable it with 'voice: {enabled: true}' in the config.")
        self.router = Routes()
        self.router.websocket("/v1/voice", self.serve)

    async def start(self) -> None:
        if not self.settings.enabled:
            return
        try:
            # Imported here: a server with voice off never loads numpy-heavy voice code or its models.
            from blink.voice.build import build_voice_sessions

            model = self.settings.model or self.registry.default_model()
            self.sessions = await asyncio.to_thread(
                build_voice_sessions, self.settings, model, self.metrics_registry, self.gate)
        except Exception as exc:  # any failure to load leaves voice off, never the server down
            self.unavailable = (f"Voice is enabled but cannot run here ({exc}); install it with "
                                "pip install 'blink-serve[voice]' and apt-get install espeak-ng.")
            log.error("%s", self.unavailable)

    async def aclose(self) -> None:
        return None

    async def serve(self, ws: WebSocket) -> None:
        if self.sessions is None:
            # Accepted only to say why: a client reads one error event and a close code, never hangs.
            await ws.accept()
            message = self.unavailable or "Voice is starting; retry shortly."
            await ws.send_json({"type": "error", "error": {"message": message, "type": "invalid_request_error"
                                if not self.settings.enabled else "server_error", "param": None,
                                "code": "voice_unavailable"}})
            await ws.close(_CLOSE_SERVER_ERROR if self.settings.enabled else _CLOSE_POLICY)
            return
        await self.sessions.serve(ws)
