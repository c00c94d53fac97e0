"""The errors of durable functions (re-exported by :mod:`.replay`, where they were first)."""

from __future__ import annotations

from ..model.errors import AsynqpyError, SkipRetry


class DurableError(AsynqpyError):
    """A durable run cannot go on: its code no longer matches its history, or it is misused."""


class DeterminismError(DurableError, SkipRetry):
    """The function, replayed, asked for another operation than the one its history holds at
    that position (new code deployed under a running run, or code that is not deterministic). The
    input is archived at once and the run's process is marked ``error``; nothing ran."""


class StepFailedError(DurableError):
    """Raised inside a durable function by ``await ctx.step(...)`` whose step failed for good
    (its retries spent): ``step`` (its name), ``error`` (the last attempt's error, as text),
    ``error_type`` (its exception's class name). The function may catch it."""

    def __init__(self, step: str, error: str, error_type: str) -> None:
        super().__init__(f"step {step!r} failed: {error}")
        self.step, self.error, self.error_type = step, error, error_type


class RunFailedError(DurableError):
    """``client.result(run)`` of a run that failed (the function raised), was cancelled, or
    stopped in ``error`` (see :class:`DeterminismError`): ``status`` says which."""

    def __init__(self, run: str, status: str, error: str) -> None:
        super().__init__(f"durable run {run!r} {status}: {error}")
        self.run, self.status, self.error = run, status, error


__all__ = ["DeterminismError", "DurableError", "RunFailedError", "StepFailedError"]
