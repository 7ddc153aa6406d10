"""``blink keys create|list|revoke``: manage API keys (stored hashed; a secret is shown once)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from blink.config.settings import ConfigError, load_settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.gateway.auth.postgres import PostgresKeyStore

keys_app = typer.Typer(help="Create, list or revoke API keys.", no_args_is_help=True)

ConfigOpt = Annotated[Path | None, typer.Option(help="YAML config file (for auth.keys_db).")]
DbOpt = Annotated[str | None, typer.Option("--db", help="Key database: a SQLite path or a postgresql:// DSN "
                                           "(default: auth.postgres_dsn, else auth.keys_db).")]


def _store(config: Path | None, db: str | None) -> ApiKeyStore | PostgresKeyStore:
    if db is None:
        try:
            auth = load_settings(config).auth
        except ConfigError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
        db = auth.postgres_dsn or auth.keys_db
    if db.startswith(("postgresql://", "postgres://")):
        return PostgresKeyStore(db)
    return ApiKeyStore(db)


@keys_app.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="Tenant: cache entries are never shared across tenants.")] = "default",
    model: Annotated[list[str] | None, typer.Option("--model", help="Allowed model (repeat); default: all.")] = None,
    rpm: Annotated[int, typer.Option(help="Requests per minute (0 = server default).")] = 0,
    tpm: Annotated[int, typer.Option(help="Tokens per minute (0 = server default).")] = 0,
    scope: Annotated[list[str] | None, typer.Option(
        "--scope", help="Extra permission (repeat): admin, dashboard, priority:<lane> (e.g. priority:voice).")] = None,
    max_sequences: Annotated[int, typer.Option(
        help="Sequences generating at once for this key; n=4 counts 4 (0 = server default).")] = 0,
    max_voice_sessions: Annotated[int, typer.Option(
        help="Voice sessions (/v1/voice sockets) open at once for this key (0 = voice.max_sessions_per_key).")] = 0,
    config: ConfigOpt = None,
    db: DbOpt = None,
) -> None:
    """Create a key and print it (the only time the secret is shown)."""
    store = _store(config, db)
    try:
        key, secret = store.create(tenant, model or [], rpm, tpm, scope or [], max_sequences, max_voice_sessions)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
    typer.echo(secret)
    typer.echo(f"id {key.key_id}  tenant {key.tenant}  models {','.join(key.models) or '*'}  "
               f"scopes {','.join(key.scopes) or '-'}", err=True)


@keys_app.command("list")
def list_keys(config: ConfigOpt = None, db: DbOpt = None) -> None:
    """List keys (ids, never secrets)."""
    store = _store(config, db)
    typer.echo("id        tenant          models               rpm     tpm      created              status   scopes")
    for k in store.list():
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(k.created_at))
        status = "revoked" if k.revoked_at else "active"
        typer.echo(
            f"{k.key_id:<9} {k.tenant:<15} {','.join(k.models) or '*':<20} {k.requests_per_minute:<7} "
            f"{k.tokens_per_minute:<8} {created}  {status:<8} {','.join(k.scopes) or '-'}"
        )
    store.close()


@keys_app.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(help="The key id shown by 'blink keys list'.")],
           config: ConfigOpt = None, db: DbOpt = None) -> None:
    """Revoke a key; servers refuse it from the next request on."""
    store = _store(config, db)
    ok = store.revoke(key_id)
    store.close()
    if not ok:
        typer.echo(f"error: no active key with id {key_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")
