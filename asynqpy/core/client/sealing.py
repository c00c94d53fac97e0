"""What a client does with a key ring (docs/encryption.md): the payloads it seals, the tenant keys
it loads or makes first, the results it opens. A mixin of :class:`~.plans.ClientPlans`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

from ..security import encryption as enc
from ..security.keyplans import load_plan, reveal_plan
from ..spine.broker import Broker
from ..spine.twin import Steps


class Sealing:
    """The client's encryption steps (``self.broker.ring``: the key ring, or None)."""

    broker: Broker

    def _seal(self, task_type: str, payload: Any, kwargs: dict[str, Any]) -> Any:
        """The payload encrypted with the client's key ring (docs/encryption.md); a unique task's
        envelope carries a keyed digest of the plain payload, its lock."""
        ring = self.broker.ring
        if enc.sealed_payload(payload):  # (a process input's, sealed already)
            return payload
        tenant = kwargs.get("tenant") or ""
        lock = not kwargs.get("unique_key") and any(kwargs.get(k) is not None
                                                    for k in ("unique", "throttle", "debounce"))
        return ring.seal(payload, enc.PAYLOAD, kwargs.get("queue", "default"), tenant if type(tenant) is str else "",
                         ring.digest(task_type, payload) if lock else b"")

    def _keys(self, options: Iterable[Mapping[str, Any]]) -> Steps[None]:
        """Load the tenant keys the tasks of ``options`` are sealed with: a tenant that has a key
        has its tasks sealed with it (a ring with ``tenant_keys`` makes the ones missing). One read
        per tenant a minute at most (:data:`~asynqpy.core.security.encryption.TENANT_KEY_TTL`)."""
        ring = self.broker.ring
        if ring is not None:
            pairs = [(o.get("queue", "default"), o.get("tenant")) for o in options]
            yield from load_plan(ring, [(q, t) for q, t in pairs if type(q) is str and type(t) is str and t],
                                 create=ring.tenant_keys)

    def _reveal(self, value: Any, queue: str) -> Steps[Any]:
        """A result as the handler returned it: decrypted (EncryptionError when it cannot be)."""
        if type(value) is not msgpack.ExtType:
            return value
        return (yield from reveal_plan(self.broker.ring, value, queue, strict=True))
