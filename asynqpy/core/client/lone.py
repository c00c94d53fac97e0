"""The lone path of ``Client.enqueue`` (client.py ``_quick_enqueue``): the common call, a task
with default options to a queue the client knows, sent without driving the enqueue's plan. A
mixin of :class:`~.plans.ClientPlans`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..model import kinds
from ..model import options as opts
from ..model.task import TaskInfo, TaskState
from ..spine import tracing
from ..spine.broker import Broker, Call

RULED_S = 10.0
"""How long a queue's lone enqueues go through the plan after its quick call found a producer rule
set (lua/enqueue_lone.lua answered 'full'): one round trip each, not two, while a cap is set."""


class LonePath:
    """``_lone`` (what to send) and ``_lone_info`` (what it answers); per queue, ``_registers``
    keeps its registration (a SADD), its bound quick call (``Broker.enqueue_lone``) and its
    TaskInfo maker (``TaskInfo.like``); ``_ruled`` the queues whose lone enqueues take the plan
    for now (:meth:`_lone_full`)."""

    broker: Broker
    offload: Any
    wait_replicas: int
    _derivers: dict[str, opts.Deriver]
    _registers: dict[str, tuple[Call[Any], Callable[[str, bytes], Call[int | str]],
                                Callable[[str, str, Any, int, TaskState], TaskInfo]]]
    _ruled: dict[str, float]
    _seal: Callable[[str, Any, dict[str, Any]], Any]  # (sealing.py)

    def _lone(self, task_type: str, payload: Any,
              options: dict[str, Any]) -> tuple[opts.Prepared, list[Call[Any]]] | None:
        """The common enqueue, ready to send without the plan: a task with default options (or
        ``queue=`` alone) to a queue this client has enqueued to before (its options validated:
        :meth:`_prepare` keeps a Deriver per such queue), no tracing, no replicas to wait for. Its
        prepared task and the calls to send in one round trip: the queue's registration (every
        time: see :meth:`_plan`) and the one call storing it (lua/enqueue_lone.lua: fewer keys
        and commands than the plan's enqueue.lua, to which it leaves the task when a producer
        rule is set: :meth:`_lone_full`); None for any other enqueue (the plan then runs). What
        is stored and answered is what the plan's lone-task path stores and answers."""
        queue = self._lone_queue(options)
        if queue is None:
            return None
        derive = self._derivers.get(queue)
        if derive is None or derive.template.kind is not kinds.TaskKind.PLAIN:
            return None
        if self.broker.ring is not None:
            payload = self._seal(task_type, payload, options)
        p = derive(task_type, payload, opts.new_task_id(), self.broker.clock.local_ms())
        sent = self._registers.get(queue)
        if sent is None:  # (at most one per Deriver: 1 000)
            sent = self._registers[queue] = (self.broker.register_queues([queue]), self.broker.enqueue_lone(queue),
                                             TaskInfo.like(queue, derive.template.msg))
        if p.unique_ttl or p.mode or not p.generated_id:
            return p, [sent[0], kinds.store_call(self.broker, p)]
        return p, [sent[0], sent[1](p.id, p.data)]

    def _lone_queue(self, options: dict[str, Any]) -> str | None:
        """The queue of an enqueue that may go the lone way (``options`` empty or ``queue=`` alone,
        no tracing, no replicas to wait for, no offload, the queue not ruled: :meth:`_lone_full`),
        or None."""
        if tracing.current is not None or self.wait_replicas or self.offload is not None:
            return None
        queue: Any = "default"
        if options:
            queue = options.get("queue")
            if len(options) != 1 or type(queue) is not str:
                return None
        if self._ruled and self._ruled.get(queue, 0.0) > time.monotonic():
            return None
        return str(queue)

    def _lone_full(self, queue: str) -> None:
        """The quick call found a producer rule set for ``queue`` (it answered ``LONE_FULL``,
        nothing written): the queue's lone enqueues take the plan (enqueue.lua admits them) for
        :data:`RULED_S` seconds, then the quick call is tried again (the rule may be gone)."""
        if len(self._ruled) >= 1000:
            self._ruled.clear()
        self._ruled[queue] = time.monotonic() + RULED_S

    def _lone_info(self, p: opts.Prepared, reply: Any) -> TaskInfo:
        """The TaskInfo of a task :meth:`_lone` sent, from its call's ``reply`` (as the plan's
        ``TaskInfo.from_message``)."""
        v = p.values
        return self._registers[p.queue][2](p.id, v[0], v[1], v[2], kinds.first_state(p.kind, reply))
