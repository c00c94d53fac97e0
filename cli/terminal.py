"""Keyboard input for the dashboard: the terminal in raw (non-canonical, no echo) mode, and a
non-blocking reader that turns bytes into key names.

:class:`KeyDecoder` is pure (bytes in, key names out) so it can be tested without a terminal;
:class:`RawKeys` owns the terminal settings and restores them on any exit.
"""

from __future__ import annotations

import codecs
import os
import select
import termios
from types import TracebackType
from typing import IO, Any

ESC = "\x1b"
ESC_WAIT = 0.05
"""How long a lone ESC byte waits for the rest of an escape sequence before it counts as Esc."""

_SEQUENCES = {
    "[A": "up", "[B": "down", "[C": "right", "[D": "left",
    "OA": "up", "OB": "down", "OC": "right", "OD": "left",
    "[H": "home", "[F": "end", "OH": "home", "OF": "end", "[1~": "home", "[4~": "end",
    "[5~": "pageup", "[6~": "pagedown",
}
_SINGLE = {"\r": "enter", "\n": "enter", "\x7f": "backspace", "\x08": "backspace", "\t": "tab",
           "\x03": "ctrl-c", "\x0c": "ctrl-l", "\x04": "ctrl-d"}


class KeyDecoder:
    """Bytes from a terminal -> key names: printable characters as themselves ("q", "?", "1"),
    others as names ("up", "enter", "esc", "ctrl-c", ...). An escape sequence split across reads is
    kept until the rest arrives; :meth:`flush` turns a lone pending ESC into "esc"."""

    def __init__(self) -> None:
        self._buf = ""
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    @property
    def pending(self) -> bool:
        """True when the input ends inside a possible escape sequence."""
        return bool(self._buf)

    def feed(self, data: bytes) -> list[str]:
        self._buf += self._utf8.decode(data)  # a character split across reads waits for its rest
        keys: list[str] = []
        while self._buf:
            ch = self._buf[0]
            if ch != ESC:
                self._buf = self._buf[1:]
                name = _SINGLE.get(ch)
                if name is not None:
                    keys.append(name)
                elif ch.isprintable():
                    keys.append(ch)
                continue
            rest = self._buf[1:]
            if not rest:
                break  # maybe the start of a sequence: wait for more (or flush)
            if rest[0] not in "[O":
                keys.append("esc")  # ESC then an ordinary key (e.g. Alt-x): take ESC alone
                self._buf = rest
                continue
            end = _sequence_end(rest)
            if end is None:
                break  # incomplete sequence
            seq, self._buf = rest[:end], rest[end:]
            name = _SEQUENCES.get(seq)
            if name is not None:
                keys.append(name)
        return keys

    def flush(self) -> list[str]:
        """Whatever is pending, as keys: a lone ESC is the Esc key; a cut sequence is dropped."""
        keys = ["esc"] if self._buf == ESC else []
        self._buf = ""
        return keys


def _sequence_end(rest: str) -> int | None:
    """Length of the CSI/SS3 sequence at the start of ``rest`` ("[A", "[5~", "OB"), None if cut."""
    if rest[0] == "O":
        return 2 if len(rest) >= 2 else None
    for i in range(1, len(rest)):
        if "\x40" <= rest[i] <= "\x7e":  # a CSI final byte
            return i + 1
    return None


class RawKeys:
    """Context manager: puts the terminal on ``stream`` into raw mode (no echo, no line buffering,
    no flow control) and restores its settings on exit, whatever the exit. Output processing and
    signals stay on: Ctrl-C still raises KeyboardInterrupt, so a blocked call is interrupted at once;
    the suspend key is disabled (a suspended dashboard would leave the terminal raw)."""

    def __init__(self, stream: IO[str]) -> None:
        self.fd = stream.fileno()
        self._saved: list[Any] | None = None
        self.decoder = KeyDecoder()

    def __enter__(self) -> RawKeys:
        self._saved = termios.tcgetattr(self.fd)
        attrs = termios.tcgetattr(self.fd)
        attrs[0] &= ~(termios.IXON | termios.ICRNL)                      # iflag
        attrs[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN)    # lflag
        cc = attrs[6]
        cc[termios.VMIN] = 1
        cc[termios.VTIME] = 0
        cc[termios.VSUSP] = bytes([os.fpathconf(self.fd, "PC_VDISABLE") & 0xFF])
        termios.tcsetattr(self.fd, termios.TCSAFLUSH, attrs)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.restore()

    def restore(self) -> None:
        """Put the terminal settings back as they were (idempotent)."""
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSAFLUSH, self._saved)
            self._saved = None

    def read(self, timeout: float) -> list[str]:
        """Keys typed within ``timeout`` seconds (returns as soon as any arrive; [] if none)."""
        return read_keys(self.fd, self.decoder, timeout)


def read_keys(fd: int, decoder: KeyDecoder, timeout: float) -> list[str]:
    """Wait up to ``timeout`` for input on ``fd`` and decode what is there. A lone ESC waits
    :data:`ESC_WAIT` for the rest of its sequence and otherwise counts as the Esc key."""
    keys: list[str] = []
    wait = max(0.0, timeout)
    poller = select.poll()  # (not select.select: it refuses a descriptor past 1 023)
    poller.register(fd, select.POLLIN)
    while True:
        ready = poller.poll(wait * 1000)
        if not ready:
            return keys + decoder.flush() if decoder.pending else keys
        data = os.read(fd, 1024)
        if not data:  # end of input: nothing more will come
            return keys + ["eof"]
        keys += decoder.feed(data)
        if not decoder.pending:
            return keys
        wait = ESC_WAIT

