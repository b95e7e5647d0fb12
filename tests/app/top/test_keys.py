"""Key presses through a real pseudo-terminal: cbreak while reading, settings restored after."""

from __future__ import annotations

import os
import queue
import termios

from exporter.app.top.keys import KeyReader, keys_of


def test_escape_sequences_are_not_keys() -> None:
    # arrows (CSI), F1 (SS3), F5 (CSI ~) and a lone ESC are skipped; plain keys stay
    assert keys_of("a\x1b[Ab\x1bOPc\x1b[15~q\x1b") == ["a", "b", "c", "q"]


def test_reader_sets_cbreak_and_restores_the_terminal() -> None:
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        got: queue.SimpleQueue[str] = queue.SimpleQueue()
        reader = KeyReader(slave, got.put)
        reader.start()
        during = termios.tcgetattr(slave)
        lflag = during[3]
        assert not lflag & termios.ICANON and not lflag & termios.ECHO
        assert lflag & termios.ISIG  # Ctrl-C still interrupts
        os.write(master, b"g\x1b[Bnq")
        assert [got.get(timeout=5) for _ in range(3)] == ["g", "n", "q"]
        reader.suspend()  # Ctrl-Z: the shell gets its terminal back
        assert termios.tcgetattr(slave) == before
        reader.resume()
        assert not termios.tcgetattr(slave)[3] & termios.ICANON
        reader.close()
        assert termios.tcgetattr(slave) == before
        reader.close()  # twice is harmless
    finally:
        os.close(master)
        os.close(slave)
