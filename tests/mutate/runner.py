"""pytest for mutmut: any failure is exit status 1.

mutmut 2 counts a mutant killed only when its test command exits 1; pytest exits 2 when a mutant
breaks the import of a module (a syntax error), and mutmut would call that mutant a survivor."""

from __future__ import annotations

import sys

import pytest

if __name__ == "__main__":
    sys.exit(0 if pytest.main(sys.argv[1:]) == 0 else 1)
