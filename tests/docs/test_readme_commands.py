"""Every command the README shows is one the project has: each `make` target exists; each
`memtrace` command exists and takes every option the README gives it (its --help, which for the
report's and the estimator's commands is the built tool's own); each path into the build is one
`make build` makes; each Python block is Python. What the commands print when run on a program
is the business of the tests of each room (tests/simulator/test_demo.py runs `make demo`'s
script)."""
import ast
import os
import re
import shlex
import subprocess
import sys

import pytest

from memtrace_testing import BUILD, ROOT

README = ROOT / "README.md"


def blocks(language):
    """The lines of each of the README's code blocks in `language` (```sh, ```python)."""
    found, lines, inside = [], [], None
    for line in README.read_text().splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and inside is None:
            inside, lines = fence.group(1), []
        elif fence:
            if inside == language:
                found.append(lines)
            inside = None
        elif inside is not None:
            lines.append(line)
    return found


def commands():
    """Each shell line, without its comment, as words."""
    for block in blocks("sh"):
        for line in block:
            words = shlex.split(line, comments=True)
            if words:
                yield line, words


def options(words):
    """The options a README line gives memtrace itself: up to the program it runs (a script,
    `-m module`, torchrun), with [--a|--b] choices and --option=value split."""
    given = []
    for word in words:
        if word.endswith(".py") or word in ("-m", "torchrun", "python"):
            break
        for part in re.split(r"[\[\]|]", word):
            if part.startswith("--"):
                given.append(part.split("=")[0])
    return given


def help_text(*arguments):
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python"),
                   "MEMTRACE_BUILD_DIR": str(BUILD)}
    result = subprocess.run([sys.executable, "-m", "mem_tracer", *arguments, "--help"],
                            capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode == 0, f"memtrace {' '.join(arguments)} --help: {result.stderr}"
    return result.stdout


MEMTRACE_LINES = [(line, words) for line, words in commands() if words[0] == "memtrace"]


def test_the_readme_shows_commands():
    assert len(MEMTRACE_LINES) >= 10, MEMTRACE_LINES


@pytest.mark.parametrize("line,words", MEMTRACE_LINES, ids=[line for line, _ in MEMTRACE_LINES])
def test_each_memtrace_command_takes_the_options_shown(line, words):
    command = words[1]
    assert not command.endswith(".py"), line
    text = help_text(command)
    missing = [option for option in options(words[2:]) if option not in text]
    assert not missing, f"{line}: `memtrace {command} --help` has no {missing}"


def test_each_make_target_exists():
    makefile = (ROOT / "Makefile").read_text()
    targets = {words[1] for _, words in commands() if words[0] == "make"}
    assert {"demo", "test"} <= targets, targets
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.MULTILINE), target


def test_each_path_into_the_build_is_built():
    paths = {word.split("=", 1)[-1] for _, words in commands() for word in words
             if re.match(r"^(\w+=)?build/", word)}
    assert paths, "the README shows no path into build/"
    for path in paths:
        assert (BUILD / path.removeprefix("build/")).exists(), f"{path}: not in {BUILD}"


def test_each_python_block_is_python():
    for block in blocks("python"):
        ast.parse("\n".join(block))
