"""The project's tasks: found by the worker (settings.ASYNQPY has no "app": the one DjangoApp)."""

import os

from django.db import connection

from asynqpy.contrib.django import DjangoApp
from shop.models import Order

app = DjangoApp()
SEEN: list[bool] = []  # per task run in this process: was the thread's connection open when it started?


@app.task(retention=60)
def mark_paid(order_id: int) -> dict[str, object]:
    """Marks the order paid and answers what the worker saw (the row as committed, its process)."""
    SEEN.append(connection.connection is not None)
    order = Order.objects.get(pk=order_id)
    order.paid = True
    order.save()
    return {"paid": Order.objects.get(pk=order_id).paid, "note": order.note, "pid": os.getpid()}


@app.task
async def note(order_id: int, text: str) -> None:
    """An async task using the async ORM."""
    order = await Order.objects.aget(pk=order_id)
    order.note = text
    await order.asave()
