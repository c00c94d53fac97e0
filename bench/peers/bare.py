# requires: redis[hiredis]
"""The bare reference: redis-py LPUSH to enqueue, a BRPOP loop to consume (one connection, one
task at a time, no lease, no retry, no guarantees). Every figure of the suite can be read as a
fraction of what Redis and Python allow on this machine."""

from __future__ import annotations

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import redis
from common import Board, begin, emit, pace

CONFIG = __doc__
KEY = "bare:bench"


def main() -> None:
    a = begin("bare LPUSH/BRPOP", f"redis-py {redis.__version__}", CONFIG, one_process=False, redis_write=True)
    r = redis.Redis.from_url(a.url)
    r.ping()
    board = Board(a.board) if a.board else None
    if a.command == "enqueue":
        t = time.perf_counter()
        if a.mode == "single":
            for i in range(a.n):
                r.lpush(KEY, i)
        else:
            for start in range(0, a.n, 1000):
                pipe = r.pipeline(transaction=False)
                for i in range(start, min(a.n, start + 1000)):
                    pipe.lpush(KEY, i)
                pipe.execute()
        emit({"seconds": time.perf_counter() - t})
    elif a.command == "produce":
        assert board is not None
        if a.delay_s > 0:
            raise SystemExit("the bare loop has no scheduling")
        pace(a.n, a.interval_ms, lambda i: r.lpush(KEY, i), board)
        emit({})
    elif a.command == "worker":
        assert board is not None
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while not stop:
            item = r.brpop([KEY], timeout=1)
            if item:
                board.hit(item[1])
                if a.redis_write:
                    r.incr("bench:writes")


if __name__ == "__main__":
    main()
