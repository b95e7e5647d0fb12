"""Numbers as the kernel writes them in procfs, sysfs and cgroupfs: a few ASCII digits.

Anything longer than a u64 has or that carries a sign is garbage, never a number to convert (a
309-digit value once overflowed float division and took a whole source down). Every parser of a
host file goes through here; it sits at the bottom of the layers so sources and workloads alike
can use it.
"""

from __future__ import annotations

MAX_DIGITS = 20  # 2**64 - 1 has 20


class OutOfRange(ValueError):
    """A number the kernel cannot have written: negative where unsigned, or too long."""


def parse_uint(text: str, where: str = "") -> int:
    """An unsigned decimal as the kernel writes it: 1-20 ASCII digits, nothing else.

    Raises ValueError for anything else (sign, '+5', '1_000', non-ASCII digits, too long).
    """
    suffix = f" in {where}" if where else ""
    if not text.isascii() or not text.isdigit():
        if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
            raise OutOfRange(f"negative value {text[:24]}{suffix}")
        raise ValueError(f"not a number: {text[:32]!r}{suffix}")
    if len(text) > MAX_DIGITS:
        raise OutOfRange(f"number too long ({len(text)} digits){suffix}")
    return int(text)
