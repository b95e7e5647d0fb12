"""The request head reader (exporter/web/http.py HeadReader): linear in the bytes received, and
the same heads and refusals however the bytes are cut into receives.

Before issue 19 the reader rescanned and copied its whole buffer on every receive: a 16 KiB head
sent a byte at a time cost 2.3 s of CPU (quadratic). The reference below is the end-of-head rule
of RFC 9112 (a blank line, CRLF or bare LF) applied to the whole input at once, as the old
reader's regular expression did.
"""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from exporter.model.config import HttpLimits
from exporter.web.http import MAX_BLANK_BYTES, HeadReader, HttpError
from tests.support.props import PROPERTY

LIMITS = HttpLimits(max_header_bytes=1024, max_request_line=256)
BIG = HttpLimits(max_header_bytes=1 << 20, max_request_line=1 << 20)
_END = re.compile(rb"\r?\n\r?\n")

Outcome = tuple[list[bytes], int | None]  # the heads, then the refusal's status (or None)


def feed_all(data: bytes, cuts: list[int], limits: HttpLimits = LIMITS) -> Outcome:
    """Feed data cut at the given offsets; take every head out after each receive."""
    reader = HeadReader(limits)
    heads: list[bytes] = []
    bounds = sorted({c for c in cuts if 0 < c < len(data)})
    pieces = [data[a:b] for a, b in zip([0, *bounds], [*bounds, len(data)], strict=True)]
    try:
        for piece in pieces:
            reader.feed(piece)
            while (head := reader.next_head()) is not None:
                heads.append(head)
    except HttpError as exc:
        return heads, exc.status
    return heads, None


def reference_heads(data: bytes) -> Outcome:
    """Every complete head of data, with no size limits: empty lines before a head are skipped,
    up to MAX_BLANK_BYTES of them (more: 400)."""
    heads: list[bytes] = []
    rest = data
    while True:
        stripped = rest.lstrip(b"\r\n")
        if len(rest) - len(stripped) > MAX_BLANK_BYTES:
            return heads, 400
        rest = stripped
        end = _END.search(rest)
        if end is None:
            return heads, None
        heads.append(rest[: end.start()])
        rest = rest[end.end() :]


line = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))
heads_text = st.lists(
    st.tuples(st.lists(line, max_size=6), st.sampled_from([b"\r\n", b"\n"])), max_size=4
).map(lambda hs: b"".join(eol.join(ls) + eol + eol for ls, eol in hs))


@PROPERTY
@given(
    data=st.one_of(st.binary(max_size=1500), heads_text),
    cuts=st.lists(st.integers(0, 1500), max_size=40),
)
def test_the_same_outcome_however_the_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    assert feed_all(data, cuts) == feed_all(data, [])


@PROPERTY
@given(data=st.one_of(st.binary(max_size=600), heads_text), cuts=st.lists(st.integers(0, 600)))
def test_heads_are_where_the_blank_lines_are(data: bytes, cuts: list[int]) -> None:
    assert feed_all(data, cuts, BIG) == reference_heads(data)


def test_limits_are_refused_as_soon_as_the_bytes_show_them() -> None:
    assert feed_all(b"GET /" + b"a" * 300, [])[1] == 414  # no newline yet
    assert feed_all(b"GET /" + b"a" * 300 + b" HTTP/1.1\r\n\r\n", [])[1] == 414
    header = b"GET / HTTP/1.1\r\nX: " + b"b" * 1100
    assert feed_all(header, [])[1] == 431  # no blank line yet
    assert feed_all(header + b"\r\n\r\n", [])[1] == 431
    blank = b"\r\n" * 100_000  # Go's server answers 400 at once; so do we (issue 28)
    assert feed_all(blank, []) == ([], 400)
    assert feed_all(blank[: MAX_BLANK_BYTES + 1], []) == ([], 400)
    ok = b"GET / HTTP/1.1\r\nX: " + b"b" * 900 + b"\r\n\r\n"
    assert feed_all(b"\r\n" * (MAX_BLANK_BYTES // 2) + ok, []) == ([ok[:-4]], None)
    assert feed_all(ok * 3, [5, 700, 1500, 2000]) == ([ok[:-4]] * 3, None)


def test_each_byte_is_looked_at_once() -> None:
    head = b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"p" * 16000 + b"\r\n\r\n"
    reader = HeadReader(BIG)
    for i in range(len(head)):
        reader.feed(head[i : i + 1])
        got = reader.next_head()
    assert got == head[:-4]
    assert reader.scanned == len(head)  # the old reader looked at ~len**2 / 2 bytes


def _one_byte_at_a_time(size: int) -> float:
    head = b"GET / HTTP/1.1\r\nX-Pad: " + b"p" * size + b"\r\n\r\n"
    best = float("inf")
    for _ in range(5):  # the least disturbed of five runs: the machine is shared
        reader = HeadReader(BIG)
        start = time.thread_time()
        for i in range(len(head)):
            reader.feed(head[i : i + 1])
            reader.next_head()
        best = min(best, time.thread_time() - start)
    return best


def test_a_trickled_head_costs_time_linear_in_its_size() -> None:
    small, large = _one_byte_at_a_time(16_000), _one_byte_at_a_time(64_000)
    # linear: 4x the bytes cost ~4x; the old quadratic reader cost 16x
    assert large / small < 8, (small, large)
    assert small < 0.5  # 16 KB a byte at a time: the old reader took 2.3 s
