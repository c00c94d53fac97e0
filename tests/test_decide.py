"""The outcome of an attempt (asynqpy/core/handlers/outcome.py ``decide``), as plain function calls: no
asyncio, no Redis. One test per branch of the decision, and the helpers it leans on (the error's
text, the traceback kept, a result's check, the archives of a refused message and of an outcome
that could not be recorded)."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import pytest

from asynqpy.core.handlers.outcome import (
    MAX_ERROR_TEXT,
    MAX_TRACEBACK,
    Action,
    Kind,
    Policy,
    check_result,
    decide,
    describe,
    format_traceback,
    quiet,
    refused,
    unrecorded,
)
from asynqpy.core.handlers.sandbox import SandboxedError
from asynqpy.core.model import codec
from asynqpy.core.model.codec import Message
from asynqpy.core.model.errors import HandlerNotFoundError, RateLimited, ResultError, SkipRetry, TaskTimeoutError
from asynqpy.core.model.task import Task
from asynqpy.core.processes.model import Refused

NOW = 1_700_000_000_000
MSG = Message(type="email", payload=b"x", max_retry=3, retried=0, reply_to="inbox1")


SEEN: list[tuple[int, BaseException, Task]] = []
"""What the last :func:`fixed` policy was given."""


def fixed(seconds: float) -> Policy:
    """A policy whose retry delay is always ``seconds`` (recording what it was given in SEEN)."""
    SEEN.clear()

    def delay(n: int, error: BaseException, task: Task) -> float:
        SEEN.append((n, error, task))
        return seconds

    return Policy(retry_delay=delay)


def boom() -> RuntimeError:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        return exc


# -- success ---------------------------------------------------------------------------------------------


def test_success_not_kept_is_a_batched_done() -> None:
    o = decide(MSG, Kind.PLAIN, None, NOW, Policy(), result={"ok": 1})
    assert o.action is Action.DONE and o.what == "done"
    assert o.msg is MSG and o.result == {"ok": 1}
    assert o.ended == (True, {"ok": 1}) and o.will_retry is None


def test_success_kept_completes_with_its_result_and_time() -> None:
    msg = MSG.with_(retention_ms=60_000)
    o = decide(msg, Kind.PLAIN, None, NOW, Policy(), result=42)
    assert o.action is Action.COMPLETE and o.what == "complete"
    assert o.msg.completed_at_ms == NOW and o.msg.result == 42 and o.msg.retention_ms == 60_000
    assert o.ended == (True, 42)


def test_success_of_a_targeted_run_ends_the_run() -> None:
    o = decide(MSG.with_(retention_ms=60_000), Kind.RUN, None, NOW, Policy(), result="r")
    assert o.action is Action.RUN_DONE and o.what == "run" and o.ended == (True, "r")
    assert o.msg.completed_at_ms == 0  # the run's end keeps the task's record itself


def test_success_of_a_process_input_commits_its_plan() -> None:
    o = decide(MSG, Kind.PROCESS, None, NOW, Policy(), result="authorized")
    assert o.action is Action.COMMIT and o.what == "complete" and o.msg is MSG
    assert o.ended == (True, "authorized")
    kept = decide(MSG.with_(retention_ms=1000), Kind.PROCESS, None, NOW, Policy(), result="authorized")
    assert kept.action is Action.COMMIT and kept.msg.completed_at_ms == NOW and kept.msg.result == "authorized"


# -- rate limited: not a failure -------------------------------------------------------------------------


def test_rate_limited_snoozes_without_counting_a_failure() -> None:
    policy = fixed(99)
    o = decide(MSG, Kind.PLAIN, RateLimited(2.5), NOW, policy)
    assert o.action is Action.SNOOZE and o.what == "snooze" and o.delay == 2.5
    assert o.msg is MSG and o.msg.retried == 0 and o.msg.last_error == ""
    assert o.ended is None and o.will_retry is None
    assert SEEN == []  # the retry policy is not asked


def test_rate_limited_targeted_run_is_given_back() -> None:
    o = decide(MSG, Kind.RUN, RateLimited(1), NOW, Policy())
    assert o.action is Action.RUN_GIVEN_BACK and o.what == "run" and o.ended is None and o.will_retry is None


def test_rate_limited_process_input_snoozes_too() -> None:
    assert decide(MSG, Kind.PROCESS, RateLimited(0), NOW, Policy()).action is Action.SNOOZE


# -- failure: retry ----------------------------------------------------------------------------------------


def test_failure_with_retries_left_is_retried_after_the_policy_delay() -> None:
    policy = fixed(7.0)
    error = boom()
    task = Task("email", _msg=MSG, id="t1")
    o = decide(MSG, Kind.PLAIN, error, NOW, policy, task=task)
    assert o.action is Action.RETRY and o.what == "retry" and o.delay == 7.0
    assert o.msg.retried == 1 and o.msg.last_error == "RuntimeError: boom" and o.msg.last_failed_at_ms == NOW
    assert "raise RuntimeError" in o.msg.traceback and o.error == "RuntimeError: boom"
    assert o.will_retry is True and o.ended is None and o.policy_error == ""
    assert SEEN == [(0, error, task)]


def test_the_tasks_own_retry_delay_wins_over_the_policy() -> None:
    policy = fixed(7.0)
    o = decide(MSG.with_(retry_delay_ms=1500), Kind.PLAIN, boom(), NOW, policy)
    assert o.action is Action.RETRY and o.delay == 1.5 and SEEN == []


def test_the_policy_is_given_a_task_when_none_is_passed() -> None:
    policy = fixed(1.0)
    decide(MSG.with_(retried=2), Kind.PLAIN, boom(), NOW, policy)
    [(n, _, task)] = SEEN
    assert n == 2 and task.type == "email"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1, "10", True, None])
def test_a_policy_returning_no_valid_delay_falls_back_to_the_default(bad: Any) -> None:
    o = decide(MSG, Kind.PLAIN, boom(), NOW, Policy(retry_delay=lambda n, e, t: bad))
    assert o.action is Action.RETRY and 7.5 <= o.delay <= 15.0  # the default for a first retry
    assert o.policy_error.startswith("ValueError: it returned")


def test_a_policy_that_raises_falls_back_to_the_default() -> None:
    def broken(n: int, e: BaseException, t: Task) -> float:
        raise KeyError("nope")

    o = decide(MSG, Kind.PLAIN, boom(), NOW, Policy(retry_delay=broken))
    assert o.action is Action.RETRY and 7.5 <= o.delay <= 15.0 and o.policy_error == "KeyError: 'nope'"


def test_an_unknown_type_is_retried_by_default() -> None:
    o = decide(MSG, Kind.PLAIN, HandlerNotFoundError("no handler for 'email'"), NOW, fixed(1))
    assert o.action is Action.RETRY and o.msg.retried == 1


def test_a_timeout_is_an_ordinary_failure() -> None:
    o = decide(MSG, Kind.PLAIN, TaskTimeoutError("ran past"), NOW, fixed(1))
    assert o.action is Action.RETRY and o.error == "TaskTimeoutError: ran past"


# -- failure: archive --------------------------------------------------------------------------------------


def test_no_retries_left_archives_and_says_so() -> None:
    o = decide(MSG.with_(retried=3), Kind.PLAIN, boom(), NOW, fixed(1))
    assert o.action is Action.ARCHIVE and o.what == "archive"
    assert o.why == " (no retries left: 3 of 3)" and o.msg.retried == 3
    assert o.ended == (False, "RuntimeError: boom") and o.will_retry is False
    assert o.mark_process and o.sign


def test_max_retry_zero_archives_the_first_failure() -> None:
    assert decide(MSG.with_(max_retry=0), Kind.PLAIN, boom(), NOW, fixed(1)).action is Action.ARCHIVE


@pytest.mark.parametrize("error", [SkipRetry("bad input"), ResultError("result too big")])
def test_skip_retry_and_a_bad_result_archive_at_once(error: BaseException) -> None:
    o = decide(MSG, Kind.PLAIN, error, NOW, fixed(1))
    assert o.action is Action.ARCHIVE and o.why == "" and o.msg.retried == 0


def test_an_unknown_type_is_archived_under_unknown_type_archive() -> None:
    o = decide(MSG, Kind.PLAIN, HandlerNotFoundError("no handler"), NOW, Policy(unknown_type="archive"))
    assert o.action is Action.ARCHIVE and o.why == ""
    exhausted = decide(MSG.with_(retried=3), Kind.PLAIN, HandlerNotFoundError("x"), NOW, Policy())
    assert exhausted.action is Action.ARCHIVE and exhausted.why == ""  # no "retries left" for a missing handler


def test_a_refused_process_input_does_not_mark_its_process() -> None:
    o = decide(MSG, Kind.PROCESS, Refused("the process is in error"), NOW, Policy())
    assert o.action is Action.ARCHIVE and not o.mark_process
    assert decide(MSG.with_(retried=3), Kind.PROCESS, boom(), NOW, Policy()).mark_process


# -- failure: a targeted run -------------------------------------------------------------------------------


def test_a_failed_run_counts_a_failure_and_lets_another_worker_run() -> None:
    o = decide(MSG, Kind.RUN, boom(), NOW, fixed(1))
    assert o.action is Action.RUN_FAILED and o.what == "run" and not o.final
    assert o.msg.last_error == "RuntimeError: boom" and o.msg.retried == 0  # the run's end counts it
    assert o.will_retry is True and o.ended == (False, "RuntimeError: boom")


def test_a_failed_run_with_no_retries_left_leaves_the_count_to_the_script() -> None:
    o = decide(MSG.with_(retried=3), Kind.RUN, boom(), NOW, fixed(1))
    assert o.action is Action.RUN_FAILED and not o.final


@pytest.mark.parametrize("error,policy", [(SkipRetry("no"), Policy()), (ResultError("big"), Policy()),
                                          (HandlerNotFoundError("x"), Policy(unknown_type="archive"))])
def test_a_run_failing_for_good_archives_its_task_at_once(error: BaseException, policy: Policy) -> None:
    o = decide(MSG, Kind.RUN, error, NOW, policy)
    assert o.action is Action.RUN_FAILED and o.final and o.will_retry is False


# -- the error's text and traceback --------------------------------------------------------------------------


def test_the_error_text_is_bounded() -> None:
    o = decide(MSG, Kind.PLAIN, RuntimeError("x" * 10_000), NOW, fixed(1))
    assert len(o.msg.last_error) == MAX_ERROR_TEXT and o.msg.last_error.startswith("RuntimeError: xxx")


def test_an_exception_whose_text_cannot_be_read_is_still_recorded() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    assert describe(Broken()) == "Broken: <the exception's text could not be read>"
    assert decide(MSG, Kind.PLAIN, Broken(), NOW, fixed(1)).action is Action.RETRY


def test_a_sandboxed_error_keeps_its_own_text_and_the_childs_traceback() -> None:
    error = SandboxedError("ValueError: in the child", remote_traceback="Traceback...\nValueError: in the child")
    o = decide(MSG, Kind.PLAIN, error, NOW, fixed(1))
    assert o.msg.last_error == "ValueError: in the child"
    assert o.msg.traceback == "Traceback...\nValueError: in the child"


def test_a_long_traceback_keeps_its_innermost_end() -> None:
    text = format_traceback(SandboxedError("E: x", remote_traceback="a" * 10_000 + "THE END"))
    assert text.startswith("...\n") and text.endswith("THE END") and len(text) == MAX_TRACEBACK + 4
    assert format_traceback(RuntimeError("never raised")) == "RuntimeError: never raised\n"


def test_quiet_errors_log_no_traceback() -> None:
    assert quiet(SkipRetry()) and quiet(TaskTimeoutError("t")) and quiet(HandlerNotFoundError("h"))
    assert not quiet(RuntimeError()) and not quiet(ResultError("r"))


# -- the archives that bypass the decision, and the result check -----------------------------------------------


def test_an_outcome_that_could_not_be_recorded_archives_with_the_reason() -> None:
    o = unrecorded(MSG.with_(result=object()), ValueError("unencodable"), NOW)
    assert o.action is Action.ARCHIVE and o.msg.result is None and o.msg.last_failed_at_ms == NOW
    assert o.msg.last_error == "asynqpy could not record this attempt's outcome: ValueError: unencodable"
    assert o.ended == (False, o.msg.last_error)


def test_a_refused_message_is_archived_unsigned() -> None:
    raw = codec.encode(MSG)
    o = refused(raw, "bad signature", NOW)
    assert o.action is Action.ARCHIVE and not o.sign and o.msg.type == "email" and o.msg.last_error == "bad signature"
    garbage = refused(b"\xff\x00not msgpack", "malformed", NOW)
    assert garbage.msg.type == "(malformed)" and garbage.msg.last_failed_at_ms == NOW


def test_check_result_refuses_what_cannot_be_stored() -> None:
    check_result({"a": [1, 2]}, 100)
    with pytest.raises(ResultError, match="over the server's max_result_bytes"):
        check_result("x" * 200, 100)
    with pytest.raises(ResultError):
        check_result(object(), 100)


def test_decide_needs_no_event_loop_nor_redis() -> None:
    """The module imports neither asyncio nor any I/O layer."""
    source = Path(__file__).resolve().parent.parent / "asynqpy" / "core" / "handlers" / "outcome.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not any(m.split(".")[0] in ("asyncio", "redis") or "redisio" in m or "worker" in m for m in imported)
