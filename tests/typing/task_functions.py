"""Checked by mypy --strict in tests/test_app.py: each line whose comment says "error" must be
reported, and no other line."""

from __future__ import annotations

from datetime import timedelta

from asynqpy import App, TaskInfo

app = App("memory://typing")


@app.task(queue="mail", max_retry=3)
async def send(user_id: int, lang: str = "en") -> str:
    return f"{user_id}:{lang}"


@app.task
def add(a: int, b: int) -> int:
    return a + b


info: TaskInfo = send.enqueue(1)
send.enqueue(1, lang="fr")
send.enqueue_in(timedelta(minutes=1), 2, "de")
send.enqueue_at(1_900_000_000, 3)
text: str = send.call(4)
total: int = add.call(1, 2)
direct: int = add(1, 2)
send.using(queue="urgent").enqueue(5)

send.enqueue("one")  # error: a str for an int
send.enqueue(1, language="fr")  # error: no such parameter
send.enqueue()  # error: user_id is missing
add.enqueue(1, 2, 3)  # error: too many arguments
wrong: str = add.call(1, 2)  # error: add returns an int
send.enqueue_in(1, "x")  # error: a str for an int
