"""Single key presses from a terminal, without a TUI framework.

The terminal is put in cbreak mode (keys arrive one by one, unechoed; Ctrl-C still interrupts)
and a thread reads stdin. The previous terminal settings come back on close(), which the caller
runs on every way out, signals included. suspend() and resume() do the same around Ctrl-Z.
"""

from __future__ import annotations

import os
import select
import termios
import threading
import tty
from collections.abc import Callable
from typing import Any

ESC = "\x1b"


class KeyReader:
    def __init__(self, fd: int, on_key: Callable[[str], None]) -> None:
        self._fd = fd
        self._on_key = on_key
        self._saved: list[Any] | None = None
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        self.resume()
        self._thread = threading.Thread(target=self._read, name="keys", daemon=True)
        self._thread.start()

    def suspend(self) -> None:
        """Give the terminal its settings back (before stopping, or for good)."""
        if self._saved is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def resume(self) -> None:
        if self._saved is None:
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd, termios.TCSANOW)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.suspend()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=1)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _read(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._fd, self._wake_r], [], [])
            except (OSError, ValueError):
                return
            if self._wake_r in ready:
                return
            try:
                data = os.read(self._fd, 64)
            except OSError:
                return
            if not data:
                return  # end of input: the terminal is gone
            for key in keys_of(data.decode(errors="ignore")):
                self._on_key(key)


def keys_of(text: str) -> list[str]:
    """The plain keys in what a terminal sent, escape sequences (arrows, F-keys) left out."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == ESC:
            i += 1
            if i < len(text) and text[i] in "[O":  # CSI or SS3: up to a final letter or ~
                i += 1
                while i < len(text) and not (text[i].isalpha() or text[i] == "~"):
                    i += 1
            i += 1
            continue
        keys.append(ch)
        i += 1
    return keys
