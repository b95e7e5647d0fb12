"""Drive a program in a real terminal: a detached tmux session of a fixed size.

The program runs under a small script that records the terminal settings (stty -a) before and
after it, its exit status and its PID (for signals), then keeps the pane open so the screen
after exit can be read too.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.support.realparts import require_binary
from tests.support.running import REPO

EXITED = "EXITED rc="


class Tmux:
    def __init__(self, workdir: Path, width: int = 80, height: int = 24) -> None:
        self.tmux = require_binary("tmux")
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = self.dir / "tmux.sock"
        self.width = width
        self.height = height

    def _run(self, *args: str) -> str:
        result = subprocess.run(
            [self.tmux, "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return result.stdout

    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        d = self.dir
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script = d / "run.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"{exports}"
            f"cd {shlex.quote(str(REPO))}\n"
            f"stty -a > {d}/stty.before\n"
            # the inner shell records its PID, then becomes the program (same PID)
            f"sh -c 'echo $$ > {d}/pid; exec \"$@\"' sh {shlex.join(argv)} 2> {d}/stderr\n"
            "rc=$?\n"
            f"stty -a > {d}/stty.after\n"
            f'echo "{EXITED}$rc"\n'
            "sleep 120\n"
        )
        self._run(
            *("new-session", "-d", "-s", "top", "-x", str(self.width), "-y", str(self.height)),
            f"sh {shlex.quote(str(script))}",
        )

    def start_shell(self, env: Mapping[str, str]) -> None:
        """An interactive bash with job control (for Ctrl-Z and fg), prompt "$ "."""
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**env, "PS1": "$ "}.items())
        self._run(
            *("new-session", "-d", "-s", "top", "-x", str(self.width), "-y", str(self.height)),
            f"cd {shlex.quote(str(REPO))} && env {exports} bash --norc --noprofile -i",
        )

    def type_line(self, line: str) -> None:
        self._run("send-keys", "-t", "top", "-l", line)
        self._run("send-keys", "-t", "top", "Enter")

    def run_in_shell(self, argv: Sequence[str]) -> None:
        """Type a command that records its PID and stderr like start() does."""
        d = self.dir
        self.type_line(
            f"sh -c 'echo $$ > {d}/pid; exec \"$@\"' sh {shlex.join(argv)} 2> {d}/stderr"
        )

    @property
    def size(self) -> str:
        return self._run("display-message", "-p", "-t", "top", "#{pane_width}x#{pane_height}")

    @property
    def pane_tty(self) -> str:
        return self._run("display-message", "-p", "-t", "top", "#{pane_tty}").strip()

    def pid(self) -> int:
        return int((self.dir / "pid").read_text())

    def screen(self) -> list[str]:
        """The visible screen, one string per row; rows that wrapped are joined (-J)."""
        text = self._run("capture-pane", "-p", "-J", "-t", "top")
        return text.rstrip("\n").split("\n")

    def wait_for(
        self, ready: Callable[[list[str]], bool], what: str, timeout: float = 30.0
    ) -> list[str]:
        deadline = time.monotonic() + timeout
        lines = self.screen()
        while not ready(lines):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"screen never showed {what} in {timeout}s:\n"
                    + "\n".join(lines)
                    + self.stderr()
                )
            time.sleep(0.1)
            lines = self.screen()
        return lines

    def wait_for_text(self, text: str, timeout: float = 30.0) -> list[str]:
        return self.wait_for(lambda lines: any(text in line for line in lines), repr(text), timeout)

    def resize(self, width: int, height: int) -> None:
        self._run("resize-window", "-t", "top", "-x", str(width), "-y", str(height))

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", "top", *keys)

    def stderr(self) -> str:
        path = self.dir / "stderr"
        return f"\n--- stderr ---\n{path.read_text()}" if path.exists() else ""

    def stty_before_and_after(self) -> tuple[str, str]:
        """The terminal settings before and after, less its size (a test may resize it)."""

        def settings(name: str) -> str:
            return re.sub(r"rows \d+; columns \d+; ", "", (self.dir / name).read_text())

        return settings("stty.before"), settings("stty.after")

    def close(self) -> None:
        subprocess.run(
            [self.tmux, "-S", str(self.socket), "kill-server"],
            capture_output=True,
            timeout=10,
            check=False,
        )
