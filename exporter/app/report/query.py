"""A small client of Prometheus' HTTP API (instant queries), with urllib: a timeout on every
request, and every failure turned into one ReportError line naming the URL and the cause."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from fractions import Fraction

from exporter.app.report import ReportError

Labels = tuple[tuple[str, str], ...]


class PartialData(ReportError):
    """Prometheus answered but said its answer may be incomplete (warnings)."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    # exact: Prometheus sends decimal strings, so 0.2 EUR stays 0.2, not 0.2000000000000000111
    value: Fraction


@dataclass(frozen=True)
class Client:
    url: str
    timeout_s: float = 30.0

    def instant(self, expr: str, at: float) -> list[Sample]:
        """An instant vector query evaluated at `at` (Unix seconds)."""
        data = self._call("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        if data.get("resultType") != "vector":
            raise ReportError(
                f"Prometheus at {self.url} answered a {data.get('resultType')} for {expr!r}"
            )
        result = data.get("result")
        return [_sample(r) for r in result] if isinstance(result, list) else []

    def _call(self, path: str, params: dict[str, str]) -> dict[str, object]:
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(  # noqa: S310 (http or https: command.check_url)
            self.url.rstrip("/") + path,
            data=body,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:  # noqa: S310 (the user's URL; http/https only, checked by the command)
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            answer = _json(raw)
            if answer is None or answer.get("status") != "error":
                raise ReportError(
                    f"Prometheus at {self.url} answered HTTP {err.code} {err.reason}"
                ) from None
            raise ReportError(
                f"Prometheus at {self.url} refused a query: "
                f"{answer.get('errorType')}: {answer.get('error')}"
            ) from None
        except TimeoutError:
            raise ReportError(
                f"Prometheus at {self.url} did not answer within {self.timeout_s:g}s (--timeout)"
            ) from None
        except urllib.error.URLError as err:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {err.reason}") from None
        except OSError as err:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {err}") from None
        answer = _json(raw)
        if answer is None:
            raise ReportError(
                f"{self.url} did not answer with Prometheus API JSON (is it Prometheus?)"
            )
        if answer.get("status") != "success":
            raise ReportError(
                f"Prometheus at {self.url}: {answer.get('errorType')}: {answer.get('error')}"
            )
        warnings = answer.get("warnings")
        if warnings:
            said = "; ".join(map(str, warnings)) if isinstance(warnings, list) else str(warnings)
            raise PartialData(f"Prometheus at {self.url} warned the answer may be partial: {said}")
        data = answer.get("data")
        if not isinstance(data, dict):
            raise ReportError(f"{self.url} answered without data")
        return data


def _json(raw: bytes) -> dict[str, object] | None:
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _sample(result: object) -> Sample:
    if not isinstance(result, dict):
        raise ReportError(f"unexpected result in a Prometheus answer: {result!r:.80}")
    value = result.get("value")
    if not (isinstance(value, list) and len(value) == 2):
        raise ReportError(f"unexpected sample in a Prometheus answer: {value!r:.80}")
    try:
        number = Fraction(str(value[1]))
    except (ValueError, ZeroDivisionError):
        # NaN or Inf: a broken counter or factor must not become a figure on a bill
        raise ReportError(f"Prometheus answered {value[1]} for {result.get('metric')}") from None
    return Sample(dict(result.get("metric", {})), number)
