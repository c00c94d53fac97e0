"""The demo's producer (run by ``bash scripts/demo``): enqueues a mixed workload, then waits until the
worker has settled it and shows where the tasks ended up.

    python examples/demo_producer.py --redis-url redis://127.0.0.1:PORT/0 [--timeout 15]

Exit status: 0 when every task reached its expected final state in time, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import redis

from asynqpy import Client, DuplicateTaskError, Inspector, TaskInfo
from asynqpy.core.spine.keys import SERVERS

QUEUES = ("critical", "default", "low")

# What the workload below leaves behind once settled (see examples/demo_tasks.py):
EXPECTED = {
    "completed": 1,  # report:generate, kept with its result (retention)
    "retry": 1,  # inventory:sync, next retry in an hour
    "archived": 3,  # 2 x sms:send (max_retry=1) + order:validate (SkipRetry)
}


def say(text: str = "") -> None:
    print(text, flush=True)


def wait_for_worker(url: str, timeout: float) -> None:
    """Wait until a worker has registered its heartbeat (so the demo shows it picking tasks up)."""
    r = redis.Redis.from_url(url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if r.zcount(SERVERS, int(time.time() * 1000), "+inf") > 0:
                return
            time.sleep(0.1)
    finally:
        r.close()
    sys.exit(f"no worker registered within {timeout:.0f}s")


def enqueue_workload(c: Client) -> dict[str, TaskInfo]:
    keep: dict[str, TaskInfo] = {}

    say("  immediate tasks:")
    infos = c.enqueue_many(
        [("payment:capture", {"order": f"A-10{i}", "amount": 19.99 + 10 * i, "currency": "EUR"}) for i in range(4)],
        queue="critical",
    )
    say(f"    {len(infos)} x payment:capture  -> critical (one pipelined enqueue_many)")
    emails = [("welcome", "ada@example.com"), ("receipt", "grace@example.com"), ("receipt", "linus@example.com"),
              ("password-reset", "ken@example.com"), ("newsletter", "barbara@example.com"),
              ("welcome", "dennis@example.com")]
    for template, to in emails:
        c.enqueue("email:deliver", {"template": template, "to": to})
    say(f"    {len(emails)} x email:deliver    -> default")
    for i, (w, h) in enumerate([(1024, 768), (640, 480), (320, 240), (128, 128)]):
        c.enqueue("image:resize", {"src": f"uploads/photo-{i}.jpg", "width": w, "height": h}, queue="low")
    say("    4 x image:resize     -> low (a sync handler: runs on the thread pool)")
    c.enqueue("order:validate", {"order": "A-200", "quantity": 2}, queue="critical")
    say("    1 x order:validate   -> critical (a valid order)")

    keep["report"] = c.enqueue("report:generate", {"kind": "sales", "month": "2024-05"}, retention=600)
    say("    1 x report:generate  -> default, retention=600s (stays in 'completed' with its result)")

    say("  delayed tasks:")
    for user, delay in (("u-7", 2.0), ("u-8", 3.0)):
        info = c.enqueue("reminder:send", {"user": user, "text": "your cart is waiting"}, process_in=delay)
        due = info.next_process_at.strftime("%H:%M:%S.%f")[:-3] if info.next_process_at else "?"
        say(f"    reminder:send for {user}: {info.state.value}, due at {due} UTC (in {delay:.0f}s)")

    say("  a unique task, enqueued twice:")
    digest: dict[str, Any] = {"user": 42}
    c.enqueue("digest:daily", digest, unique=60, process_in=2.0)
    say("    digest:daily for user 42 (unique=60s, in 2s): accepted")
    try:
        c.enqueue("digest:daily", digest, unique=60, process_in=2.0)
        say("    digest:daily for user 42 again: accepted (UNEXPECTED)")
    except DuplicateTaskError as exc:
        say(f"    digest:daily for user 42 again: rejected: DuplicateTaskError: {exc}")

    say("  tasks that fail:")
    for i in range(3):
        c.enqueue("webhook:notify", {"url": f"https://hooks.example.com/{i}", "event": f"order.paid#{i}"},
                  retry_delay=1)
    say("    3 x webhook:notify   -> default: fail once, succeed on the retry 1s later")
    for to in ("+15550100", "+15550101"):
        keep.setdefault("sms", c.enqueue("sms:send", {"to": to, "text": "your code is 1234"}, queue="low",
                                         max_retry=1, retry_delay=1))
    say("    2 x sms:send         -> low: always fail; max_retry=1, so archived after 2 attempts")
    keep["inventory"] = c.enqueue("inventory:sync", {"warehouse": "berlin-1"}, queue="low", max_retry=5,
                                  retry_delay=3600)
    say("    1 x inventory:sync   -> low: always fails; retry_delay=3600s, so it waits in 'retry'")
    keep["invalid"] = c.enqueue("order:validate", {"order": "A-201", "quantity": 0}, queue="critical")
    say("    1 x order:validate   -> critical: invalid, the handler raises SkipRetry (archived at once)")
    return keep


def totals(insp: Inspector) -> dict[str, int]:
    rows = [s for s in insp.all_stats() if s.queue in QUEUES]
    keys = ("pending", "active", "scheduled", "retry", "archived", "completed", "processed", "failed")
    return {k: sum(getattr(s, k) for s in rows) for k in keys}


def settled(t: dict[str, int]) -> bool:
    return (t["pending"] == t["active"] == t["scheduled"] == 0
            and all(t[k] == v for k, v in EXPECTED.items()))


def wait_until_settled(insp: Inspector, timeout: float) -> bool:
    start = time.monotonic()
    last: tuple[int, ...] | None = None
    last_print = 0.0
    while True:
        t = totals(insp)
        now = time.monotonic()
        done = settled(t)
        snap = tuple(t.values())
        if done or (snap != last and now - last_print >= 0.5):
            say(f"  t={now - start:4.1f}s  " + "  ".join(f"{k}={v}" for k, v in t.items()))
            last, last_print = snap, now
        if done:
            return True
        if now - start > timeout:
            say(f"  not settled after {timeout:.0f}s; expected pending=active=scheduled=0 and {EXPECTED}")
            return False
        time.sleep(0.1)


def show_results(insp: Inspector, keep: dict[str, TaskInfo]) -> None:
    rep = insp.task_info("default", keep["report"].id)
    say(f"  report:generate {rep.id[:8]}: {rep.state.value}, result={rep.result}")
    inv = insp.task_info("low", keep["inventory"].id)
    say(f"  inventory:sync  {inv.id[:8]}: {inv.state.value}, retried={inv.retried}, "
        f"next attempt {inv.next_process_at:%H:%M:%S} UTC, last error: {inv.last_error}")
    sms = insp.task_info("low", keep["sms"].id)
    say(f"  sms:send        {sms.id[:8]}: {sms.state.value}, retried={sms.retried}, last error: {sms.last_error}")
    bad = insp.task_info("critical", keep["invalid"].id)
    say(f"  order:validate  {bad.id[:8]}: {bad.state.value}, last error: {bad.last_error}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the tasks to settle")
    args = ap.parse_args()

    wait_for_worker(args.redis_url, 15.0)
    with Client(args.redis_url) as client:
        keep = enqueue_workload(client)
    insp = Inspector(args.redis_url)
    try:
        say("waiting for the worker to settle the tasks (counts summed over the three queues):")
        if not wait_until_settled(insp, args.timeout):
            return 1
        say("where some tasks ended up:")
        show_results(insp, keep)
        say("a result without polling: Client.call enqueues and waits for it, with the handler's progress:")
        with Client(args.redis_url) as client:
            result = client.call("report:generate", {"kind": "refunds", "month": "2024-06"}, timeout=10,
                                 on_progress=lambda value: say(f"    progress: {value}"))
        say(f"    result: {result}")
        say("its lifecycle events (asynqpy events shows every queue's):")
        for e in list(insp.events("default"))[-4:]:
            say(f"    {e.time:%H:%M:%S.%f}"[:-3] + f"  {e.event:<9} {e.task_id[:8]} {e.type}")
    finally:
        insp.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
