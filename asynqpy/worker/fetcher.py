"""Fetcher: the fetch half of the processor (``worker/processor.py``). It takes tasks in batches,
up to ``fetch_batch`` (and the free slots) with one ``dequeue`` script call, and hands them to
:meth:`Processor.start <asynqpy.worker.processor.Processor.start>`; it never runs a handler.

1. the loop (:meth:`Fetcher._loop`): wait for a free slot, then one fetch round: a dequeue of the
   queues in the order of ``worker/queues.py`` (``_fetch_once``) or, found nothing, the idle wait;
2. the wake tokens: serving more than :data:`~asynqpy.worker.queues.FEW_QUEUES` queues on a single
   Redis, a fetch dequeues the queue whose token it took or known to have a backlog
   (``_poll``: one ``wake_take`` takes the tokens of up to :meth:`Fetcher._take_count` other queues);
   the idle wait blocks on the queues' wake lists (``_wait_for_work``: the
   pipelined wait of ``worker/wake.py``, with the first queue's dequeue riding in the same round
   trip, or a BLPOP); a token taken and not acted on is handed back (``_hand_back``);
3. start and stop (:meth:`start`, :meth:`stop`, :meth:`halt`): a stop never loses a wake token or
   a dequeue in flight (``_stop``); a halted fetcher keeps what it knew for the next one;
4. the writes ride with the dequeue (``_dequeue``): while the fetcher is about to dequeue
   (:attr:`Fetcher.refill`, from a slot freed to the end of the fetch), the writer leaves the
   outcomes it queued to it, and the dequeue carries them: one pipeline, the successes of the
   dequeued queue acknowledged in the dequeue's own script call (``done_dequeue``). A busy worker
   so makes one round trip per batch of tasks, not two (docs/internals-costs.md)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain, filterfalse
from typing import Any, Protocol

from ..core.spine.broker import Call, Dequeued, Done
from ..core.spine.keys import queue_keys, wait_stop
from ..redisio.connection import REDIS_ERRORS
from .context import Context, Running
from .queues import EMPTY_RECHECK, FEW_QUEUES, QueueOrder
from .settings import ServerOptions
from .wake import PipelinedWait
from .writer import Writer

log = logging.getLogger("asynqpy.processor")  # the processor's log: fetching is part of its work

POLL_EVERY_FETCH = 100
"""Serving at most this many queues, a busy fetch polls the other queues' wake lists every time
(one ``wake_take``); with more, at most every :data:`EMPTY_RECHECK` s or every
:data:`POLL_LISTS_PER_S`-th of a second per wake list named, whichever is longer (the call names
every list), unless the last poll took all the tokens it asked for (more are likely waiting)."""

POLL_LISTS_PER_S = 20_000
"""The wake lists (two a queue) a busy server's polls name per second at most, past 1 000 queues:
10^4 queues are polled once a second. A poll's cost grows with K, so polls at a fixed pace would
make a long drain over many queues O(K^2) again; so paced, they take a bounded share of the
server's time whatever K (a queue whose task arrives while the server is busy with others, and
no other server is idle, waits up to that second)."""

TAKE_SHARE = 64
"""A poll of the wake lists fills the backlog (the queues known to have tasks) up to ``max(free slots,
K / TAKE_SHARE)`` queues of the K served (one token at least): a call names every list (O(K) bytes),
so taking one token a call made starting over K one-task queues O(K^2); K / TAKE_SHARE a call makes
it O(K) (``bench/scale_manyqueues.py --start-only``). The queues taken are this server's to dequeue
(its backlog): other idle servers do not wake for them meanwhile; stopping hands their tokens back."""

BURST_WAIT = 0.02
"""An idle wait that took a token within this (s) found it waiting: the next fetch polls (``_poll_due``)."""

SHORT_WAIT = 0.25
"""A queue's limits holding its tasks back for less than this (s): the worker sleeps locally rather
than in BLPOP (Redis times blocked clients out at its cron's pace, ~100 ms)."""


class Taker(Protocol):
    """What the fetcher needs of the processor: the tasks it runs (``executing``), how many it may
    run at once, whether it is quiet, who is told of a queue's tasks taken, and where a task goes."""

    executing: set[Running]
    concurrency: int
    quiet: bool
    dequeued: Callable[[str], None] | None
    writer: Writer  # the outcomes it queued ride with the dequeues (_dequeue)
    pages: Callable[[], int]  # -1, or the events of its process a dequeue reads with each process input

    def start(self, queue: str, id: str, raw: bytes, token: str, now_ms: int, lease_until: float,
              page: tuple[str, list[Any]] | None = None) -> None: ...


class Fetcher:
    """Takes tasks for a :class:`~asynqpy.worker.processor.Processor` (see the module docstring);
    reads its concurrency, its ``quiet`` and the tasks it runs (``executing``)."""

    def __init__(self, ctx: Context, options: ServerOptions, processor: Taker) -> None:
        self.ctx = ctx
        self.opts = options
        self.name = options.worker_name
        self.p = processor
        self.executing = processor.executing
        self.slot_freed = asyncio.Event()  # a handler ended (or the concurrency changed): look again
        self._task: asyncio.Task[None] | None = None
        self._restart = False  # halt(): the loop ends (handing back its wake tokens)
        self._in_dequeue = self._in_wait = False  # a dequeue, or an idle wait, in flight (_stop)
        self._in_call = False  # a call that pops or puts back a wake token in flight (_poll, _hand_back)
        self._riding = 0  # the count of the dequeue riding with the idle wait in flight (0: none)
        self._waiter = PipelinedWait(ctx) if PipelinedWait.supported(ctx.redis) else None
        # without the pipelined wait (fakeredis, a client of another type), the idle BLPOP also
        # blocks on a list of this fetcher's own, which _stop pushes to to end it (a cluster's
        # per-key BLPOPs are still cancelled)
        self._stop_key = wait_stop(secrets.token_hex(8)) if self._waiter is None and not ctx.cluster else None
        self._left_behind = False  # the last dequeue left tasks in its queue (and a wake token for them)
        self.serve(options.queues)
        self._polled = float("-inf")  # loop time of the last non-blocking poll of the wake lists
        self._more = False  # the last poll took as many tokens as it asked for: more may wait
        self._woke = False  # the idle wait took a token since the last poll: others may wait too
        self._burst = False  # the last idle wait took a token at once (within BURST_WAIT): tokens wait
        self._refill = False  # about to dequeue: the writer leaves its writes to the dequeue (refill)

    @property
    def refill(self) -> bool:
        """Whether the loop is about to dequeue (a slot is free, the fetch not over): the writes
        queued meanwhile ride with that dequeue (``_dequeue``)."""
        return self._refill

    def _refilling(self, on: bool) -> None:
        """Say whether the loop is about to dequeue; no longer, the writer sends what it holds."""
        self._refill = on
        if not on:
            self.p.writer.kick()

    def serve(self, queues: Mapping[str, int]) -> None:
        """Fetch from ``queues`` (name -> weight) from now on (the loop halted, or not started)."""
        before = getattr(self, "_queues", None)
        self._queues = QueueOrder(queues, self.opts.strict_priority)
        if before is not None:  # (the queues it served already are not fresh: only the new ones are looked at)
            self._queues.fresh.difference_update(before.queues)
            # what the stopped loop knew goes on: a wake token it took and had not acted on yet
            # (owed: it was stopped between the pop and the dequeue) and the queues it knew to have work
            known = before.backlog | ({before.owed} if before.owed is not None else set())
            self._queues.backlog.update(known & set(self._queues.queues))
        self._wake_keys = {queue_keys(q).wake: q for q in queues}
        self._wake_keys.update({queue_keys(q).wake_for(self.name): q for q in queues})  # targeted tasks
        self._keys_of = {q: (queue_keys(q).wake, queue_keys(q).wake_for(self.name)) for q in queues}
        self._key_order: list[str] | None = None  # the wake lists in the order of the weights (_wait_keys)
        self._key_drawn = 0.0  # loop time that order was drawn

    # -- start and stop -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the loop was started and not stopped since."""
        return self._task is not None

    def start(self) -> None:
        """Start the loop."""
        self._task = asyncio.create_task(self._loop(), name="asynqpy-fetcher")

    async def stop(self, close: bool = True) -> None:
        """Stop the loop (see ``_stop``); ``close``: and close the idle wait's connection."""
        task, self._task = self._task, None
        if task is not None:
            await self._stop(task, close)
        elif close and self._waiter is not None:
            await self._waiter.close()

    async def halt(self) -> None:
        """Stop the loop to start it again (new queues, a new concurrency): as :meth:`stop`, the
        idle wait's connection kept; what it knew goes on to the next loop (``serve``)."""
        if self._task is None:
            return
        self._restart = True
        try:
            await self.stop(close=False)
        finally:
            self._restart = False

    async def dequeue_ended(self) -> None:
        """Return once no dequeue is in flight (it was sent for the slots free when it was built)."""
        while self._in_dequeue:
            await asyncio.sleep(0.001)

    def rides_past(self, free: int) -> bool:
        """Whether an idle wait is in flight whose riding dequeue asks for more than ``free`` tasks."""
        return self._task is not None and self._in_wait and self._riding > free

    async def _stop(self, task: asyncio.Task[None], close: bool) -> None:
        """Stop fetching without losing a wake token or a dequeue in flight: a dequeue, a poll of
        the wake lists and a token's hand back are let finish, an idle wait is ended from outside
        (``CLIENT UNBLOCK``, or a push to its stop list), anything else is cancelled.

        An idle wait is never cancelled where it can be ended: a BLPOP whose read is cancelled
        goes on in the server until it sees the connection closed (fakeredis: until its timeout),
        and a token it pops meanwhile (a task enqueued just after) is lost with its reply: the
        queue then waits for the scan (:meth:`QueueOrder.scan`), seconds to minutes."""
        pushed = False
        while not task.done():
            if self._in_wait and self._waiter is not None:
                await self._unblock(task)
            elif self._in_wait and self._stop_key is not None:
                if not pushed:
                    pushed = True
                    await self._push_stop(task, self._stop_key)
            elif not self._in_dequeue and not self._in_call:
                task.cancel()
            await asyncio.wait([task], timeout=0.05)
        if pushed and self._stop_key is not None:  # (left if the wait ended otherwise first)
            try:
                await self.ctx.redis.execute_command("DEL", self._stop_key)
            except REDIS_ERRORS as exc:
                log.warning("could not clear the idle wait's stop list: %s", exc)
        if close and self._waiter is not None:
            await self._waiter.close()

    async def _unblock(self, task: asyncio.Task[None]) -> None:
        """End the pipelined idle wait (``CLIENT UNBLOCK``); cancel the loop if that fails."""
        assert self._waiter is not None
        try:
            await self._waiter.unblock()
        except REDIS_ERRORS as exc:
            log.warning("could not unblock the idle wait: %s", exc)
            task.cancel()

    async def _push_stop(self, task: asyncio.Task[None], stop_key: str) -> None:
        """End the BLPOP idle wait with a push to its stop list; cancel the loop if that fails."""
        try:
            await self.ctx.redis.execute_command("LPUSH", stop_key, "1")
            await self.ctx.redis.execute_command("EXPIRE", stop_key, 60)
        except REDIS_ERRORS as exc:
            log.warning("could not end the idle wait: %s", exc)
            task.cancel()

    # -- the loop: a free slot -> _fetch_once (one dequeue script call) or _wait_for_work -> _took ---------

    def _by_token(self) -> bool:
        """Whether this server fetches by wake token (more than :data:`FEW_QUEUES` queues on a
        single Redis) rather than trying every queue."""
        return not self.ctx.cluster and len(self._queues.queues) > FEW_QUEUES

    def _stopped(self) -> bool:
        """Whether the loop is to end: the server stops, is quiet, or the loop is halted."""
        return self.ctx.stopping.is_set() or self.p.quiet or self._restart

    async def _loop(self) -> None:
        """Fetch while a slot is free, until stopped (or halted); a failed round backs off (50 ms
        doubling to 5 s); at its end, the wake tokens it took and did not act on are handed back."""
        backoff = 0.05
        self._queues.scan_from(self.opts.idle_timeout, asyncio.get_running_loop().time())
        try:
            await self._fetch_loop(backoff)
        finally:
            self._refilling(False)
        await self._hand_back_all()

    async def _fetch_loop(self, backoff: float) -> None:
        while not self._stopped():
            if len(self.executing) >= self.p.concurrency:
                await self._wait_for_slot()
                continue
            if not self._queues.queues:  # patterns that match no queue yet: serve() restarts this loop
                self._refilling(False)
                await self.ctx.sleep(self.opts.idle_timeout)
                continue
            self._refilling(True)
            try:
                if self.opts.fair_dispatch and self.executing and self._left_behind:
                    await self._queue_up_again()
                    continue
                if not await self._fetch_or_wait(self._batch()):
                    break
                if not self._queues.down:
                    self.ctx.health.ok()
                backoff = 0.05
            except REDIS_ERRORS as exc:
                self.ctx.health.failed("fetching tasks", exc)
                backoff = await self._back_off(backoff)
            except Exception:  # a bug must not stop fetching for good
                log.exception("fetching tasks failed unexpectedly; retrying in %.2fs", backoff)
                backoff = await self._back_off(backoff)

    async def _wait_for_slot(self) -> None:
        """Every slot taken: wait until a handler ends."""
        self._refilling(False)
        self.slot_freed.clear()
        await self.slot_freed.wait()
        self._refilling(True)  # (the outcome of the handler that ended rides with the next dequeue)
        # two turns (no timer): handlers ending at once free their slots, one dequeue refills all
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    async def _back_off(self, backoff: float) -> float:
        """Sleep ``backoff`` s after a failed round; returns the next (doubled, at most 5 s)."""
        self._refilling(False)
        await self.ctx.sleep(backoff)
        return min(backoff * 2, 5.0)

    def _batch(self) -> int:
        """The next dequeue's count: the free slots, at most ``fetch_batch`` (``fair_dispatch``: 1)."""
        if self.opts.fair_dispatch:
            return 1
        return min(self.p.concurrency - len(self.executing), self.opts.fetch_batch)

    async def _queue_up_again(self) -> None:
        """``fair_dispatch``: one task per dequeue; a busy server that left tasks behind queues up
        again behind the idle servers (Redis wakes blocked clients in the order they blocked), so a
        burst is dealt round-robin across servers and processes."""
        self._left_behind = False
        self._refilling(False)
        await self._wait_for_work(1)
        await asyncio.sleep(0)

    async def _fetch_or_wait(self, count: int) -> bool:
        """One round: a fetch, or, finding nothing, the idle wait; False if the loop is to end.
        Tasks fetched run two turns first (as in :meth:`_wait_for_slot`): one slow task kept the
        slots split into two half batches taken in turn for good, twice the calls a task."""
        if await self._fetch_once(count):
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return True
        self._refilling(False)  # (the idle wait may last: the writer sends what it holds)
        if self._stopped():
            return False
        await self._wait_for_work(count)
        await asyncio.sleep(0)  # let the tasks it brought start before the next fetch
        return True

    async def _hand_back_all(self) -> None:
        """The loop ends: hand back a wake token not acted on, and (by token) the tokens of the
        queues it took, polling, and left."""
        if self._queues.owed is not None:
            owed, self._queues.owed = self._queues.owed, None
            await self._hand_back(owed)
        if self._by_token() and self._queues.backlog:
            await self._hand_back_many(sorted(self._queues.backlog))

    async def _fetch_once(self, count: int) -> bool:
        """One fetch: on a single server, the queue whose wake token this server took, then the
        queues it knows have tasks left (a non-blocking poll of the wake lists, at most every
        :data:`EMPTY_RECHECK` s while busy, notices the others): O(1) round trips, never a dequeue
        per queue served. On a cluster, and serving a few queues
        (:data:`FEW_QUEUES`), every queue not skipped: a queue is tried again :data:`EMPTY_RECHECK`
        s after it was found empty, which also finds what no token announced (the runs of a
        targeted task that a worker which could not take them woke for)."""
        loop = asyncio.get_running_loop()
        order = self._queues.order() if not self._by_token() else await self._token_order()
        for q in order:
            if self._queues.skip(q, loop.time()):
                continue
            token = secrets.token_hex(4)
            lease_from, sent_ms = loop.time(), self.ctx.clock.local_ms()
            self._in_dequeue = True
            try:
                res = await self._dequeue(q, count, token)
                self.ctx.metrics.loop("dequeue", loop.time() - lease_from)
            except REDIS_ERRORS as exc:
                if not self.ctx.cluster:
                    raise  # one server: every queue is down, the fetch loop backs off
                # a cluster: the queues of the other masters are served meanwhile
                backoff = self._queues.failed(q, loop.time())
                self.ctx.health.failed(f"fetching from queue {q} (retried in {backoff:.2f}s)", exc)
                continue
            finally:
                self._in_dequeue = False
            self._queues.down.pop(q, None)
            if self._took(q, res, token, lease_from, sent_ms):
                return True
        return False

    async def _dequeue(self, q: str, count: int, token: str) -> Dequeued:
        """One dequeue of ``q``; the writes the writer queued ride with it (``Writer.write_with``):
        one round trip, the successes of ``q`` acknowledged in the dequeue's own call."""
        b, o, pages = self.ctx.broker, self.opts, self.p.pages()
        call = b.dequeue(q, count, o.lease_ms, token, self.name, o.version_code, pages)
        batch = self.p.writer.take()
        if not batch:
            return await self.ctx.exec.run(call)

        def merged(dones: Sequence[Done]) -> Call[tuple[list[Any], Dequeued]]:
            return b.done_dequeue(q, dones, count, o.lease_ms, token, self.name, o.version_code, pages)

        return await self.p.writer.write_with(batch, (q, merged, call))

    async def _token_order(self) -> Iterator[str]:
        """Fetching by token: the queues to dequeue, one at a time as the fetch asks (the first
        of the race, O(log n): ``QueueOrder.next_candidate``), after a look at the fresh ones and a
        poll of the wake lists when it is due."""
        if self._queues.fresh:
            await self._look_fresh()
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._poll_due(now):
            self._polled = now
            await self._poll(now)
        return self._queues.each_candidate(loop.time)

    def _poll_due(self, now: float) -> bool:
        """Whether this fetch polls the other queues' wake lists: while busy with the queues known
        to have tasks (at every fetch for a few queues, at most every :data:`EMPTY_RECHECK` s for
        more), after the idle wait took a token (others may be waiting: at most as often), and,
        whenever the backlog is under the free slots, after a poll that took all it asked for
        (which also spaces the polls for the others tenfold: tokens abound, the backlog it took
        keeps the server busy, and the top-up poll comes as it runs low)."""
        backlog, served = self._queues.backlog, len(self._queues.queues)
        if len(backlog) >= served:
            return False
        if self._more and len(backlog) < self._batch():
            return True  # (a top-up: _take_count takes a whole share)
        every = max(EMPTY_RECHECK, 2 * served / POLL_LISTS_PER_S) * (10 if self._more else 1)
        due = now - self._polled >= every
        if self._burst and not backlog:
            return True  # (else the next idle wait names every list again for one token)
        return bool(backlog) and (served <= POLL_EVERY_FETCH or due) or self._woke and due

    def _take_count(self) -> int:
        """How many tokens a poll takes at most: a share, the free slots or K / :data:`TAKE_SHARE`
        queues, when the backlog runs under the free slots; else the backlog filled up to a share
        (one at least: a busy server still notices the other queues)."""
        share, backlog = max(self._batch(), -(-len(self._queues.queues) // TAKE_SHARE)), len(self._queues.backlog)
        return share if backlog < self._batch() else max(1, share - backlog)

    async def _look_fresh(self) -> None:
        """The queues new to this server (all of them at its start, then each a pattern brings
        in): with a version, those holding tasks set aside for a version up to this server's
        (by a worker of an older one; no wake token announces them) go into the backlog, so its
        dequeue takes them back (one pipelined ``ZRANGEBYSCORE ... LIMIT 0 1`` per queue, once)."""
        fresh = sorted(self._queues.fresh)
        self._queues.fresh.clear()
        version = self.opts.version_code
        if not version:
            return
        held = await self.ctx.exec.run_many([self.ctx.broker.version_held(q, version) for q in fresh])
        for q, any_held in zip(fresh, held):
            if any_held is not False:  # (a failed read too: look at the queue)
                self._queues.backlog.add(q)

    async def _poll(self, now: float) -> None:
        """Take, without blocking, the wake tokens of up to :meth:`_take_count` other queues (in
        the order of the weights) that have one, and count them among those known to have tasks
        (single server: one ``wake_take`` script call, lua/wake_take.lua)."""
        backlog = self._queues.backlog
        keys = self._wait_keys(now)
        if backlog:  # (at C speed: a poll of 10^4 queues passes over 2 x 10^4 lists)
            known = {k for q in backlog for k in self._keys_of[q]}
            keys = list(filterfalse(known.__contains__, keys))
        n = self._take_count()
        self._woke = self._burst = False
        self._in_call = True  # (not cancelled in flight: its reply is tokens)
        try:
            taken = await self.ctx.exec.run(self.ctx.broker.wake_take(keys, n))
        finally:
            self._in_call = False
        self._more = len(taken) >= n
        for i in taken:
            q = self._wake_keys[keys[i]]
            self._queues.woken(q, by_dequeue=False)
            backlog.add(q)

    def _wait_keys(self, now: float) -> list[str]:
        """The wake lists in the order a token is taken from them (BLPOP pops the first list, in
        argument order, that has one; wake_take takes them in that order): by weight, or a
        weighted-random order drawn at most every :data:`EMPTY_RECHECK` s, or every
        2K / :data:`POLL_LISTS_PER_S` s past 1 000 queues (O(K log K) each: paced as the polls are,
        so a long start over many queues does not redraw it O(K) times)."""
        every = max(EMPTY_RECHECK, 2 * len(self._queues.queues) / POLL_LISTS_PER_S)
        if self._key_order is None or (not self._queues.strict and now - self._key_drawn >= every):
            self._key_drawn = now
            ranked = self._queues.ranked(self._queues.queues)
            self._key_order = list(chain.from_iterable(map(self._keys_of.__getitem__, ranked)))
        return self._key_order

    # -- the idle wait: _wait_for_work -> _block or _wait_riding -> _woken ----------------------------------

    async def _wait_for_work(self, count: int) -> None:
        """Block until a wake token arrives. On plain Redis the first queue's dequeue rides in the
        same round trip (see :mod:`asynqpy.worker.wake`)."""
        now = asyncio.get_running_loop().time()
        timeout = self._idle_timeout(now)
        if self._queues.limited and timeout < SHORT_WAIT:
            # Redis times a blocked BLPOP out only every ~100 ms: sleep here
            await self.ctx.sleep(timeout)
            return
        if self._waiter is None:
            fired = await self._block(now, timeout)
            await self._woken(fired, None, None)
        else:
            fired, tried, acted = await self._wait_riding(self._waiter, now, timeout, count)
            await self._woken(fired, tried, acted)
        # a token at once: more wait; the next fetch polls for them (issue 45: not a BLPOP of all a token)
        self._burst = fired is not None and asyncio.get_running_loop().time() - now < BURST_WAIT

    def _idle_timeout(self, now: float) -> float:
        """How long the idle wait lasts at most: ``idle_timeout``, or until the scan's next queue is
        due (by token: a token may have been lost), or a queue's limits let a task through again."""
        timeout = self.opts.idle_timeout
        if self._by_token():
            timeout = min(timeout, max(0.01, self._queues.scan_in(now)))
        if self._queues.limited:
            timeout = self._queues.wait_timeout(timeout, now)
        return timeout

    async def _block(self, now: float, timeout: float) -> str | None:
        """The idle wait without the pipelined wait: a BLPOP of the wake lists of the queues
        reachable (and of this fetcher's stop list); the wake list that fired, if any."""
        keys = [k for k in self._wait_keys(now) if not self._queues.is_down(self._wake_keys[k], now)]
        timeout = self._queues.next_up(timeout, now)  # or when an unreachable queue is due again
        if not keys:  # every queue's master is unreachable
            await self.ctx.sleep(timeout)
            return None
        if self._stop_key is None:
            got = await self.ctx.blpop_any(keys, timeout)
            return got[0] if got else None
        self._in_wait = True  # (_stop ends it with a push to the stop list, never a cancel)
        try:
            got = await self.ctx.blpop_any([*keys, self._stop_key], timeout)
        finally:
            self._in_wait = False
        return got[0] if got and got[0] != self._stop_key else None

    def _riding_queue(self, count: int) -> str | None:
        """The queue whose dequeue rides with the idle wait, if any: worth it when it is likely the
        queue that fires (a few queues); with many, the token says which queue to dequeue next.
        Not with a clock that tells scripts its time (a FakeClock): the call is built before the
        wait, so a clock moved during it would lease the task at the time before the move."""
        if count > 0 and len(self._queues.queues) <= FEW_QUEUES and not self.ctx.clock.script_now():
            return self._queues.first()
        return None

    async def _wait_riding(self, waiter: PipelinedWait, now: float, timeout: float,
                           count: int) -> tuple[str | None, str | None, str | None]:
        """The pipelined idle wait, a dequeue riding with it: (the wake list that fired, the queue
        the dequeue tried, that queue again if it took tasks)."""
        # (the free slots again: a resize down while this fetch's dequeue was in flight)
        count = min(count, self.p.concurrency - len(self.executing))
        tried = self._riding_queue(count)
        token = secrets.token_hex(4)
        self._in_wait = True
        self._riding = count if tried is not None else 0
        try:
            fired, res, lease_from = await waiter.wait(
                self._wait_keys(now), timeout,
                self.ctx.broker.dequeue(tried, count, self.opts.lease_ms, token, self.name, self.opts.version_code,
                                        self.p.pages()) if tried is not None else None)
        finally:
            self._in_wait = False
            self._riding = 0
        if tried is None or res is None:
            return fired, tried, None
        self._took(tried, res, token, lease_from)
        return fired, tried, tried if res.tasks else None

    async def _woken(self, fired: str | None, tried: str | None, acted: str | None) -> None:
        """After the idle wait: the queue whose wake list ``fired`` is owed the next dequeue unless the
        dequeue that rode with the wait took its tasks (``acted``), or its token goes back (no slot, stopping)."""
        if fired is None:
            self._queues.empty.clear()
            return
        owed = self._wake_keys[fired]
        self._woke = True
        self._queues.woken(owed, by_dequeue=owed == tried)
        if owed == acted:
            return  # the dequeue that rode with the wait took tasks of the queue whose token it was
        if len(self.executing) < self.p.concurrency and not self.ctx.stopping.is_set() and not self.p.quiet:
            self._queues.owed = owed  # the next dequeue goes to the queue whose token this was
        else:
            await self._hand_back(owed)

    async def _hand_back(self, queue: str) -> None:
        """Put back the wake token of ``queue``, which this server took but will not act on (its
        slots are full, or it is stopping): other servers of that queue must not sleep through
        its tasks until their idle timeout."""
        self._in_call = True
        try:
            await self.ctx.exec.run(self.ctx.broker.rewake(queue))
        except REDIS_ERRORS as exc:
            self.ctx.health.failed(f"handing back the wake token of queue {queue}", exc)
        finally:
            self._in_call = False

    async def _hand_back_many(self, queues: Sequence[str]) -> None:
        """Put back the wake tokens of ``queues`` (as :meth:`_hand_back`; one pipeline)."""
        self._in_call = True
        try:
            results = await self.ctx.exec.run_many([self.ctx.broker.rewake(q) for q in queues])
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise failed[0]
        except REDIS_ERRORS as exc:
            self.ctx.health.failed(f"handing back the wake tokens of {len(queues)} queues", exc)
        finally:
            self._in_call = False

    def _took(self, q: str, res: Dequeued, token: str, lease_from: float, sent_ms: int | None = None) -> bool:
        """Record a dequeue's result and start its tasks; True if there were any. ``sent_ms``: this
        host's time when the dequeue was sent, for the clock's offset; None for the dequeue that rode
        with an idle wait, whose reply may have been read late (a busy loop): a sample whose round
        trip is unknown would set the offset off by that delay, so it is not taken."""
        if sent_ms is not None:
            self.ctx.clock.observe(res.now_ms, sent_ms)
        self._left_behind = res.remaining > 0 and bool(res.tasks) and not res.wait_ms
        self._queues.took(q, res, asyncio.get_running_loop().time())
        if res.tasks and self.p.dequeued is not None:
            self.p.dequeued(q)
        start, lease_until = self.p.start, lease_from + self.opts.lease
        procs = res.procs
        for id, raw in res.tasks:
            start(q, id, raw, token, res.now_ms, lease_until, procs.get(id) if procs else None)
        return bool(res.tasks)
