"""The Prometheus client's failures, each one ReportError line (exit 1 through the CLI): an
address nobody listens on, a server that never answers, answers that are not Prometheus', HTTP
errors and answers with warnings (partial data). The odd servers are tiny HTTP servers on
127.0.0.1, since a real Prometheus cannot be made to answer each of these on demand."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.app.cli import main
from exporter.app.report import ReportError
from exporter.app.report.query import Client, PartialData
from tests.support.running import free_port

OK_EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


class Answer:
    def __init__(self, status: int, body: bytes, delay_s: float = 0.0) -> None:
        self.status, self.body, self.delay_s = status, body, delay_s


@pytest.fixture
def server() -> Iterator[tuple[str, list[Answer]]]:
    """A server answering each POST with the next Answer; released at teardown."""
    answers: list[Answer] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            answer = answers.pop(0) if answers else Answer(200, json.dumps(OK_EMPTY).encode())
            if answer.delay_s:
                release.wait(answer.delay_s)
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", answers
    release.set()
    httpd.shutdown()
    httpd.server_close()


def test_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ReportError, match=rf"^cannot reach Prometheus at {url}: .*refused"):
        Client(url, 5).instant("up", 0)


def test_timeout(server: tuple[str, list[Answer]]) -> None:
    url, answers = server
    answers.append(Answer(200, b"{}", delay_s=30))
    with pytest.raises(
        ReportError, match=rf"^Prometheus at {url} did not answer within 0.5s \(--timeout\)$"
    ):
        Client(url, 0.5).instant("up", 0)


def test_warnings_are_partial_data(server: tuple[str, list[Answer]]) -> None:
    url, answers = server
    answers.append(
        Answer(200, json.dumps({**OK_EMPTY, "warnings": ["remote store eu-2 timed out"]}).encode())
    )
    with pytest.raises(PartialData, match=r"may be partial: remote store eu-2 timed out$"):
        Client(url, 5).instant("up", 0)


def test_prometheus_error_answer(server: tuple[str, list[Answer]]) -> None:
    url, answers = server
    body = {
        "status": "error",
        "errorType": "execution",
        "error": "query processing would load too many samples",
    }
    answers.append(Answer(422, json.dumps(body).encode()))
    with pytest.raises(
        ReportError,
        match=r"refused a query: execution: query processing would load too many samples$",
    ):
        Client(url, 5).instant("up", 0)


def test_not_prometheus(server: tuple[str, list[Answer]]) -> None:
    url, answers = server
    answers.append(Answer(200, b"<html>login</html>"))
    with pytest.raises(ReportError, match="did not answer with Prometheus API JSON"):
        Client(url, 5).instant("up", 0)
    answers.append(Answer(503, b"upstream down"))
    with pytest.raises(ReportError, match=r"answered HTTP 503 Service Unavailable$"):
        Client(url, 5).instant("up", 0)


def test_nan_is_refused(server: tuple[str, list[Answer]]) -> None:
    url, answers = server
    result = [{"metric": {"node": "a"}, "value": [0, "NaN"]}]
    answers.append(
        Answer(
            200,
            json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": result}}
            ).encode(),
        )
    )
    with pytest.raises(ReportError, match="answered NaN for"):
        Client(url, 5).instant("up", 0)


def test_cli_says_one_line(
    server: tuple[str, list[Answer]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, answers = server
    answers.append(Answer(200, json.dumps({**OK_EMPTY, "warnings": ["partial"]}).encode()))
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--prometheus", url, "--period", "2025-03", "--out", "/nonexistent/x.csv"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert (
        err == f"wattprobe: error: Prometheus at {url} warned the answer may be partial: partial\n"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--prometheus", "ftp://x", "--out", "/tmp/x.csv"])
    assert exit_.value.code == 2


def test_too_many_samples_suggests_smaller_batches(
    server: tuple[str, list[Answer]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, answers = server
    nodes = [{"metric": {"node": n}, "value": [0, "1"]} for n in ("a", "b")]
    answers.append(
        Answer(
            200,
            json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": nodes}}
            ).encode(),
        )
    )
    limit = {
        "status": "error",
        "errorType": "execution",
        "error": "query processing would load too many samples into memory in query execution",
    }
    answers.append(Answer(422, json.dumps(limit).encode()))
    with pytest.raises(SystemExit) as exit_:
        main(
            ["report", "--prometheus", url, "--period", "2025-03", "--out", str(tmp_path / "r.csv")]
        )
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.endswith("in query execution (try a smaller --nodes-per-query)\n")
    assert err.count("\n") == 1
