"""Whether the listen address can be had, asked before anything slow starts.

`wattprobe serve` compiles the eBPF programs (seconds) before the HTTP server binds; a port
that is taken would only show after that, as a traceback. Binding a socket the way the server
does (same address family, SO_REUSEADDR) and closing it at once answers in microseconds. The
port can still be taken in between; the server's own bind then fails as before.
"""

from __future__ import annotations

import errno
import os
import socket

_HINTS = {
    errno.EADDRINUSE: "another process listens there (another wattprobe?)",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address",
    errno.EACCES: "ports below 1024 need root or CAP_NET_BIND_SERVICE",
}


def family_of(host: str) -> socket.AddressFamily:
    """The server's choice: IPv6 for a host with a colon (an IPv6 literal), else IPv4."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def format_address(host: str, port: int) -> str:
    """The flag's own spelling back: ':28390', '127.0.0.1:9000', '[::1]:9000'."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_problem(host: str, port: int) -> str | None:
    """Why (host, port) cannot be listened on right now, in a few words; None when it can."""
    try:
        with socket.socket(family_of(host), socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except socket.gaierror as exc:
        return f"cannot resolve {host!r} ({exc.strerror})"
    except OSError as exc:
        reason = exc.strerror or os.strerror(exc.errno or 0)
        hint = _HINTS.get(exc.errno or 0)
        return f"{reason.lower()}: {hint}" if hint else reason.lower()
    return None


__all__ = ["family_of", "format_address", "listen_problem"]
