"""The web server's own series (exporter/web/telemetry.py): the web config's reload status, as
Prometheus's prometheus_config_last_reload_successful, and what the server shed; catalogued in
exporter/metrics.py like every family."""

from __future__ import annotations

import time
from pathlib import Path

from exporter.exposition.metrics import PREFIX, WEB_CATALOGUE
from exporter.web.live import LiveWebConfig
from exporter.web.telemetry import WebCounters, WebTelemetry
from tests.support.websec_support import bcrypt_hash, write_config


def _samples(telemetry: WebTelemetry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in telemetry.collect()
        for s in family.samples
    }


def test_reload_status_follows_the_last_read(tmp_path: Path) -> None:
    path = write_config(tmp_path / "web.yml", {"basic_auth_users": {"u": bcrypt_hash("p")}})
    before = time.time()
    live = LiveWebConfig.load(path)
    telemetry = WebTelemetry(WebCounters(), live)
    ok = (PREFIX + "web_config_last_reload_successful", ())
    when = (PREFIX + "web_config_last_reload_success_timestamp_seconds", ())
    first = _samples(telemetry)
    assert first[ok] == 1.0 and first[when] >= before

    path.write_text("basic_auth_users: [not, a, mapping]\n")
    live.reload()  # refused: the last good config serves on
    refused = _samples(telemetry)
    assert refused[ok] == 0.0
    assert refused[when] == first[when]
    assert live.current().auth.enabled

    write_config(path, {"basic_auth_users": {"v": bcrypt_hash("q")}})
    live.reload()
    again = _samples(telemetry)
    assert again[ok] == 1.0 and again[when] >= first[when]


def test_every_family_is_catalogued_with_its_labels(tmp_path: Path) -> None:
    path = write_config(tmp_path / "web.yml", {"basic_auth_users": {"u": bcrypt_hash("p")}})
    counters = WebCounters(
        auth_refused=3, shed_silent=2, shed_refused=1, shed_tls_handshake=4, shed_slow_reader=5
    )
    families = {f.name: f for f in WebTelemetry(counters, LiveWebConfig.load(path)).collect()}
    assert set(families) == {PREFIX + spec.name for spec in WEB_CATALOGUE}
    for spec in WEB_CATALOGUE:
        family = families[PREFIX + spec.name]
        assert family.type == spec.kind
        for sample in family.samples:
            assert sample.name == spec.exposed_name
            assert set(sample.labels) == set(spec.labels)
    shed = {s.labels["reason"]: s.value for s in families[PREFIX + "web_connections_shed"].samples}
    assert shed == {"silent": 2, "idle": 0, "refused": 1, "tls_handshake": 4, "slow_reader": 5}
    assert families[PREFIX + "web_auth_refused"].samples[0].value == 3


def test_without_a_web_config_no_reload_series() -> None:
    names = {f.name for f in WebTelemetry(WebCounters(), None).collect()}
    assert PREFIX + "web_config_last_reload_successful" not in names
    assert PREFIX + "web_connections_shed" in names
