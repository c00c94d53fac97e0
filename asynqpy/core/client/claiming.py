"""What a client does with a blob store (docs/offload.md): the payloads it offloads, a reference
in the message in their place. A mixin of :class:`~.plans.ClientPlans`."""

from __future__ import annotations

from typing import Any

from ..model import options as opts
from ..offload import refs
from ..processes import model as proc
from ..spine.keys import validate_queue


class Claiming:
    """The client's offloading steps (``self.offload``: the blob store, or None)."""

    offload: Any

    def _claim(self, queue: str, task_id: str, payload: Any) -> Any:
        """The payload as the message carries it: itself, or when its encoding is over the blob
        store's threshold, stored as a blob and a reference to it (docs/offload.md). The blob is
        written before the task: a producer that dies in between leaves an orphan the sweep
        removes, never a task without its payload. (The store is called in this thread.)"""
        store = self.offload
        if store is None or refs.is_ref(payload):
            return payload
        data = refs.encode(payload)
        if len(data) <= store.threshold:
            return payload
        name = refs.blob_name(queue, task_id)
        store.put(name, data)
        return refs.make_ref(name)

    def _offloaded(self, task_type: str, payload: Any,
                   kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any], bool]:
        """The payload (offloaded when large: :meth:`_claim`), the options (with the id its blob is
        named after) and whether that id was generated. A process input's payload stays in its
        message (the runner reads it before the handler); a bad queue name is refused later."""
        queue = kwargs.get("queue", "default")
        if type(queue) is not str or str(task_type).startswith(proc.TYPE_PREFIX):
            return payload, kwargs, False
        given = kwargs.get("task_id")
        id = given if type(given) is str and given else opts.new_task_id()
        claimed = self._claim(validate_queue(queue), id, payload)
        if claimed is payload or given is not None:
            return claimed, kwargs, False
        return claimed, {**kwargs, "task_id": id}, True  # the id it was stored under, random still
