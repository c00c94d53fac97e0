"""Times and durations as people read them, the same in the CLI, the dashboard and the web
console (whose script, ``asynqpy/web/static/app.js``, has the same functions for its live
updates; tests/test_web_browser.py checks that they agree)."""

from __future__ import annotations

import math
from datetime import datetime, timezone


def _tenths(secs: float) -> str:
    """Seconds with one decimal, halves rounded up: the same arithmetic as the page's script
    (Python's format rounds an exact half to even, JavaScript's toFixed up)."""
    return f"{math.floor(secs * 10 + 0.5) / 10:.1f}s"


def duration(secs: float) -> str:
    """1.5s, 42s, 3m12s, 2h05m, 3d04h."""
    if secs < 10:
        return _tenths(secs)
    s = int(secs)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def latency(pending: int, seconds: float) -> str:
    """A queue's latency (age of its oldest pending task), the same in every command, the
    dashboard and the console: '-' when nothing is pending, seconds with one decimal under a
    minute (0.4s, 12.5s), then minutes, hours, days (3m12s, 2h05m, 3d04h, 12d): at most 5
    characters below 1000 days."""
    if not pending:
        return "-"
    secs = max(0.0, seconds)
    if secs < 59.95:
        return _tenths(secs)
    return duration(max(60.0, secs)) if secs < 10 * 86400 else f"{int(secs // 86400)}d"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """'12s ago', 'in 3m00s', '2h05m ago', '-' for None."""
    if when is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    secs = (when - now).total_seconds()
    text = duration(abs(secs))
    return f"in {text}" if secs > 0 else f"{text} ago"


def utc(when: datetime | None) -> str:
    """'2026-11-23 10:00:00 UTC', '-' for None."""
    return "-" if when is None else when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)
"""The bidirectional overrides and line separators :func:`visible` escapes (text reordered or
broken on a terminal)."""
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}
_CONTROLS.update({c: f"\\u{c:04x}" for c in BIDI})


def visible(text: str) -> str:
    """Stored text as it may reach a terminal (the CLI's output, the worker's text logs): every
    control character (C0 but newline and tab, DEL, C1) and bidirectional override shown as an
    escape (``\\x1b``, ``\\u202e``), so an escape sequence in a payload, an error or a log line
    cannot drive the terminal (issue 42). Idempotent."""
    return text.translate(_CONTROLS)
