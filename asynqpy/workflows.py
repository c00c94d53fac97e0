"""Composing workflows: :func:`chain`, :func:`group` and fan-in (``group(...).then(...)``), built
on ``enqueue(..., after=...)``.

A :class:`Sig` is a task not enqueued yet (type, payload, options). ``chain(a, b, c)``: b waits
on a and c on b (each reads its parent's result as ``task.parent_results[0]``). ``group(a, b,
c)``: independent tasks (fan-out). ``group(a, b).then(d)``: d waits on all of them and gets all
their results, in order (fan-in). Chains and groups nest: ``chain(a, group(b, c), d)`` runs b and
c after a, and d after both. ``enqueue(client)`` (or ``await aenqueue(aclient)``) stores every
task, parents first, and returns their :class:`TaskInfo`, in the order written.

Each edge is crash-safe and works across queues and cluster slots (docs/workflows.md). If the
producer dies part-way, the tasks already stored run as far as their parents allow; what was not
stored yet is simply not there (enqueue the rest again with ``after=`` naming the stored ones).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Union

from .core.model.errors import InvalidArgumentError
from .core.model.task import TaskInfo

if TYPE_CHECKING:
    from .client import AsyncClient, Client

Step = Generator[tuple[str, Any, dict[str, Any]], TaskInfo, list[TaskInfo]]


class Node:
    """Something a workflow is made of: a :class:`Sig`, a :class:`Chain` or a :class:`Group`."""

    def _steps(self, after: list[TaskInfo], out: list[TaskInfo]) -> Step:  # pragma: no cover - abstract
        raise NotImplementedError

    def then(self, *nodes: Node) -> Chain:
        """This, then ``nodes`` in order (each waiting on what came before)."""
        return Chain(self, *nodes)

    def enqueue(self, client: Client) -> list[TaskInfo]:
        """Enqueue every task of the workflow with a :class:`~asynqpy.Client`; returns their
        TaskInfo in the order written."""
        out: list[TaskInfo] = []
        steps = self._steps([], out)
        try:
            req = next(steps)
            while True:
                type_, payload, options = req
                req = steps.send(client.enqueue(type_, payload, **options))
        except StopIteration:
            return out

    async def aenqueue(self, client: AsyncClient) -> list[TaskInfo]:
        """:meth:`enqueue` with an :class:`~asynqpy.AsyncClient`."""
        out: list[TaskInfo] = []
        steps = self._steps([], out)
        try:
            req = next(steps)
            while True:
                type_, payload, options = req
                req = steps.send(await client.enqueue(type_, payload, **options))
        except StopIteration:
            return out


class Sig(Node):
    """One task of a workflow: ``Sig("resize", {"id": 1}, queue="images", retention=3600)``. Any
    enqueue option but ``after`` (the workflow sets it); ``on_parent_failure`` applies to its
    parents in the workflow."""

    def __init__(self, type: str, payload: Any = None, **options: Any) -> None:
        if "after" in options:
            raise InvalidArgumentError("a workflow sets after= itself: compose with chain/group instead")
        self.type, self.payload, self.options = type, payload, options

    def __repr__(self) -> str:
        return f"Sig({self.type!r}, {self.payload!r})"

    def _steps(self, after: list[TaskInfo], out: list[TaskInfo]) -> Step:
        options = dict(self.options)
        if after:
            options["after"] = after
        info = yield (self.type, self.payload, options)
        out.append(info)
        return [info]


NodeLike = Union[Node, "Any"]


def _node(x: Any) -> Node:
    if isinstance(x, Node):
        return x
    if hasattr(x, "name") and hasattr(x, "s"):  # a typed task function itself: no arguments
        return x.s()  # type: ignore[no-any-return]
    raise InvalidArgumentError(f"a workflow is made of Sig, chain(...) and group(...), got {x!r}")


class Chain(Node):
    """Nodes run one after the other."""

    def __init__(self, *nodes: Any) -> None:
        if not nodes:
            raise InvalidArgumentError("chain() needs at least one task")
        self.nodes: Sequence[Node] = [_node(n) for n in nodes]

    def then(self, *nodes: Node) -> Chain:
        return Chain(*self.nodes, *nodes)

    def _steps(self, after: list[TaskInfo], out: list[TaskInfo]) -> Step:
        tails = after
        for n in self.nodes:
            tails = yield from n._steps(tails, out)
        return tails


class Group(Node):
    """Nodes run side by side (each waiting on what came before the group, if anything)."""

    def __init__(self, *nodes: Any) -> None:
        if not nodes:
            raise InvalidArgumentError("group() needs at least one task")
        self.nodes: Sequence[Node] = [_node(n) for n in nodes]

    def _steps(self, after: list[TaskInfo], out: list[TaskInfo]) -> Step:
        tails: list[TaskInfo] = []
        for n in self.nodes:
            tails += yield from n._steps(after, out)
        return tails


def chain(*nodes: Any) -> Chain:
    """``chain(a, b, c)``: b runs after a completed, c after b (see the module docstring)."""
    return Chain(*nodes)


def group(*nodes: Any) -> Group:
    """``group(a, b, c)``: side by side; ``group(...).then(d)``: d after all of them."""
    return Group(*nodes)
