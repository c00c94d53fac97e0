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


def kill_my_connection() -> None:
    """Opens this thread's connection, then has PostgreSQL end it (as a database restart or an idle
    timeout would) behind Django's back: Django still holds it as open and healthy."""
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s)", (pid,))


app.task(kill_my_connection)
