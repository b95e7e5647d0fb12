"""Shed connections are logged once per episode, not once per connection (issue 41)."""

from __future__ import annotations

import logging

import pytest

from exporter.web.episodes import QUIET_S, ShedEpisodes


def test_one_warning_per_episode_and_one_line_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    episodes = ShedEpisodes(clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="exporter.web.server")
    for i in range(1000):
        now[0] += 0.01
        episodes.event("silent" if i % 2 else "idle")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    episodes.tick(now[0] + QUIET_S / 2)
    assert len(caplog.records) == 1  # not quiet long enough yet
    episodes.tick(now[0] + QUIET_S)
    assert not episodes.open
    assert caplog.records[-1].getMessage() == "stopped shedding connections: 500 idle, 500 silent"
    now[0] += 2 * QUIET_S
    episodes.event("refused")  # a new episode: a new warning
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO, logging.WARNING]
