"""One scraper: GETs a URL over one keep-alive connection, as Prometheus does, and prints the
start time, latency (first byte sent to last body byte received) and snapshot of each request
as JSON.

    python -m tests.benchmarks.scraper URL COUNT GAP_S START_AT

Scrapers run as separate processes so that they do not share an interpreter lock with each
other; START_AT (a time.time() value) lines their first requests up.
"""

from __future__ import annotations

import gzip
import http.client
import json
import sys
import time
from urllib.parse import urlsplit

# what Prometheus 2.x sends
HEADERS = {
    "Accept": "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "wattprobe-bench/scraper",
}


INTERVALS = b"\nwattprobe_intervals_total "
Request = tuple[float, float, int]  # (time.time() at its start, latency s, snapshot or -1)


def snapshot_of(body: bytes, gzipped: bool) -> int:
    """wattprobe_intervals_total of a wattprobe exposition (-1 for other exporters): tells which
    requests met a new snapshot, that is, fell on or next to the exporter's interval step."""
    text = gzip.decompress(body) if gzipped else body
    at = text.find(INTERVALS)
    if at < 0:
        return -1
    return int(float(text[at + len(INTERVALS) : text.index(b"\n", at + 1)]))


def scrape(url: str, count: int, gap_s: float, start_at: float) -> list[Request]:
    """One Request per GET; the snapshot is read from the body after the latency is taken."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    latencies: list[Request] = []
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    try:
        for _ in range(count):
            wall = time.time()
            start = time.perf_counter()
            conn.request("GET", parts.path or "/", headers=HEADERS)
            resp = conn.getresponse()
            body = resp.read()
            latency = time.perf_counter() - start
            if resp.status != 200 or not body:
                raise SystemExit(f"{url}: HTTP {resp.status}")
            gzipped = resp.getheader("Content-Encoding") == "gzip"
            latencies.append((wall, latency, snapshot_of(body, gzipped)))
            if gap_s:
                time.sleep(gap_s)
    finally:
        conn.close()
    return latencies


def main() -> None:
    url, count, gap, start_at = (
        sys.argv[1],
        int(sys.argv[2]),
        float(sys.argv[3]),
        float(sys.argv[4]),
    )
    print(json.dumps(scrape(url, count, gap, start_at)))


if __name__ == "__main__":
    main()
