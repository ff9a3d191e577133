#!/usr/bin/env python3
"""Every C++ source of the product (tracer/, allocator/, simulator/, estimator/, tools/) parsed by
clang with the flags the build gives it (BUILD/compile_commands.json), errors only: the build
uses GCC, CI's clang build compiles only the fuzz harness, and a construct GCC takes and clang 14
refuses (a reference to an array element as a template argument did, in tracer/recorder/
python_stack.cpp) would otherwise reach a user who builds with clang first. A source built into
several targets is parsed once, with its first target's flags (the torch bridge: against the first
torch release's headers it is built for). Sources whose flags name torch in a site-packages (the
TorchScript front end, whose GCC precompiled header clang cannot read) are left out.
Exit status: 0 when every source parses, 1 naming the ones that do not, 2 when the build has no
compile_commands.json or clang++ is missing (said on one line).

    scripts/clang_syntax.py BUILD [--jobs N]
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("tracer/", "allocator/", "simulator/", "estimator/", "tools/")
# Arguments that name GCC's output files or are GCC's alone; clang reads the rest.
DROPPED_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROPPED = {"-c", "-MD", "-MMD"}


def clang_arguments(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    if Path(args[0]).name.startswith("ccache"):
        args = args[1:]
    kept, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
        elif arg in DROPPED_WITH_VALUE:
            skip = True
        elif arg not in DROPPED:
            kept.append(arg)
    return [clang, "-fsyntax-only", "-w"] + kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--jobs", type=int, default=1)
    options = parser.parse_args()
    database = Path(options.build) / "compile_commands.json"
    clang = shutil.which("clang++")
    if clang is None:
        sys.exit("clang-syntax: no clang++ on PATH (scripts/setup.sh installs clang)")
    if not database.is_file():
        sys.exit(f"clang-syntax: {database} is missing (the build exports it: "
                 "CMAKE_EXPORT_COMPILE_COMMANDS in CMakeLists.txt)")
    entries = {}  # a source built into two targets is parsed once
    for entry in json.loads(database.read_text()):
        source = Path(entry["file"]).resolve()
        try:
            relative = source.relative_to(ROOT).as_posix()
        except ValueError:
            continue  # generated in the build folder
        command = entry.get("command", " ".join(entry.get("arguments", [])))
        if relative.startswith(PRODUCT) and "site-packages/torch" not in command:
            entries.setdefault(relative, entry)
    if not entries:
        sys.exit(f"clang-syntax: {database} names none of the product's sources")

    def check(item):
        relative, entry = item
        result = subprocess.run(clang_arguments(entry, clang), cwd=entry["directory"],
                                capture_output=True, text=True)
        return relative, result.returncode, result.stderr

    failed = []
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        for relative, code, stderr in pool.map(check, sorted(entries.items())):
            if code != 0:
                failed.append(relative)
                print(f"{relative}:\n{stderr}", file=sys.stderr)
    if failed:
        print(f"clang-syntax: {len(failed)} of {len(entries)} sources do not parse with clang: "
              + ", ".join(failed))
        return 1
    print(f"clang-syntax: {len(entries)} sources parse with {clang}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
