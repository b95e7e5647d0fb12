"""One warning when hostile host files appear, one line when they are gone: per episode.

A FIFO, a device or a huge file where the kernel writes a small one (hostfile.py refuses them)
is a broken or hostile node; reading every interval, a line per read would flood the log, and
a debug line says nothing at the default level. So a reader notes what it refused during a
round and ends the round: the first round with refusals logs a warning naming one file (and how
many more), a round without any after that logs that they are readable again.
"""

from __future__ import annotations

import logging

from exporter.host.files import short_error
from exporter.host.hostfile import FileTooLarge, NotRegularFile


def is_hostile(exc: BaseException) -> bool:
    """A refusal of the file itself (not a vanished or unreadable one)."""
    return isinstance(exc, NotRegularFile | FileTooLarge)


class HostileEpisodes:
    def __init__(self, what: str, log: logging.Logger) -> None:
        self._what = what
        self._log = log
        self._round: list[str] = []
        self._shown: str | None = None  # the file named while an episode lasts

    def saw(self, exc: OSError) -> None:
        self._round.append(f"{exc.filename}: {short_error(exc)}")

    def end_round(self) -> None:
        hostile, self._round = self._round, []
        if hostile and self._shown is None:
            more = f" (and {len(hostile) - 1} more)" if len(hostile) > 1 else ""
            self._log.warning(
                "%s: refused %s%s; skipped until it is a file again", self._what, hostile[0], more
            )
        elif not hostile and self._shown is not None:
            self._log.info("%s: %s is readable again", self._what, self._shown.split(":")[0])
        self._shown = hostile[0] if hostile else None
