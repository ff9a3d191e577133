"""What `memtrace run` runs in the traced program, before the program itself: the training
hooks (training.install_automatic), so that an unmodified training script's allocations get
their categories, phases and steps; then the script, or -m module, as python would run it.

    python -m mem_tracer._run (script.py | -m module) [args...]
"""
from __future__ import annotations

import importlib.util
import os
import runpy
import sys


def main() -> None:
    arguments = sys.argv[1:]
    if importlib.util.find_spec("torch") is not None:
        from . import training
        training.install_automatic()
    if arguments[:1] == ["-m"]:
        module, *rest = arguments[1:]
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script, *rest = arguments
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
