"""Handlers for the demo (``bash scripts/demo``): a small shop's background jobs.

Run a worker for them from the repository root with::

    asynqpy worker examples.demo_tasks:mux --queues critical=6,default=3,low=1

Each handler sleeps a little to look like real work, logs what it did, and some fail on purpose so
the demo shows retries, the archive and SkipRetry:

==================  ========  ==============================================================
type                queue     behaviour
==================  ========  ==============================================================
payment:capture     critical  succeeds (async)
email:deliver       default   succeeds (async)
image:resize        low       succeeds (a plain ``def``: runs on the server's thread pool)
report:generate     default   succeeds and stores a result (enqueued with ``retention``)
reminder:send       default   succeeds (enqueued with ``process_in``: runs a few seconds later)
digest:daily        default   succeeds (enqueued ``unique``: a duplicate is rejected)
webhook:notify      default   the first attempt fails (endpoint "times out"), the retry succeeds
sms:send            low       always fails (provider down): archived once retries run out
inventory:sync      low       always fails (warehouse API down): waits in retry for a long time
order:validate      critical  raises SkipRetry (the order is invalid): archived at once
==================  ========  ==============================================================
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from asynqpy import ServeMux, SkipRetry, Task

log = logging.getLogger("demo.tasks")

mux = ServeMux()


async def _work(low: float, high: float) -> None:
    await asyncio.sleep(random.uniform(low, high))


@mux.handle("payment:capture")
async def capture_payment(task: Task) -> None:
    p = task.payload
    await _work(0.05, 0.15)
    log.info("captured payment of %.2f %s for order %s", p["amount"], p["currency"], p["order"])


@mux.handle("email:deliver")
async def deliver_email(task: Task) -> None:
    p = task.payload
    await _work(0.05, 0.3)
    log.info("delivered email %r to %s", p["template"], p["to"])


@mux.handle("image:resize")
def resize_image(task: Task) -> None:
    # A plain (blocking) function: asynqpy runs it on its bounded thread pool.
    p = task.payload
    time.sleep(random.uniform(0.1, 0.3))
    log.info("resized %s to %dx%d", p["src"], p["width"], p["height"])


@mux.handle("report:generate")
async def generate_report(task: Task) -> dict[str, object]:
    p = task.payload
    task.progress("querying")
    await _work(0.2, 0.4)
    rows = random.randint(500, 5000)
    task.progress(f"writing {rows} rows")
    log.info("generated %s report for %s (%d rows)", p["kind"], p["month"], rows)
    return {"rows": rows, "url": f"s3://reports/{p['kind']}-{p['month']}.csv"}  # the result


@mux.handle("reminder:send")
async def send_reminder(task: Task) -> None:
    p = task.payload
    await _work(0.02, 0.05)
    log.info("sent reminder to user %s: %s", p["user"], p["text"])


@mux.handle("digest:daily")
async def daily_digest(task: Task) -> None:
    p = task.payload
    await _work(0.05, 0.1)
    log.info("sent the daily digest to user %s", p["user"])


@mux.handle("webhook:notify")
async def notify_webhook(task: Task) -> None:
    p = task.payload
    await _work(0.02, 0.05)
    if task.retry_count == 0:
        raise ConnectionError(f"POST {p['url']}: endpoint timed out")
    log.info("webhook %s accepted event %s (attempt %d)", p["url"], p["event"], task.retry_count + 1)


@mux.handle("sms:send")
async def send_sms(task: Task) -> None:
    await _work(0.02, 0.05)
    raise RuntimeError(f"SMS provider unavailable (to {task.payload['to']}, attempt {task.retry_count + 1})")


@mux.handle("inventory:sync")
async def sync_inventory(task: Task) -> None:
    await _work(0.02, 0.05)
    raise RuntimeError(f"warehouse {task.payload['warehouse']} API returned 503")


@mux.handle("order:validate")
async def validate_order(task: Task) -> None:
    p = task.payload
    await _work(0.01, 0.03)
    if p["quantity"] <= 0:
        raise SkipRetry(f"order {p['order']} has quantity {p['quantity']}: retrying cannot fix it")
    log.info("order %s is valid", p["order"])
