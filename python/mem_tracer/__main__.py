"""`python -m mem_tracer`: the `memtrace` command (cli.py), the same in every way.

`main` is the console script's entry point (memtrace = mem_tracer.__main__:main)."""
from __future__ import annotations

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
