"""The lone path of ``Client.enqueue`` (client.py ``_quick_enqueue``): the common call, a task
with default options to a queue the client knows, sent without driving the enqueue's plan. A
mixin of :class:`~.plans.ClientPlans`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import kinds
from ..model import options as opts
from ..model.task import TaskInfo, TaskState
from ..spine import tracing
from ..spine.broker import Broker, Call


class LonePath:
    """``_lone`` (what to send) and ``_lone_info`` (what it answers); per queue, ``_registers``
    keeps its registration (a SADD), its bound enqueue call (``Broker.enqueue_plain``) and its
    TaskInfo maker (``TaskInfo.like``)."""

    broker: Broker
    offload: Any
    wait_replicas: int
    _derivers: dict[str, opts.Deriver]
    _registers: dict[str, tuple[Call[Any], Callable[[str, bytes, bool], Call[int]],
                                Callable[[str, str, Any, int, TaskState], TaskInfo]]]
    _seal: Callable[[str, Any, dict[str, Any]], Any]  # (sealing.py)

    def _lone(self, task_type: str, payload: Any,
              options: dict[str, Any]) -> tuple[opts.Prepared, list[Call[Any]]] | None:
        """The common enqueue, ready to send without the plan: a task with default options (or
        ``queue=`` alone) to a queue this client has enqueued to before (its options validated:
        :meth:`_prepare` keeps a Deriver per such queue), no tracing, no replicas to wait for. Its
        prepared task and the calls to send in one round trip: the queue's registration (every
        time: see :meth:`_plan`) and the one call storing it; None for any other enqueue (the
        plan then runs). What the call does and answers is the plan's lone-task path, unchanged."""
        if tracing.current is not None or self.wait_replicas or self.offload is not None:
            return None
        if options:
            queue = options.get("queue")
            if len(options) != 1 or type(queue) is not str:
                return None
        else:
            queue = "default"
        derive = self._derivers.get(queue)
        if derive is None or derive.template.kind is not kinds.TaskKind.PLAIN:
            return None
        if self.broker.ring is not None:
            payload = self._seal(task_type, payload, options)
        p = derive(task_type, payload, opts.new_task_id(), self.broker.clock.local_ms())
        sent = self._registers.get(queue)
        if sent is None:  # (at most one per Deriver: 1 000)
            sent = self._registers[queue] = (self.broker.register_queues([queue]), self.broker.enqueue_plain(queue),
                                             TaskInfo.like(queue, derive.template.msg))
        if p.unique_ttl or p.mode:
            return p, [sent[0], kinds.store_call(self.broker, p)]
        return p, [sent[0], sent[1](p.id, p.data, not p.generated_id)]

    def _lone_info(self, p: opts.Prepared, reply: Any) -> TaskInfo:
        """The TaskInfo of a task :meth:`_lone` sent, from its call's ``reply`` (as the plan's
        ``TaskInfo.from_message``)."""
        v = p.values
        return self._registers[p.queue][2](p.id, v[0], v[1], v[2], kinds.first_state(p.kind, reply))
