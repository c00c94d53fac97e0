"""A payment as a durable process (docs/processes.md): init -> authorize -> capture, an expiry
timer, a refund, and a repair after a payment-provider outage.

Run it against a Redis (it starts its own worker in this process):

    python examples/payment.py [redis://localhost:6379/0]

then look at what it left: ``asynqpy process ls`` and ``asynqpy process inspect pay-1``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from asynqpy import AsyncClient, Input, Inspector, Process, ServeMux, Server, Step, TaskFailedError

URL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ASYNQPY_REDIS_URL", "redis://localhost:6379/0")
QUEUE = "payments"
mux = ServeMux()
provider_down = False  # flip to simulate an outage of the payment provider


@mux.process("payment")
def payment(p: Process, i: Input) -> Step | None:
    """Every input of one payment runs here, one at a time, with the state the last one left."""
    s = dict(p.state or {})
    if i.kind == "init":
        state = {"amount": i.args["amount"], "status": "new", "refunded": 0}
        return Step(events=[{"created": i.args["amount"]}], state=state, timer=i.args.get("expires_in", 900))
    if i.kind == "timeout":  # not authorized in time
        s["status"] = "expired"
        return Step(events=["expired"], state=s, timer=None)
    if i.kind == "repair":  # an operator checked the provider: the process may go on
        return Step(events=[{"repaired": i.args}], response="repaired")
    op = i.args["op"]
    if op == "authorize":
        if provider_down:
            raise ConnectionError("payment provider unreachable")
        s["status"] = "authorized"
        return Step(events=["authorized"], state=s, response="authorized")
    if op == "capture":
        if s["status"] != "authorized":
            return Step(response=f"cannot capture a {s['status']} payment")  # nothing changes
        s["status"] = "captured"
        return Step(events=["captured"], state=s, timer=None, response="captured")  # no expiry any more
    if op == "refund":
        s["refunded"] += i.args["amount"]
        return Step(events=[{"refunded": i.args["amount"]}], state=s, response=s["amount"] - s["refunded"])
    raise ValueError(f"unknown operation {op!r}")


async def main() -> None:
    global provider_down
    server = Server(URL, queues=[QUEUE])
    worker = asyncio.create_task(server.arun(mux))
    client = AsyncClient(URL)
    try:
        for pid in ("pay-1", "pay-2"):
            await client.remove_process(pid, queue=QUEUE)  # a fresh run (removal waits its turn)
        await client.start_process("payment", "pay-1", {"amount": 100}, queue=QUEUE)
        await client.start_process("payment", "pay-2", {"amount": 5, "expires_in": 0.5}, queue=QUEUE)

        provider_down = True
        try:
            await client.call_process("pay-1", {"op": "authorize"}, queue=QUEUE, timeout=10, max_retry=0)
        except TaskFailedError as exc:
            print("authorize failed:", exc)
        with Inspector(URL) as insp:
            p = insp.process(QUEUE, "pay-1")
            print("pay-1 is", p.status, "-", p.error)
        provider_down = False
        print("repair:", await client.repair_process("pay-1", {"ticket": "OPS-7"}, queue=QUEUE, timeout=10))
        print("authorize:", await client.call_process("pay-1", {"op": "authorize"}, queue=QUEUE, timeout=10))
        print("capture:", await client.call_process("pay-1", {"op": "capture"}, queue=QUEUE, timeout=10))
        print("left after refund:", await client.call_process("pay-1", {"op": "refund", "amount": 30},
                                                               queue=QUEUE, timeout=10))
        with Inspector(URL) as insp:
            while insp.process(QUEUE, "pay-2").state.get("status") != "expired":
                await asyncio.sleep(0.05)
            for pid in ("pay-1", "pay-2"):
                p = insp.process(QUEUE, pid)
                print(f"{pid}: {p.status}, state {p.state}")
                for e in p.history:
                    print(f"  #{e.id} {e.kind:7} {e.data}")
    finally:
        await client.close()
        server.stop()
        await worker


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
