"""--log.format: how log lines look on stderr.

plain (the default, as before): `2026-11-24 15:20:54,123 INFO wattprobe: message`, for people.
logfmt and json, as the Prometheus exporters write them, for log shippers:
`ts=2026-11-24T15:20:54.123Z level=info logger=wattprobe msg="message"` and
`{"ts": "...", "level": "info", "logger": "wattprobe", "msg": "message"}`; a traceback goes in
`exc`, so a record stays one line.
"""

from __future__ import annotations

import json
import logging
import time

PLAIN = "plain"
LOGFMT = "logfmt"
JSON = "json"
FORMATS = (PLAIN, LOGFMT, JSON)
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# the level names Prometheus exporters use
LEVELS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
    logging.CRITICAL: "error",
}


def _fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, str]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    fields = {
        "ts": f"{stamp}.{int(record.msecs):03d}Z",
        "level": LEVELS.get(record.levelno, record.levelname.lower()),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.exc_info:
        fields["exc"] = formatter.formatException(record.exc_info)
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record, self), ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record, self).items())


def _logfmt_value(value: str) -> str:
    """Bare when it can be (no space, quote, = or control character), else quoted."""
    if value and not any(c in value for c in ' "=\\') and value.isprintable():
        return value
    return json.dumps(value, ensure_ascii=False)


def formatter(name: str) -> logging.Formatter:
    if name == JSON:
        return JsonFormatter()
    if name == LOGFMT:
        return LogfmtFormatter()
    return logging.Formatter(PLAIN_FORMAT)
