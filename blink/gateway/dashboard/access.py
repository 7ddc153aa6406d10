"""Who may watch the dashboard when API keys are on: a key with the ``dashboard`` scope.

A script sends its key as it would to ``/v1/`` (``Authorization: Bearer`` or ``x-api-key``). A
browser cannot: a page load and ``EventSource`` send no custom headers, and a key in the URL
would land in access logs and browser history. So the page's sign-in form sends the key once,
in the ``Authorization`` header of ``POST /dashboard/session``, and gets back a session cookie:
``<key id>.<expiry>.<HMAC-SHA256>``, signed with a secret drawn at start-up (a restart signs
everyone out), ``HttpOnly`` (page scripts cannot read it), ``SameSite=Strict`` and scoped to
``/dashboard``. It never holds the key, lasts ``SESSION_S``, and each use looks the key up
again, so a revoked key or a removed scope ends the session at once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from starlette.requests import Request
from starlette.responses import Response

from blink.gateway.auth.keys import SCOPE_DASHBOARD, ApiKey, KeyStore, _presented_key
from blink.gateway.http.request_parsing import bounded_int
from blink.protocol.errors import AuthenticationError, PermissionDeniedError

COOKIE = "blink_dashboard"
# An hour: a working session, short enough that a cookie copied off a shared machine goes stale.
SESSION_S = 3600
# The latest expiry a cookie can carry (a Unix time in 2286): anything longer is not one we signed.
_MAX_EXPIRY = 9_999_999_999


class DashboardAccess:
    def __init__(self, store: KeyStore) -> None:
        self.store = store
        self._secret = secrets.token_bytes(32)

    async def check(self, request: Request) -> ApiKey:
        """The key behind the request's header or session cookie; 401 without one, 403 without the scope."""
        secret = _presented_key(request.scope)
        if secret is not None:
            key = await self.store.alookup(secret)
        else:
            key_id = self._verify(request.cookies.get(COOKIE, ""))
            key = None if key_id is None else await self.store.aby_id(key_id)
            if key_id is None:
                raise AuthenticationError(
                    "The dashboard needs an API key with the 'dashboard' scope: sign in on /dashboard or send "
                    "'Authorization: Bearer YOUR_KEY'.", code="missing_api_key")
        if key is None:
            raise AuthenticationError("Incorrect, revoked or expired API key.")
        if not key.has_scope(SCOPE_DASHBOARD):
            raise PermissionDeniedError("This API key may not view the dashboard (it needs the 'dashboard' scope).",
                                        code="missing_scope")
        return key

    async def open_session(self, request: Request) -> Response:
        """``POST /dashboard/session``: the key in the header buys a session cookie (204)."""
        if _presented_key(request.scope) is None:
            raise AuthenticationError("Send the key as 'Authorization: Bearer YOUR_KEY'.", code="missing_api_key")
        key = await self.check(request)
        response = Response(status_code=204, headers={"cache-control": "no-store"})
        response.set_cookie(COOKIE, self._sign(key.key_id, int(time.time()) + SESSION_S), max_age=SESSION_S,
                            path="/dashboard", httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    def _sign(self, key_id: str, expires: int) -> str:
        payload = f"{key_id}.{expires}"
        return f"{payload}.{hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()}"

    def _verify(self, cookie: str) -> str | None:
        """The key id a valid, unexpired cookie names; None otherwise."""
        key_id, _, rest = cookie.partition(".")
        expires, _, _sig = rest.partition(".")
        until = bounded_int(expires, 0, _MAX_EXPIRY)
        if not key_id or until is None or until < time.time():
            return None
        if not hmac.compare_digest(self._sign(key_id, until), cookie):
            return None
        return key_id
