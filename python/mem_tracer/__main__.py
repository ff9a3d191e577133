"""python -m mem_tracer run [options] script.py [args...]

Traces an unmodified Python program (the LD_PRELOAD way, set up for you) and prints the
report when it ends. The program's exit status is passed on."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from . import _native
from .errors import MemTracerError
from .report import GROUPINGS, report_stats


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mem_tracer",
                                     description="Trace where a Python program's CUDA memory goes.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a script with memtrace preloaded, then print the report",
                              usage="python -m mem_tracer run [options] (script.py | -m module) [args...]")
    run.add_argument("--output", "-o", default="memtrace-%p.bin",
                     help="trace file; %%p becomes the program's pid (default: %(default)s)")
    run.add_argument("--stacks", choices=("python", "native", "all", "none"), default="python",
                     help="stacks to record with each allocation (default: %(default)s)")
    run.add_argument("--top", type=int, default=20, help="rows of the report (default: %(default)s)")
    run.add_argument("--group-by", choices=GROUPINGS, default="line", help="(default: %(default)s)")
    run.add_argument("--frame", choices=("innermost", "user"), default="innermost",
                     help="the Python frame an allocation is attributed to (default: %(default)s)")
    run.add_argument("--quiet", "-q", action="store_true", help="write the trace, print no report")
    run.add_argument("-m", dest="module", help="run a module, as python -m does")
    run.add_argument("program", nargs="*", help="script.py and its arguments")
    return parser


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """Splits the command line into the launcher's part and the program's: the program
    starts at the first argument that is not an option of `run` (or right after -m MODULE),
    so its own options (--help, -o, ...) reach it untouched."""
    takes_value = {"--output", "-o", "--stacks", "--top", "--group-by", "--frame"}
    index = 0
    while index < len(argv):
        argument = argv[index]
        if argument == "run" and index == 0:
            index += 1
        elif argument == "-m":
            return argv[:index + 2], argv[index + 2:]
        elif argument in takes_value:
            index += 2
        elif argument.startswith("-") and argument != "-":
            index += 1
        else:
            return argv[:index], argv[index:]
    return argv, []


def run(arguments: argparse.Namespace) -> int:
    """Runs the program under LD_PRELOAD and reports on its trace; returns its exit status."""
    if arguments.module:
        command = [sys.executable, "-m", arguments.module, *arguments.program]
    elif arguments.program:
        command = [sys.executable, *arguments.program]
    else:
        raise MemTracerError("run: give a script (python -m mem_tracer run script.py) or -m module")
    library = _native.library_path()
    environment = dict(os.environ)
    environment["LD_PRELOAD"] = " ".join(filter(None, [str(library), environment.get("LD_PRELOAD")]))
    environment["MEMTRACE_OUTPUT"] = os.path.abspath(arguments.output)
    environment["MEMTRACE_STACKS"] = arguments.stacks
    process = subprocess.Popen(command, env=environment)
    try:
        status = process.wait()
    except KeyboardInterrupt:  # the program got the same Ctrl-C: let it finish, then report
        status = process.wait()
    trace = Path(os.path.abspath(arguments.output).replace("%p", str(process.pid)))
    if not trace.exists():
        print(f"mem_tracer: {command[1]} made no CUDA allocation: no trace was written", file=sys.stderr)
        return status
    if not arguments.quiet:
        print(f"\n== mem_tracer: {trace}", flush=True)
        report_stats(top=arguments.top, group_by=arguments.group_by, frame=arguments.frame, trace=trace)
    return status


def main(argv: list[str] | None = None) -> int:
    launcher, program = _split(sys.argv[1:] if argv is None else argv)
    arguments = _parser().parse_args(launcher)
    arguments.program = program
    try:
        return run(arguments)
    except MemTracerError as error:
        print(f"mem_tracer: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
