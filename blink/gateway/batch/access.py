"""Who may see and manage which Batch API files and batches.

Ownership: a file or batch belongs to the API key that created it (its ``key_id``; the key's
``tenant`` is stored beside it for the storage quota and for audit). Another key, even one of
the same tenant, gets 404 for it, exactly as for an id that does not exist, so ids cannot be
probed; lists show only the caller's own objects. Per key and not per tenant because a tenant's
keys are often handed to different services or people (a CI job, a contractor), and a key should
not read prompts and outputs it did not send. A key with the ``admin`` scope sees and manages
every object (and can recover a revoked key's results). A batch's output and error files belong
to the batch's owner. With auth off there is no key: everything belongs to one anonymous owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from blink.gateway.auth.keys import PRINCIPAL_STATE_KEY, SCOPE_ADMIN, ApiKey

# The owner id of objects created with auth off (stored as NULL).
ANONYMOUS = ""


@dataclass(frozen=True, slots=True)
class Caller:
    key_id: str | None
    tenant: str | None
    admin: bool = False

    @property
    def owner(self) -> str:
        return self.key_id or ANONYMOUS

    @property
    def list_filter(self) -> str | None:
        """The owner a list is filtered to; None (no filter) for an admin."""
        return None if self.admin else self.owner

    def may_access(self, owner_key_id: str | None) -> bool:
        return self.admin or (owner_key_id or ANONYMOUS) == self.owner


def caller_of(request: Request) -> Caller:
    key: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
    if key is None:
        return Caller(None, None)
    return Caller(key.key_id, key.tenant, key.has_scope(SCOPE_ADMIN))
