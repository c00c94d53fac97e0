"""The app bench/start.py starts: one handler that records on the shared board (bench/common.py)
that the worker ran its first task (board path in $ASYNQPY_BENCH_BOARD). bench/ is on its path (PYTHONPATH)."""

from __future__ import annotations

import os

from common import Board

from asynqpy import ServeMux, Task

board = Board(os.environ["ASYNQPY_BENCH_BOARD"])
mux = ServeMux()


@mux.handle("start")
async def start(task: Task) -> None:
    board.hit(0)
