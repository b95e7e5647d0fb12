"""HTTP basic auth against bcrypt hashes, as exporter-toolkit's basic_auth_users does it.

bcrypt is slow on purpose (~70 ms at cost 10), far too slow to pay on every scrape. Like
exporter-toolkit, a successful check is cached; unlike it, the cache key is an HMAC (under a
random per-process key) of the user, the hash and the password, so the cache never holds a
password or a fast unsalted hash of one. Failures are not cached: a guesser pays a full bcrypt
per guess, and bcrypt runs one at a time so a flood of guesses burns at most one core.
Every check that is not a cache hit costs at least one bcrypt at the highest cost in the file:
an unknown user is checked against a dummy hash of that cost, and a user whose own hash is
cheaper is checked against it too. So the response time tells neither which user names exist
nor which users have a cheap hash (within 1.5x: t(cost) + t(max) against t(max)).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
from collections import OrderedDict

import bcrypt

CACHE_SIZE = 64  # successful (user, password) pairs kept; a node has a handful of scrapers


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) from an Authorization header, or None if it is not valid Basic auth."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        if not sep:
            return None
        return user.decode("utf-8"), password
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _cost(hashed: bytes) -> int:
    """The cost of a $2b$NN$... hash (config.py has checked the format)."""
    return int(hashed[4:6])


class BasicAuth:
    def __init__(self, users: tuple[tuple[str, str], ...]) -> None:
        self._users = {user: hashed.encode() for user, hashed in users}
        self._cost = max((_cost(h.encode()) for _, h in users), default=10)
        self._key = os.urandom(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()
        self._dummy: bytes | None = None

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    def cached(self, authorization: str | None) -> bool:
        """Whether the header holds credentials that passed a full check() recently.

        Cheap (an HMAC and a dict lookup): the event loop asks this first and runs check(),
        which may take a bcrypt's 70 ms, on a thread of its own only when this says no.
        """
        credentials = parse_basic(authorization)
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        if hashed is None:
            return False
        key = self._cache_key(user, hashed, password)
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True
        return False

    def check(self, authorization: str | None) -> bool:
        """Whether the Authorization header names a configured user with the right password."""
        credentials = parse_basic(authorization)
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        if hashed is None:
            self._bcrypt(password, None)  # same cost as a known user: no user-name oracle
            return False
        key = self._cache_key(user, hashed, password)
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True
        ok = self._bcrypt(password, hashed)
        if _cost(hashed) < self._cost:
            self._bcrypt(password, None)  # pad a cheap hash to the highest cost's time
        if not ok:
            return False
        with self._cache_lock:
            self._cache[key] = None
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return True

    def _cache_key(self, user: str, hashed: bytes, password: bytes) -> bytes:
        message = b"\0".join((user.encode(), hashed, password))
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _bcrypt(self, password: bytes, hashed: bytes | None) -> bool:
        with self._bcrypt_lock:
            if hashed is None:
                if self._dummy is None:
                    secret = os.urandom(18).hex().encode()
                    self._dummy = bcrypt.hashpw(secret, bcrypt.gensalt(self._cost))
                hashed = self._dummy
            try:
                return bcrypt.checkpw(password, hashed)  # compares in constant time
            except ValueError:  # longer than bcrypt's 72 bytes: cannot match any hash
                return False
