"""Basic-auth checks that a brute force cannot starve: bounded, and taken from clients in turn.

A bcrypt check takes ~70 ms at cost 10 and they run one at a time (one core at most for a
flood of guesses). Before issue 28 the checks waited in one unbounded queue: 300 concurrent
wrong-password connections made a valid login that was not cached wait 22.7 s, so after a
restart or a password rotation every scrape failed until the flood stopped. Now:

- the checks waiting are bounded, per client address (PER_PEER) and in all (MAX_WAITING); a
  request over a bound is refused at once (429 with Retry-After, counted in
  wattprobe_web_auth_refused_total), so a guesser's excess costs neither memory nor a wait;
- the next check is taken from the client address that has had the fewest checks run (of the
  last RECENT addresses checked; the oldest lane first among equals), not in arrival order:
  however many guesses one address keeps waiting, a scraper from another address is next,
  after the check in progress.

Spread over many addresses (issue 41: guessers on 20 loopback addresses filled MAX_WAITING,
and a valid first login from a 21st got 429 five times out of five), the bound in all must not
become the guessers' to hold. So when it is reached, a newcomer displaces the waiting check
that would be served last, if that one would be served after the newcomer's: service order is
addresses whose last check succeeded (TRUSTED remembered; a failure forgets one) first, then
the fewest checks run, then the shortest lane. A scraper's address that succeeded before
therefore always gets in and goes next; a new address gets in while any address with more
checks run (a guesser that has been at it) waits; only a flood of addresses that have each had
no more checks than the newcomer refuses it. The displaced check is answered 429, as a refused one.

Why per address and not something else: a cache of good logins (BasicAuth's) answers a scraper
that was checked before, but not the first scrape after a restart or a rotation, which is what
starved; and no property of a guess tells a valid login from a wrong one before bcrypt has run.
The address is the one thing a brute force cannot share with the scraper without running where
the scraper runs (in Kubernetes each pod has its own). A guesser that shares the scraper's
address (the same pod, or a NAT in front of both) shares its turn, and the scraper then gets
429 while the guesser holds PER_PEER checks waiting; MAX_WAITING bounds a guesser that spreads
over many addresses.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections import OrderedDict, deque
from typing import Any

from exporter.web.auth import BasicAuth

log = logging.getLogger(__name__)

PER_PEER = 4
MAX_WAITING = 64

_Waiting = tuple[BasicAuth, str | None, "asyncio.Future[bool | None]"]


RECENT = 1024  # addresses whose count of checks is remembered
TRUSTED = 256  # addresses remembered for a successful login (served first)


def peer_host(peer: Any) -> str:
    """The address part of a peername (the port changes with every connection)."""
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer)


class AuthGate:
    """Runs BasicAuth.check off the event loop, one at a time, fairly across client addresses.

    Used from the event loop only (check() and the callbacks run on it); the checks themselves
    run on one thread of their own.
    """

    def __init__(self) -> None:
        self._lanes: OrderedDict[str, deque[_Waiting]] = OrderedDict()
        self._ran: OrderedDict[str, int] = OrderedDict()  # checks run per address, LRU
        self._trusted: OrderedDict[str, None] = OrderedDict()  # addresses that logged in, LRU
        self._waiting = 0
        self._busy = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.refused = 0  # checks refused at once because a bound was reached
        self._episode = 0  # refusals since the queue was last empty (one log line per episode)

    async def check(self, auth: BasicAuth, header: str | None, peer: Any) -> bool | None:
        """Whether the header's credentials are good; None when refused (a bound, at once or
        displaced by a check that goes first)."""
        if auth.cached(header):
            return True  # an HMAC and a dict lookup: no queue, no thread
        host = peer_host(peer)
        lane = self._lanes.get(host)
        mine = len(lane) if lane is not None else 0
        if mine >= PER_PEER or (self._waiting >= MAX_WAITING and not self._displace(host, mine)):
            self._refuse()
            return None
        if lane is None:
            lane = self._lanes[host] = deque()
        future: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        lane.append((auth, header, future))
        self._waiting += 1
        self._next()
        return await future

    def _rank(self, host: str, waiting: int) -> tuple[bool, int, int]:
        """Service order, lowest first: trusted addresses, fewest checks run, shortest lane."""
        return (host not in self._trusted, self._ran.get(host, 0), waiting)

    def _displace(self, host: str, mine: int) -> bool:
        """At MAX_WAITING: make room for host by refusing the newest check of the lane served
        last, if that lane ranks after host's would; False when none does."""
        victim = max(self._lanes, key=lambda h: self._rank(h, len(self._lanes[h])))
        lane = self._lanes[victim]
        if self._rank(victim, len(lane)) <= self._rank(host, mine + 1):
            return False
        *_, future = lane.pop()
        self._waiting -= 1
        if not lane:
            del self._lanes[victim]
        if not future.done():
            future.set_result(None)
        self._refuse()
        return True

    def _refuse(self) -> None:
        self.refused += 1
        self._episode += 1
        if self._episode == 1:
            log.warning(
                "basic auth: bcrypt checks refused (429): %d waiting from %d addresses; a brute "
                "force? (wattprobe_web_auth_refused_total counts them)",
                self._waiting,
                len(self._lanes),
            )

    def _next(self) -> None:
        if not self._lanes and self._episode and not self._busy:
            log.info("basic auth: checks waiting drained; %d refused meanwhile", self._episode)
            self._episode = 0
        while not self._busy and self._lanes:
            # at most MAX_WAITING lanes: the scan is short
            host = min(self._lanes, key=lambda h: self._rank(h, 0)[:2])
            lane = self._lanes[host]
            auth, header, future = lane.popleft()
            self._waiting -= 1
            if not lane:
                del self._lanes[host]
            self._ran[host] = self._ran.pop(host, 0) + 1
            if len(self._ran) > RECENT:
                self._ran.popitem(last=False)
            if future.done():  # its connection went away while it waited
                continue
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, "http-auth")
            self._busy = True
            loop = asyncio.get_running_loop()
            done = loop.run_in_executor(self._pool, auth.check, header)
            done.add_done_callback(functools.partial(self._finished, future, host))

    def _finished(
        self, future: asyncio.Future[bool | None], host: str, done: asyncio.Future[bool]
    ) -> None:
        self._busy = False
        if not done.cancelled() and done.exception() is None:
            if done.result():
                self._trusted[host] = None
                self._trusted.move_to_end(host)
                if len(self._trusted) > TRUSTED:
                    self._trusted.popitem(last=False)
            else:
                # a wrong password loses the address its turn first: a guesser behind the
                # scraper's address (a NAT) cannot keep the head of the queue
                self._trusted.pop(host, None)
        if not future.done():
            if done.cancelled():
                future.cancel()
            elif (exc := done.exception()) is not None:
                future.set_exception(exc)
            else:
                future.set_result(done.result())
        self._next()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
