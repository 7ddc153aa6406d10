"""API keys: stored hashed in SQLite, checked by a pure-ASGI middleware.

A key is ``bk-<id>-<secret>``; only the SHA-256 of the whole key is stored (keys are 192-bit
random, so a fast hash is enough: there is nothing to brute-force), and only the short id is
ever printed or logged. The middleware answers 401 for a missing/unknown/revoked key and puts
the key's record in ``scope["state"]`` for the per-model check (403) and the rate limiter.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from blink.gateway.http.errors import error_messages
from blink.obs import stage
from blink.private_files import private_sqlite_path
from blink.protocol.common import PRIORITIES
from blink.protocol.errors import AuthenticationError, BlinkError, PermissionDeniedError

PRINCIPAL_STATE_KEY = "blink_principal"
# 24 random bytes = 192 bits: unguessable, and short enough to paste.
_SECRET_BYTES = 24
# Live keys a store remembers (ApiKeyStore._live); past it the memory starts over. Far above the
# keys one gateway serves; bounds what a stream of distinct valid keys could pin.
_MAX_LIVE_KEYS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    models TEXT NOT NULL,
    requests_per_minute INTEGER NOT NULL,
    tokens_per_minute INTEGER NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL,
    scopes TEXT NOT NULL DEFAULT '',
    max_sequences INTEGER NOT NULL DEFAULT 0,
    max_voice_sessions INTEGER NOT NULL DEFAULT 0
)
"""
# Columns added after the first release: a key file written by an older Blink gains them on open.
_ADDED_COLUMNS = (("scopes", "TEXT NOT NULL DEFAULT ''"), ("max_sequences", "INTEGER NOT NULL DEFAULT 0"),
                  ("max_voice_sessions", "INTEGER NOT NULL DEFAULT 0"))
_COLUMNS = ("key_id, tenant, models, requests_per_minute, tokens_per_minute, created_at, revoked_at, scopes, "
            "max_sequences, max_voice_sessions")

# What a key may do beyond generating with its models. A scope is granted explicitly
# (``blink keys create --scope dashboard``); a key without scopes generates and manages its own
# files and batches, nothing more.
SCOPE_ADMIN = "admin"  # every tenant's files and batches, the dashboard, every priority
SCOPE_DASHBOARD = "dashboard"  # the live dashboard and its event stream
SCOPE_PRIORITY_PREFIX = "priority:"  # e.g. ``priority:voice`` lets the key ask for that lane
KNOWN_SCOPES = (SCOPE_ADMIN, SCOPE_DASHBOARD)


@dataclass(slots=True)
class ApiKey:
    """A key's record (never its secret): who it belongs to and what it may do."""

    key_id: str
    tenant: str
    models: list[str] = field(default_factory=list)  # empty = every model
    requests_per_minute: int = 0  # 0 = the server default
    tokens_per_minute: int = 0
    created_at: float = 0.0
    revoked_at: float | None = None
    scopes: list[str] = field(default_factory=list)
    # Sequences (``n`` counts n) this key may have generating at once; 0 = the server default.
    max_sequences: int = 0
    # Voice sessions (``/v1/voice`` sockets) this key may hold open at once; 0 = the server default.
    max_voice_sessions: int = 0

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or SCOPE_ADMIN in self.scopes

    def may_use_priority(self, priority: str) -> bool:
        return self.has_scope(SCOPE_PRIORITY_PREFIX + priority)


def validate_scopes(scopes: list[str]) -> list[str]:
    """The scopes as stored; a ``ValueError`` names one that is not a scope (a typo grants nothing),
    ``priority:<lane>`` included: the lane must be one ``x-blink-priority`` accepts."""
    lanes = {SCOPE_PRIORITY_PREFIX + lane for lane in PRIORITIES}
    for scope in scopes:
        if scope not in KNOWN_SCOPES and scope not in lanes:
            raise ValueError(f"unknown scope {scope!r}: use {', '.join(KNOWN_SCOPES)} or priority:<lane> "
                             f"(lanes: {', '.join(PRIORITIES)})")
        if "," in scope:
            raise ValueError(f"a scope cannot contain a comma: {scope!r}")
    return list(scopes)


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore(Protocol):
    """What the middleware reads keys from: SQLite (ApiKeyStore) or PostgreSQL (PostgresKeyStore)."""

    async def alookup(self, secret: str) -> ApiKey | None:
        """The live key for ``secret``, None if unknown or revoked; a ``BlinkError`` if it cannot tell."""
        ...

    async def aby_id(self, key_id: str) -> ApiKey | None:
        """The live key with this id, None if unknown or revoked (work queued under a key, such as
        batch lines, runs with the key's permissions as they are when it runs)."""
        ...


class ApiKeyStore:
    """Keys in a SQLite file (WAL, so the CLI can add or revoke keys while servers read)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._db = sqlite3.connect(private_sqlite_path(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(api_keys)")}
        for name, decl in _ADDED_COLUMNS:
            if name not in present:
                self._db.execute(f"ALTER TABLE api_keys ADD COLUMN {name} {decl}")
        self._lock = threading.Lock()
        # Live keys already looked up, by the secret's hash (a plain secret is never kept).
        # Valid while the file's ``data_version`` stands: SQLite changes it whenever another
        # connection (the CLI, another server) commits, so a revocation is seen on the next
        # request; this connection's own writes clear it. A hit costs one PRAGMA read and a
        # SHA-256 instead of an indexed SELECT too.
        self._live: dict[str, ApiKey] = {}
        self._version = -1

    def create(
        self, tenant: str, models: list[str] | None = None, requests_per_minute: int = 0, tokens_per_minute: int = 0,
        scopes: list[str] | None = None, max_sequences: int = 0, max_voice_sessions: int = 0,
    ) -> tuple[ApiKey, str]:
        """A new key; the secret is returned once and never stored."""
        key, secret = new_key(tenant, models, requests_per_minute, tokens_per_minute, scopes, max_sequences,
                              max_voice_sessions)
        with self._lock:
            self._db.execute(f"INSERT INTO api_keys (key_hash, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (hash_key(secret), *key_row(key)))
        return key, secret

    def lookup(self, secret: str) -> ApiKey | None:
        """The live key for ``secret``, or None (unknown or revoked)."""
        with self._lock:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if version != self._version:
                self._live.clear()
                self._version = version
            digest = hash_key(secret)
            key = self._live.get(digest)
            if key is not None:
                return key
            row = self._db.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE key_hash = ?", (digest,)).fetchone()
            if row is None or row[6] is not None:
                return None
            key = _from_row(row)
            if len(self._live) >= _MAX_LIVE_KEYS:
                self._live.clear()
            self._live[digest] = key
        return key

    async def alookup(self, secret: str) -> ApiKey | None:
        return self.lookup(secret)  # a local indexed read: microseconds, fine on the event loop

    def by_id(self, key_id: str) -> ApiKey | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        return None if row is None or row[6] is not None else _from_row(row)

    async def aby_id(self, key_id: str) -> ApiKey | None:
        return self.by_id(key_id)

    def list(self) -> list[ApiKey]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at").fetchall()
        return [_from_row(r) for r in rows]

    def revoke(self, key_id: str) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", (time.time(), key_id)
            )
            self._live.clear()
        return cur.rowcount > 0

    def close(self) -> None:
        self._db.close()


def new_key(
    tenant: str, models: list[str] | None, requests_per_minute: int, tokens_per_minute: int,
    scopes: list[str] | None, max_sequences: int, max_voice_sessions: int = 0,
) -> tuple[ApiKey, str]:
    """A fresh key record and its secret (shared by the SQLite and PostgreSQL stores)."""
    if max_sequences < 0:
        raise ValueError("max_sequences must be >= 0 (0 = the server default)")
    if max_voice_sessions < 0:
        raise ValueError("max_voice_sessions must be >= 0 (0 = the server default)")
    # 64 bits: the id is the table's primary key (32 collided with ~1 % odds by 10,000 keys).
    key_id = secrets.token_hex(8)
    secret = f"bk-{key_id}-{secrets.token_urlsafe(_SECRET_BYTES)}"
    key = ApiKey(key_id, tenant, list(models or []), requests_per_minute, tokens_per_minute, time.time(),
                 scopes=validate_scopes(list(scopes or [])), max_sequences=max_sequences,
                 max_voice_sessions=max_voice_sessions)
    return key, secret


def key_row(key: ApiKey) -> tuple[object, ...]:
    """``key``'s values in ``_COLUMNS`` order."""
    return (key.key_id, key.tenant, ",".join(key.models), key.requests_per_minute, key.tokens_per_minute,
            key.created_at, key.revoked_at, ",".join(key.scopes), key.max_sequences, key.max_voice_sessions)


def _from_row(row: tuple[object, ...]) -> ApiKey:
    key_id, tenant, models, rpm, tpm, created, revoked, scopes, max_sequences, max_voice_sessions = row
    return ApiKey(
        str(key_id), str(tenant), [m for m in str(models).split(",") if m], int(rpm), int(tpm),  # type: ignore[call-overload]
        float(created), None if revoked is None else float(revoked),  # type: ignore[arg-type]
        [s for s in str(scopes or "").split(",") if s], int(max_sequences or 0),  # type: ignore[call-overload]
        int(max_voice_sessions or 0),  # type: ignore[call-overload]
    )


def _presented_key(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value:
            return value.decode("latin-1").strip()
    return None


# API routes outside ``/v1/`` (vLLM serves its tokenizer endpoints at the root): keyed as ``/v1/`` is.
KEYED_ROOT_PATHS = frozenset({"/tokenize", "/detokenize"})


class AuthMiddleware:
    """401 unless an API request (under ``/v1/``, or ``KEYED_ROOT_PATHS``) carries a live key;
    health and metrics stay open."""

    def __init__(self, app: ASGIApp, store: KeyStore) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (scope["path"].startswith("/v1/") or scope["path"] in KEYED_ROOT_PATHS):
            await self.app(scope, receive, send)
            return
        secret = _presented_key(scope)
        err: BlinkError
        if secret is None:
            err = AuthenticationError(
                "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY' (or 'x-api-key: YOUR_KEY').", code="missing_api_key"
            )
        else:
            key = None
            try:
                with stage("auth"):
                    key = await self.store.alookup(secret)
                err = AuthenticationError("Incorrect API key provided.")
            except BlinkError as exc:  # the key store is down: a typed 503, never a 500
                err = exc
            if key is not None:
                scope.setdefault("state", {})[PRINCIPAL_STATE_KEY] = key
                await self.app(scope, receive, send)
                return
        for message in error_messages(err):
            await send(message)


def check_model_allowed(key: ApiKey | None, model: str) -> None:
    if key is not None and not key.allows(model):
        raise PermissionDeniedError(
            f"This API key may not use the model '{model}'.", param="model", code="model_not_allowed"
        )
