"""memtrace: the one command line of memtrace (also `python -m mem_tracer`).

`run` traces a program; report, html, flamegraph, export and parse read a trace with
memtrace-report; estimate and plan predict with memtrace-estimate. The native tools' options
are theirs: they are passed on untouched, so that the two command lines never disagree."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__, _native
from ._run import TORCH_PEAK_KEYS, TORCH_PEAKS_VARIABLE
from .errors import MemTracerError
from .report import FRAMES, GROUPINGS, report_stats
from .simulated_gpu import VALUES
from .tracing import STACK_MODES

# Exit status for a command line memtrace refuses (argparse's, and the native tools').
EXIT_BAD_INPUT = 2
# Exit status of `memtrace run --gpu` when the program ran out of the simulated card's memory
# (Note [Will it fit]).
EXIT_DID_NOT_FIT = 3


@dataclass(frozen=True)
class _Forwarded:
    """A command carried out by a native tool: `tool [leading...] ARGS...`."""

    tool: str
    leading: tuple[str, ...]
    summary: str
    usage: str
    description: str
    examples: tuple[str, ...]


_REPORT = "memtrace-report"
_ESTIMATE = "memtrace-estimate"

_FORWARDED: dict[str, _Forwarded] = {
    "report": _Forwarded(
        _REPORT, ("report",), "print the peak and what was live there, by source line",
        "(TRACE | FOLDER | TRACE TRACE...) [--group-by ...] [--frame ...] [--top N] [--at ...] "
        "[--format text|json|csv] [--estimate est.json] [-o FILE]",
        "Reads a trace and prints the peak of live CUDA memory and what was live there, grouped "
        "by source location, largest first. Given a folder or several traces (a torchrun job's "
        "ranks), it reads them as one job.",
        ("memtrace report trace.bin",
         "memtrace report trace.bin --frame user --group-by function --top 10",
         "memtrace report trace.bin --at oom --format json -o oom.json")),
    "diff": _Forwarded(
        _REPORT, ("diff",), "compare two traces (two runs, two ranks) at their peaks",
        "A B [--group-by ...] [--frame ...] [--top N] [--format text|json] [--fail-over 5%|SIZE] "
        "[-o FILE]",
        "Compares two traces at their peaks: the peaks, and by line, function, module and "
        "category what grew, shrank, appeared and went. With --fail-over it exits 1 when B's peak "
        "is over A's by more than that (a share of A's peak, or a size): a CI check.",
        ("memtrace diff yesterday.bin today.bin",
         "memtrace diff base.bin new.bin --fail-over 5% --format json -o diff.json")),
    "html": _Forwarded(
        _REPORT, ("html",), "write one self-contained HTML page: timeline, flame graph, table",
        "TRACE [-o report.html] [--estimate est.json] [--at ...] [--lanes N] [--points N]",
        "Writes one self-contained HTML file (no network needed): the live bytes over time, "
        "a flame graph of what was live at the peak, and the table of the text report.",
        ("memtrace html trace.bin -o report.html",
         "memtrace html trace.bin -o report.html --estimate est.json")),
    "flamegraph": _Forwarded(
        _REPORT, ("flamegraph",), "write what was live at the peak by full stack (SVG or folded)",
        "TRACE [--format svg|folded] [-o FILE] [--at ...] [--device N]",
        "Writes what was live at --at by full stack: an SVG, or folded stacks for "
        "flamegraph.pl and speedscope.",
        ("memtrace flamegraph trace.bin -o peak.svg",
         "memtrace flamegraph trace.bin --format folded -o peak.folded")),
    "export": _Forwarded(
        _REPORT, ("export",), "convert a trace for Perfetto or PyTorch's memory_viz",
        "(perfetto | pytorch) TRACE [-o FILE] [--device N] [--points N] [--at ...]",
        "perfetto: Chrome trace event JSON for ui.perfetto.dev; pytorch: PyTorch's memory "
        "snapshot pickle for pytorch.org/memory_viz.",
        ("memtrace export perfetto trace.bin -o trace.json",
         "memtrace export pytorch trace.bin -o snapshot.pickle")),
    "live": _Forwarded(
        _REPORT, ("live",), "follow a running process's memory in the terminal, as it goes",
        "(PID | TRACE | FOLDER) [--interval SECONDS] [--group-by line|function|file] "
        "[--frame ...] [--top N] [--once [--format text|json]]",
        "Follows the trace a running process writes (or every rank of a local job: give the "
        "PID of torchrun, or of memtrace run, or the job's folder), refreshed in the terminal: "
        "the bytes live now and at the peak so far, by line and by nn.Module. It reads the "
        "trace file from another terminal and asks nothing of the process: start it any time, "
        "quit with q.",
        ("memtrace live 1234", "memtrace live memtrace-job-42/",
         "memtrace live 1234 --once --format json")),
    "parse": _Forwarded(
        _REPORT, ("parse",), "print every record of a trace as a line of text",
        "TRACE", "Prints every record of a trace as a line of text (for tests and debugging).",
        ("memtrace parse trace.bin | head",)),
    "compact": _Forwarded(
        _REPORT, ("compact",), "rewrite a closed trace smaller (compressed chunks, same records)",
        "TRACE -o SMALLER.bin [-f]",
        "Rewrites a closed trace with its chunks compressed by zlib (format version 9): every "
        "command reads the new file record for record as it read the trace, in about half the "
        "bytes. Prints the bytes an event before and after on stderr.",
        ("memtrace compact trace.bin -o trace.small.bin",)),
    "estimate": _Forwarded(
        _ESTIMATE, (), "predict the GPU memory of one forward pass of a TorchScript model",
        "(MODEL.pt | MODEL.pt2 | STEP.json) --input SHAPE[:DTYPE] [--input ...] "
        "[--semantics eager|torchscript] [--device PROFILE] [--format text|json|graph] "
        "[--output FILE]",
        "Predicts the GPU memory one forward pass of a TorchScript model takes, from its IR "
        "alone, on a CPU (docs/estimate-format.md). A torch.export archive (.pt2) is recorded "
        "on fake tensors first; a graph file (.json, mem_tracer.estimate(training=True)) is "
        "read as it is.",
        ("memtrace estimate model.pt --input 8x3x224x224",
         ("memtrace estimate model.pt --input 4x128:int64 --device cuda-sm90 --format json "
          "--output est.json"))),
    "plan": _Forwarded(
        _ESTIMATE, (), "find the largest batch that fits a memory budget, or sweep batches",
        "--budget SIZE | --batch N,N,... MODEL.pt --input SHAPE[:DTYPE] [--input ...] "
        "[estimate's options]",
        "Sweeps the batch dimension (dimension 0 of every input) of a TorchScript model and, "
        "with --budget, finds the largest batch whose forward pass fits SIZE for PyTorch's "
        "caching allocator, replaying it on each candidate batch.",
        ("memtrace plan --budget 24GiB model.pt --input 1x3x224x224",
         "memtrace plan --batch 1,8,32 model.pt --input 1x128:int64 --format json")),
}

_RUN_EXAMPLES = (
    "memtrace run train.py --epochs 1",
    "memtrace run torchrun --nproc-per-node 8 train.py   (a trace per rank, one folder)",
    "memtrace run -o trace.bin --frame user train.py",
    "memtrace run --stacks all -m my_package.train --config small.yaml",
    "memtrace run --gpu h100 train.py   (on a simulated H100 80GB: no GPU needed)",
    "memtrace run --flight 1000000 train.py   (a file the size of what is live: week-long jobs)",
    "memtrace run --gpu l4 --gpu-memory 22GiB train.py   (exit status 3: it did not fit)",
    "memtrace train.py        (the same as memtrace run train.py)",
)


def _fill(text: str) -> str:
    return textwrap.fill(text, width=79)


def _examples(lines: tuple[str, ...]) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _program_name() -> str:
    """How the user called us, for usage lines: `memtrace`, or `python -m mem_tracer`."""
    return "python -m mem_tracer" if Path(sys.argv[0]).name == "__main__.py" else "memtrace"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_fill("Where does my GPU memory go: trace a program's CUDA allocations with "
                          "their Python lines, read the trace, predict a model's peak before "
                          "running it."),
        epilog=_examples(("memtrace run train.py --epochs 1",
                          "memtrace report memtrace-1234.bin --frame user",
                          "memtrace html memtrace-1234.bin -o report.html",
                          "memtrace plan --budget 24GiB model.pt --input 1x3x224x224"))
        + "\n\n" + _fill(f"`{prog} COMMAND --help` explains a command. `{prog} script.py ...` "
                         f"is `{prog} run script.py ...`, and `{prog} -m module ...` is "
                         f"`{prog} run -m module ...`."))
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show the version and what this install can trace, then exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run", help="run a Python program with memtrace preloaded, then print the report",
        usage=f"{prog} run [options] (script.py | -m module) [args...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_fill("Traces an unmodified Python program (LD_PRELOAD, set up for you) and "
                          "prints the report when it ends. Everything after the script (or -m "
                          "MODULE) is the program's own, passed on untouched; its exit status "
                          "is passed on. `run torchrun ...` traces every rank of the job "
                          "into one folder (-o names it) and prints the job's report."),
        epilog=_examples(_RUN_EXAMPLES))
    run.add_argument("--version", action=_Version, nargs=0,
                     help="show the version and what this install can trace, then exit")
    run.add_argument("--output", "-o", default=None,
                     help="trace file; %%p becomes the program's pid (default: memtrace-%%p.bin); "
                          "under torchrun the folder of the ranks' traces (default: "
                          "memtrace-job-PID, PID memtrace's own)")
    run.add_argument("--stacks", choices=STACK_MODES, default="python",
                     help="stacks to record with each allocation (default: %(default)s)")
    run.add_argument("--top", type=int, default=20, help="rows of the report (default: %(default)s)")
    run.add_argument("--group-by", choices=GROUPINGS, default="line",
                     help="how to group the report's rows (default: %(default)s)")
    run.add_argument("--frame", choices=FRAMES, default="user",
                     help="the Python frame an allocation is attributed to: the innermost in your "
                          "own code, or the innermost, where the allocating call is "
                          "(default: %(default)s)")
    run.add_argument("--quiet", "-q", action="store_true", help="write the trace, print no report")
    run.add_argument("--no-compact", dest="compact", action="store_false",
                     help="keep the trace as the recorder wrote it; by default it is rewritten "
                          "with compressed chunks once the program has exited, the same records "
                          "in about half the bytes (memtrace compact)")
    run.add_argument("--flight", metavar="N", type=int, default=None,
                     help="the flight recorder: a file the size of what is live however long the "
                          "run, with the live set at the peak, at the end (or the first failed "
                          "allocation), every training step's peak and at least the last N "
                          "events (docs/trace-format.md)")
    run.add_argument("--gpu", metavar="PROFILE", default=None,
                     help="run on a simulated card instead of a GPU (docs/simulated-gpu.md): "
                          "h100-80gb, h200, a100-40gb, a100-80gb, l4, rtx-4090 (or an alias: "
                          "h100, a100, 4090), or a profile file. Sizes are the card's, no kernel "
                          "runs; exit status 3 when the program ran out of its memory")
    run.add_argument("--gpu-memory", metavar="SIZE", default=None,
                     help="each simulated card's memory instead of the profile's (24GiB, 80GB)")
    run.add_argument("--gpu-count", metavar="N", type=int, default=None,
                     help="simulated cards (default: 1; under torchrun, --nproc-per-node)")
    run.add_argument("--gpu-max-reads", metavar="N", type=int, default=DEFAULT_MAX_READS,
                     help="on a simulated card, fail the program's reads of device values past "
                          "N (a loop waiting on a computed value never ends there; 0: no limit; "
                          "default: %(default)s)")
    run.add_argument("--gpu-refuse-unknown-sizes", action="store_true",
                     help="on a simulated card, refuse the sizes a library cannot know (cuFFT's "
                          "plans, cuSOLVER's buffers, cuDNN's RNN spaces) instead of running on "
                          "an estimate the verdict bounds (Note [Sizes nobody measured])")
    run.add_argument("--values", choices=VALUES, default="known",
                     help="on a simulated card, the values the program reads back: known (what "
                          "the program determined itself is known, what a kernel computes from "
                          "the card's data reads as zero or as its listed worst case), cpu "
                          "(every op's values computed on the host beside the card: real "
                          "routing, detections, end tokens, at a CPU run's cost), zeros (every "
                          "value a kernel computes reads as zero) (default: %(default)s; "
                          "docs/simulated-gpu.md)")
    run.add_argument("--values-memory", metavar="SIZE", default=None,
                     help="with --values cpu, the host memory the values may hold; past it new "
                          "values are unknown (default: 16GiB)")
    # REMAINDER: -m takes the module and, untouched, every argument after it.
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
                     help="-m MODULE [args...]: run a library module as a script, as python -m "
                          "does")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]",
                     help="the script and its own arguments")
    params = commands.add_parser(
        "params", help="list a model's parameters and buffers by module (shape, dtype, bytes)",
        usage=f"{prog} params MODEL [--values] [--json] [-o FILE]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_fill("Lists every parameter and buffer of a model file with its module "
                          "path, shape, dtype and bytes, grouped by module, a tied weight "
                          "counted once (the total is what memtrace-estimate counts as the "
                          "weights). MODEL: a TorchScript file, a torch.export archive (.pt2), "
                          "a state dict saved by torch.save, or a .safetensors file. --values "
                          "reads the values too: mean, std, min, max and the share of zeros."),
        epilog=_examples(("memtrace params model.pt", "memtrace params model.safetensors --json",
                          "memtrace params model.pt2 --values -o params.txt")))
    params.add_argument("model", metavar="MODEL", help="the model file")
    params.add_argument("--values", action="store_true",
                        help="read the values: mean, std, min, max, share of exact zeros")
    params.add_argument("--json", action="store_true", help="JSON instead of text")
    params.add_argument("--output", "-o", default=None, help="write to FILE instead of stdout")
    for name, command in _FORWARDED.items():
        # No option is the front door's: prefix_chars no argument starts with makes every
        # argument a plain value, passed on as given (--help is answered in _forward).
        commands.add_parser(name, help=command.summary, add_help=False, prefix_chars="\0",
                            usage=_usage(prog, name, command)).add_argument(
            "arguments", nargs=argparse.REMAINDER)
    return parser


def _usage(prog: str, name: str, command: _Forwarded) -> str:
    """A forwarded command's usage line for argparse, which formats it with %: a literal one
    (`--fail-over 5%`) is doubled."""
    return f"{prog} {name} {command.usage}".replace("%", "%%")


def _forwarded_help(prog: str, name: str, command: _Forwarded) -> str:
    parser = argparse.ArgumentParser(
        prog=f"{prog} {name}", usage=_usage(prog, name, command), add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_fill(command.description),
        epilog=_examples(command.examples))
    text = parser.format_help()
    try:
        tool = _native.tool_path(command.tool)
    except MemTracerError as error:
        return f"{text}\n(the options are {command.tool}'s, and it is not here: {error})\n"
    # The tool's help for this command (its subcommand's options), not its top-level help.
    options = subprocess.run([str(tool), *command.leading, "--help"], capture_output=True,
                             text=True, check=False)
    return f"{text}\nThe options are {command.tool}'s, passed on as given:\n\n{options.stdout}"


def _exit_status(status: int) -> int:
    """A child's status as a shell reports it: 128 + N for a child killed by signal N."""
    return 128 - status if status < 0 else status


def _call(command: list[str], environment: dict[str, str] | None = None) -> tuple[int, int]:
    """Runs `command`; returns (its exit status, its pid). Ctrl-C reaches the child too (same
    process group): let it finish and take its status."""
    process = subprocess.Popen(command, env=environment)
    while True:
        try:
            return _exit_status(process.wait()), process.pid
        except KeyboardInterrupt:
            continue


class _BadInput(MemTracerError):
    """A command line the front door refuses: exit status 2, as argparse's."""


def _forward(prog: str, name: str, arguments: list[str]) -> int:
    command = _FORWARDED[name]
    if any(argument in ("-h", "--help") for argument in arguments):
        sys.stdout.write(_forwarded_help(prog, name, command))
        return 0
    if name == "plan" and not any(argument.split("=")[0] in ("--budget", "--batch")
                                  for argument in arguments):
        raise _BadInput("plan needs --budget SIZE (the largest batch that fits) or --batch N,N,... "
                        f"(see {prog} plan --help)")
    estimator = command.tool == _ESTIMATE
    tool = str(_native.estimator_path() if estimator else _native.tool_path(command.tool))
    if name == "estimate" and any(argument.endswith(".pt2") for argument in arguments):
        return _estimate_export_archive(tool, arguments)
    environment = _native.estimator_environment() if estimator else None
    return _call([tool, *command.leading, *arguments], environment)[0]


def _estimate_export_archive(tool: str, arguments: list[str]) -> int:
    """`memtrace estimate model.pt2 --input ...`: the torch.export archive is recorded on fake
    tensors (one forward, mem_tracer.estimator.step_graph) into a graph file, which
    memtrace-estimate reads with the other options."""
    import tempfile

    archive = next(argument for argument in arguments if argument.endswith(".pt2"))
    rest: list[str] = []
    specs: list[str] = []
    pending = iter(arguments)
    for argument in pending:
        if argument == archive:
            continue
        if argument == "--input":
            specs.append(next(pending, ""))
        elif argument.startswith("--input="):
            specs.append(argument.removeprefix("--input="))
        elif argument in ("--semantics", "--batch", "--budget", "--example-counts"):
            raise _BadInput(f"estimate: {argument} does not apply to a torch.export archive "
                            "(mem_tracer.estimate and mem_tracer.plan sweep its batch)")
        else:
            rest.append(argument)
    if not specs:
        raise _BadInput("estimate: give the archive's inputs with --input SHAPE[:DTYPE]")
    try:
        import warnings

        import torch

        from .estimator import step_graph
        with warnings.catch_warnings():  # torch.export's own deprecations are not the user's
            warnings.simplefilter("ignore")
            module = torch.export.load(archive).module()
        inputs = [_example_tensor(torch, spec) for spec in specs]
        document = step_graph.record(module, inputs, training=False)
    except ImportError as error:
        raise MemTracerError(f"estimate: {archive} needs torch (pip install torch): "
                             f"{error}") from error
    except step_graph.StepGraphError as error:
        raise MemTracerError(f"estimate: {archive}: {error}") from error
    except (RuntimeError, ValueError, OSError) as error:
        raise MemTracerError(f"estimate: {archive}: {str(error).strip().splitlines()[0]}") from error
    with tempfile.TemporaryDirectory(prefix="mem_tracer-") as work:
        graph = step_graph.write(document, Path(work) / "forward.json")
        return _call([tool, str(graph), *rest], _native.estimator_environment())[0]


def _example_tensor(torch: Any, spec: str) -> Any:
    """A tensor of the shape and dtype `SHAPE[:DTYPE]` names (zeros: only its shape is used)."""
    shape_text, _, dtype_text = spec.partition(":")
    try:
        shape = [int(size) for size in shape_text.split("x")] if shape_text else []
    except ValueError:
        raise _BadInput(f"estimate: --input {spec}: expected SHAPE[:DTYPE], e.g. 4x128:int64") from None
    dtype = getattr(torch, dtype_text or "float32", None)
    if not isinstance(dtype, torch.dtype):
        raise _BadInput(f"estimate: --input {spec}: unknown dtype {dtype_text}")
    return torch.zeros(shape, dtype=dtype)


# Note [Tracing a torchrun job]
# torchrun starts one worker process per rank with the environment it was given, so LD_PRELOAD
# and MEMTRACE_* reach every rank. Each worker is also started through mem_tracer._run (the
# training hooks: categories, phases, steps), by torchrun's own -m option; torchrun's own
# parser finds where its options end and the script begins. The ranks' files go to one folder,
# named by the job id, rank, local rank and restart count the recorder reads from torchrun's
# variables (Note [A job's ranks] in tracer/format/records.h), so that a restarted rank writes
# a new file and keeps the failed attempt's.
_RANK_FILE = "memtrace-%j-rank%r-local%l-attempt%a.bin"


def _is_launcher(program: list[str]) -> bool:
    return bool(program) and Path(program[0]).name == "torchrun"


def _torchrun_through_bootstrap(program: list[str]) -> list[str]:
    """`torchrun [options] script.py args` as `torchrun [options] -m mem_tracer._run script.py
    args` (and `torchrun -m module` as `torchrun -m mem_tracer._run -m module`); unchanged with
    --no-python, whose workers are not Python programs."""
    try:
        from torch.distributed.run import get_args_parser
    except ImportError as error:
        raise MemTracerError(f"run: torchrun needs torch (pip install torch): {error}") from error
    arguments = program[1:]
    parsed = get_args_parser().parse_args(arguments)
    script = len(arguments) - len(parsed.training_script_args) - 1
    if script < 0 or arguments[script] != parsed.training_script:
        raise _BadInput(f"run: cannot tell where torchrun's options end in {' '.join(program)}")
    options, rest = arguments[:script], arguments[script + 1:]
    if parsed.no_python:
        return program
    if parsed.module:
        return [program[0], *options, "mem_tracer._run", "-m", parsed.training_script, *rest]
    return [program[0], *options, "-m", "mem_tracer._run", parsed.training_script, *rest]


def _run_job(arguments: argparse.Namespace, program: list[str]) -> int:
    """`memtrace run torchrun ...`: every rank traced into one folder, then the job's report."""
    launcher = shutil.which(program[0]) or program[0]
    command = _torchrun_through_bootstrap([launcher, *program[1:]])
    folder = Path(os.path.abspath(arguments.output or f"memtrace-job-{os.getpid()}"))
    folder.mkdir(parents=True, exist_ok=True)
    environment = _traced_environment(str(folder / _RANK_FILE), arguments.stacks, arguments.flight)
    if arguments.gpu:
        environment = _simulated(arguments, environment, _torchrun_processes(program))
    status, _ = _call(command, environment)
    traces = sorted(folder.glob("*.bin"))
    if not traces:
        ended = f"exited with status {status}" if status else "ended"
        print(f"memtrace: the job {ended} without a CUDA allocation in any rank: no trace was "
              "written", file=sys.stderr)
        return status
    if not arguments.quiet:
        print(f"\n== memtrace: {len(traces)} traces in {folder}", flush=True)
        _call([str(_native.tool_path(_REPORT)), str(folder), "--top", str(arguments.top),
               "--group-by", arguments.group_by, "--frame", arguments.frame])
    summaries = [summary for summary in map(_trace_summary, traces) if summary is not None] \
        if arguments.gpu else []
    if arguments.compact:
        _compact_traces(traces, arguments.quiet)
    if arguments.gpu:
        return _verdict(arguments, summaries, status)
    return status


def _traced_environment(output: str, stacks: str, flight: int | None = None) -> dict[str, str]:
    library = _native.library_path()
    environment = dict(os.environ)
    environment["LD_PRELOAD"] = " ".join(filter(None, [str(library), environment.get("LD_PRELOAD")]))
    environment["MEMTRACE_OUTPUT"] = output
    environment["MEMTRACE_STACKS"] = stacks
    if flight is not None:
        environment["MEMTRACE_MODE"] = "flight"
        environment["MEMTRACE_FLIGHT_EVENTS"] = str(flight)
    return environment


def run(arguments: argparse.Namespace) -> int:
    """Runs the program under LD_PRELOAD and reports on its trace; returns its exit status."""
    if arguments.flight is not None and arguments.flight < 1:
        raise _BadInput("run --flight: the events to keep, at least 1")
    if arguments.module is not None:
        if not arguments.module:
            raise _BadInput("run: -m needs a module name")
        module, *program_arguments = arguments.module
        command = [sys.executable, "-m", "mem_tracer._run", "-m", module, *program_arguments]
        name = module
    else:
        program = list(arguments.program)
        if program[:1] == ["--"]:
            program = program[1:]
        if not program:
            raise _BadInput("run: give a script (memtrace run script.py) or -m module")
        name = program[0]
        if _is_launcher(program):
            return _run_job(arguments, program)
        if not os.path.exists(name):
            raise _BadInput(f"run: {name} does not exist")
        # Through mem_tracer._run: the training hooks first (categories, phases, steps).
        command = [sys.executable, "-m", "mem_tracer._run", *program]
    output = os.path.abspath(arguments.output or "memtrace-%p.bin")
    environment = _traced_environment(output, arguments.stacks, arguments.flight)
    if arguments.gpu:
        environment = _simulated(arguments, environment, 1)
    descriptor, peaks_file = tempfile.mkstemp(prefix="memtrace-torch-peaks-", suffix=".json")
    os.close(descriptor)
    environment[TORCH_PEAKS_VARIABLE] = peaks_file
    try:
        status, pid = _call(command, environment)
        torch_peaks = _read_torch_peaks(peaks_file)
    finally:
        os.unlink(peaks_file)
    trace = Path(output.replace("%p", str(pid)))
    if not trace.exists():
        ended = f"exited with status {status}" if status else "ended"
        why = ""
        torch = _native.torch_directory()
        if torch is not None and not _native.torch_is_cuda_build(torch):
            why = (f" (this Python's torch {_native.torch_release_at(torch)} is a CPU build, "
                   "which never allocates GPU memory)")
        print(f"memtrace: {name} {ended} without a CUDA allocation: no trace was written{why}",
              file=sys.stderr)
        return status
    if not arguments.quiet:
        print(f"\n== memtrace: {trace}", flush=True)
        report_stats(top=arguments.top, group_by=arguments.group_by, frame=arguments.frame,
                     trace=trace)
    summary = _trace_summary(trace) if torch_peaks or arguments.gpu else None
    if arguments.compact:
        _compact_traces([trace], arguments.quiet)
    if torch_peaks and summary is not None and arguments.flight is None:
        differences = torch_counter_differences(summary, torch_peaks)
        if differences:
            print(differences, file=sys.stderr, flush=True)
    if arguments.gpu:
        return _verdict(arguments, [summary] if summary is not None else [], status)
    return status


# Note [memtrace run compacts the trace]
# The recorder writes plain chunks (its records go straight into the mapped file: Note
# [Compressed chunks] in tracer/format/records.h), so `memtrace run` rewrites each trace with
# compressed chunks once the program has exited, in its own process (memtrace-report compact):
# the traced program runs the same code, and pays nothing. The copy is written beside the trace
# (TRACE.compacting, which `memtrace live` never takes for a trace) and renamed over it only
# once whole, with the trace's permissions: a crash or a full disk midway leaves the trace as the
# recorder wrote it, and so does any failure to compact, said in one line (the exit status stays
# the program's). The report and the summary read the file as written, before the rename, so
# that what they say of it (a process killed in the middle of a chunk) is said; the compacted
# file holds the same records (compact leaves out a cut last record, which no reader reads).
# A copy that is not smaller is dropped. Not compacted: a trace written to something other than
# a regular file, and the traces of the LD_PRELOAD and switch_allocator() paths, which no
# memtrace process outlives (`memtrace compact TRACE -o OUT` compacts them). Ctrl-C during the
# compaction leaves the traces not yet compacted as written. --no-compact keeps the file as
# written.
def _compact_traces(traces: list[Path], quiet: bool) -> None:
    """Compacts each trace in place (Note [memtrace run compacts the trace]); one line on
    stderr: the bytes before and after (not with --quiet), or what could not be compacted."""
    before = after = events = 0
    compacted = 0
    for trace in traces:
        if not trace.is_file():
            continue
        size = trace.stat().st_size
        copy = trace.with_name(trace.name + ".compacting")
        try:
            result = subprocess.run([str(_native.tool_path(_REPORT)), "compact", str(trace),
                                     "-o", str(copy), "--force"],
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
                raise MemTracerError(lines[-1])
            counted = re.search(r": (\d+) events; ", result.stderr)
            smaller = copy.stat().st_size
            if smaller < size:
                shutil.copymode(trace, copy)
                os.replace(copy, trace)
            else:
                smaller = size
                copy.unlink()
        except (MemTracerError, OSError, KeyboardInterrupt) as error:
            with contextlib.suppress(OSError):
                if copy.is_file():
                    copy.unlink()
            interrupted = isinstance(error, KeyboardInterrupt)
            print(f"== memtrace: {trace} left as written, not compacted: "
                  f"{'interrupted (Ctrl-C)' if interrupted else error}", file=sys.stderr, flush=True)
            if interrupted:  # the traces after it too: the user wants the run over
                return
            continue
        compacted += 1
        before += size
        after += smaller
        events += int(counted.group(1)) if counted else 0
    if quiet or not compacted:
        return
    what = "trace compacted" if compacted == 1 else f"{compacted} traces compacted"
    per_event = (f"{before / events:.2f} -> {after / events:.2f} bytes an event; "
                 if events else "")
    print(f"== memtrace: {what}: {before:,} -> {after:,} bytes ({per_event}--no-compact keeps "
          "it as written)", file=sys.stderr, flush=True)


def _trace_summary(trace: Path) -> dict[str, Any] | None:
    """`memtrace-report TRACE --format json --top 0`, read; None when it fails."""
    result = subprocess.run([str(_native.tool_path(_REPORT)), str(trace), "--format", "json",
                             "--top", "0"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return None
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


# Note [PyTorch's counters beside the trace]
# Where memtrace records from inside PyTorch's caching allocator (a trace of tensors), the
# trace's peak is PyTorch's own requested_bytes.all.peak to the byte, and its record of the
# segments PyTorch reserved peaks at reserved_bytes.all.peak. `memtrace run` checks that on
# each run: mem_tracer._run reads the program's torch.cuda.memory_stats() once, at its end, for
# each device it used (only when the program imported torch and initialized CUDA: reading them
# does neither), into the file MEMTRACE_TORCH_PEAKS_FILE names, and the run compares them with
# the trace's peaks and prints one line saying by how much they differ, and nothing when they
# agree. The requested peak is compared only in a trace of tensors alone: with no bridge for
# the program's torch the trace holds its segments, and a library's own cudaMalloc beside
# PyTorch's tensors is in the trace's peak and not in PyTorch's. Not compared either: a flight
# trace (--flight) and the ranks of a torchrun job. A program that calls
# torch.cuda.reset_peak_memory_stats() lowers PyTorch's peaks and not the trace's; the line
# says so when the trace's is the higher. What this cannot see is a program that tracing
# changed (a tensor memtrace kept alive is in both counts): a run without memtrace tells that
# (tests/simulator/test_run_gpu.py compares the two).
def torch_counter_differences(summary: dict[str, Any],
                              torch_peaks: dict[str, dict[str, int]]) -> str | None:
    """The line saying where PyTorch's own peaks at the program's end (`torch_peaks`, as
    mem_tracer._run writes them) differ from the trace's (`summary`: memtrace-report's JSON);
    None where they agree (Note [PyTorch's counters beside the trace])."""
    tensors = summary.get("summary", {}).get("level") == "tensor"
    devices = {str(device.get("device")): device for device in summary.get("devices", [])}
    differences, trace_higher = [], False
    for index, peaks in sorted(torch_peaks.items(), key=lambda item: int(item[0])):
        device = devices.get(index, {})
        compared = []
        if tensors:
            compared.append(("requested", int(device.get("peak_bytes", 0))))
        # Allocated is the report's replay of PyTorch's blocks (Note [Allocated bytes,
        # replayed] in tracer/report/block_replay.h): known only where every block was placed.
        if device.get("torch_allocated_peak_bytes") is not None and "allocated" in peaks:
            compared.append(("allocated", int(device["torch_allocated_peak_bytes"])))
        if device.get("torch_reserved_peak_bytes") is not None:
            compared.append(("reserved", int(device["torch_reserved_peak_bytes"])))
        for name, traced in compared:
            torch_peak = peaks[name]
            if traced != torch_peak:
                trace_higher |= traced > torch_peak
                way = "more" if traced > torch_peak else "less"
                differences.append(f"device {index}'s {TORCH_PEAK_KEYS[name]} is "
                                   f"{torch_peak:,} B, the trace's {traced:,} B "
                                   f"({abs(traced - torch_peak):,} B {way})")
    if not differences:
        return None
    reset = (" (a program that calls torch.cuda.reset_peak_memory_stats() lowers PyTorch's "
             "peaks, not the trace's)") if trace_higher else ""
    return f"== memtrace: PyTorch's own counters differ from the trace: {'; '.join(differences)}" \
           f"{reset}"


def _read_torch_peaks(path: str) -> dict[str, dict[str, int]]:
    """What mem_tracer._run wrote into `path`; {} when it wrote nothing (the program never
    initialized CUDA, or ended without running its end)."""
    try:
        with open(path) as file:
            text = file.read()
        peaks = json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}
    return peaks if isinstance(peaks, dict) else {}


# Note [Will it fit]
# `memtrace run --gpu PROFILE` runs the program on a simulated card (mem_tracer.simulated_gpu)
# and ends with a verdict a pipeline can gate on: the card's memory, the peak, and whether the
# program ran out. It did not fit when PyTorch raised an out-of-memory error the program did
# not survive (mem_tracer._run marks it in the trace: OUT_OF_MEMORY_MARK), or, for a program
# that is not Python, when it failed after an allocation was refused. An allocation refused
# and then retried (PyTorch's caching allocator frees its cache and asks again) or an error
# the program caught and went on from is said, not counted as not fitting: the program ran to
# its end on that card. Exit status: 0 it fit, EXIT_DID_NOT_FIT it did not, EXIT_STOPPED the
# simulated card stopped it (--gpu-max-reads), else the program's own status when it failed for
# another reason.
OUT_OF_MEMORY_MARK = "memtrace: out of memory"
# Exit status when the simulated card refused a read past --gpu-max-reads
# (Note [A run that waits on a value] in simulator/core/device.cpp).
EXIT_STOPPED = 4
DEFAULT_MAX_READS = 100_000


class _Version(argparse.Action):
    """--version: the version, then what this install can do (Note [What an install can do])."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"memtrace {__version__}")
        for line in _native.capabilities():
            print(f"  {line}")
        parser.exit()


def _torch_is_cuda_build() -> bool | None:
    """Whether the torch this Python imports is a CUDA build (read from torch/version.py
    without importing it); None without torch."""
    directory = _native.torch_directory()
    return None if directory is None else _native.torch_is_cuda_build(directory)


def _torchrun_processes(program: list[str]) -> int:
    """How many processes torchrun starts on this node (--nproc-per-node, 1 when not a
    number): each sees that many simulated cards and takes its LOCAL_RANK's."""
    from torch.distributed.run import get_args_parser

    parsed = get_args_parser().parse_args(program[1:])
    try:
        return max(1, int(parsed.nproc_per_node))
    except (TypeError, ValueError):
        return 1


def _simulated(arguments: argparse.Namespace, environment: dict[str, str],
               processes: int) -> dict[str, str]:
    """The traced environment on the simulated card `--gpu` names."""
    from . import simulated_gpu

    if _torch_is_cuda_build() is False:
        raise _BadInput("run --gpu: the torch this Python imports is a CPU build, which never "
                        "uses a GPU: install a CUDA build (pip install torch, on Linux) to run on "
                        "a simulated card")
    memory = simulated_gpu.parse_size(arguments.gpu_memory) if arguments.gpu_memory else None
    count = arguments.gpu_count or processes
    if count < 1:
        raise _BadInput("run --gpu-count: at least one card")
    card = simulated_gpu.profile(arguments.gpu)
    values = {"known": "values the program determined are known, those a kernel computes read "
                       "as zero or their worst case",
              "cpu": "every op's values computed on the host beside it (--values cpu)",
              "zeros": "values a kernel computes read as zero"}[arguments.values]
    values_memory = simulated_gpu.parse_size(arguments.values_memory) \
        if arguments.values_memory else None
    print(f"== memtrace: simulated {card.device_name} x{count} (profile {card.name}, "
          f"{(memory or card.memory_bytes) / 2**30:.1f} GiB each): sizes are the card's, no kernel "
          f"runs, {values}", file=sys.stderr, flush=True)
    return simulated_gpu.environment(card, memory=memory, devices=count,
                                     max_reads=arguments.gpu_max_reads,
                                     refuse_unknown_sizes=arguments.gpu_refuse_unknown_sizes,
                                     values=arguments.values, values_memory=values_memory,
                                     base=environment)


def _verdict(arguments: argparse.Namespace, summaries: list[dict[str, Any]], status: int) -> int:
    """Prints whether the program fit the simulated card and returns the exit status
    (Note [Will it fit]); `summaries`: its traces' JSON reports (_trace_summary)."""
    from . import simulated_gpu

    card = simulated_gpu.profile(arguments.gpu)
    memory = simulated_gpu.parse_size(arguments.gpu_memory) if arguments.gpu_memory else \
        card.memory_bytes
    peak, reserved, marked, refused, reads = 0, None, False, 0, 0
    levels: set[str] = set()
    for summary in summaries:
        for device in summary.get("devices", []):
            peak = max(peak, int(device.get("peak_bytes", 0)))
            if device.get("torch_reserved_peak_bytes") is not None:
                reserved = max(reserved or 0, int(device["torch_reserved_peak_bytes"]))
        levels.add(str(summary["summary"].get("level", "tensor")))
        refused += int(summary["summary"].get("failed_allocations", 0))
        reads = max(reads, int((summary.get("device_reads") or {}).get("count", 0)))
        marked |= any(marker.get("name") == OUT_OF_MEMORY_MARK
                      for marker in summary.get("markers", []))
    if arguments.gpu_max_reads and reads >= arguments.gpu_max_reads and status != 0:
        print(f"== memtrace: STOPPED on a simulated {card.device_name}: the program read device "
              f"values {reads:,} times, up to --gpu-max-reads; values a kernel computes are "
              "zeros on the simulated card, so a loop waiting on one never ends (the report's "
              "reads section names the lines)", file=sys.stderr)
        return EXIT_STOPPED
    did_not_fit = marked or (refused > 0 and status != 0)
    # What the card must hold is what PyTorch's allocator reserved (its cache and fragmentation
    # beside the tensors: Note [PyTorch's own allocator] in tracer/format/records.h), where it
    # was recorded; the tensors' peak otherwise.
    held = peak if reserved is None else max(peak, reserved)
    share = f"{100 * held / memory:.1f} %" if memory else "?"
    # The level the figure is at, said every time: without a bridge for the running torch the
    # trace holds what PyTorch's allocator asked CUDA for (its segments), not its tensors.
    what = ("in tensors" if levels <= {"tensor"} else
            "in CUDA allocations (level: segments; the tensors inside them were not seen)")
    figures = (f"peak {peak / 2**30:.2f} GiB {what}" if reserved is None else
               f"peak {peak / 2**30:.2f} GiB {what}, {reserved / 2**30:.2f} GiB reserved by "
               "PyTorch's caching allocator")
    where = f"{card.device_name} ({card.name}, {memory / 2**30:.1f} GiB)"
    if did_not_fit:
        print(f"== memtrace: DID NOT FIT on a simulated {where}: the program ran out of memory "
              f"(`memtrace report TRACE --at oom` shows what was live then); before it: "
              f"{figures}", file=sys.stderr)
        _say_unknown_sizes(summaries)
        return EXIT_DID_NOT_FIT
    retried = (f"; {refused} allocation(s) were refused (PyTorch retried them, or the program "
               "caught the error and went on)") if refused else ""
    if status != 0:
        print(f"== memtrace: the program failed (exit status {status}) on a simulated {where}, "
              f"not for lack of memory; {figures} ({share}){retried}",
              file=sys.stderr)
        _say_unknown_sizes(summaries)
        return status
    print(f"== memtrace: FITS on a simulated {where}: {figures} ({share} of the "
          f"card){retried}. The CUDA context and libraries' own memory (a few hundred MiB on a "
          "card, not simulated) come out of what is left", file=sys.stderr)
    _say_unknown_sizes(summaries)
    return 0


# Note [The verdict's unknown sizes]
# The simulated libraries answer some sizes without knowing them (Note [Sizes nobody measured]
# in simulator/core/sizes.cpp), and the trace links each answer to the allocation that holds it
# (Note [Sizes in the trace] in tracer/format/records.h). When any was answered, the verdict
# says its peak is approximate: how much of the peak such allocations hold, and by how much at
# most it could be higher, the sum of their upper figures less their sizes (itself an
# estimate where the answers were), or that some answer has no bound; answers of 0 bytes (an
# unmeasured cuDNN plan's workspace) hold nothing at the peak and are named apart. The report's
# section "Sizes nobody measured" lists every answer by line.
def _say_unknown_sizes(summaries: list[dict[str, Any]]) -> None:
    """One line on stderr when the traces' peaks hold sizes nobody measured (Note [The
    verdict's unknown sizes]); nothing when no simulated library answered one."""
    count, held, extra, unbounded, unheld, unheld_unbounded = 0, 0, 0, 0, 0, False
    for summary in summaries:
        sizes = summary.get("simulated_sizes") or {}
        if not sizes.get("count"):
            continue
        count += int(sizes["count"])
        at_peak = sizes.get("at_peak") or {}
        held = max(held, int(at_peak.get("bytes", 0)))
        extra = max(extra, int(at_peak.get("extra_bytes", 0)))
        unbounded = max(unbounded, int(at_peak.get("unbounded", 0)))
        if sizes.get("unheld_at_most") is None:
            unheld_unbounded = True
        else:
            unheld = max(unheld, int(sizes["unheld_at_most"]))
    if not count:
        return
    mib = 2**20
    parts = []
    if held:
        bound = (f"{unbounded} of them without a bound" if unbounded else
                 f"at most {extra / mib:.2f} MiB more")
        parts.append(f"{held / mib:.2f} MiB of it is held by buffers sized by answers the "
                     f"simulated libraries could not know ({bound})")
    if unheld_unbounded or unheld:
        more = "an amount nobody bounded" if unheld_unbounded else f"up to {unheld / mib:.2f} MiB"
        parts.append(f"workspaces answered 0 bytes (nobody measured them) could add {more} "
                     "while in use")
    if not parts:
        parts.append("the answers the simulated libraries could not know hold nothing at it")
    print(f"== memtrace: the peak is approximate: {'; '.join(parts)} ({count:,} such answers, "
          "listed by line in the report's \"Sizes nobody measured\"; a profile's measured_sizes "
          "replaces them)", file=sys.stderr)


def _params(arguments: argparse.Namespace) -> int:
    """`memtrace params MODEL`: mem_tracer.parameter_stats, printed or written."""
    from .parameters import parameter_stats

    stats = parameter_stats(arguments.model, values=arguments.values)
    text = stats.to_json() if arguments.json else str(stats)
    if arguments.output is None:
        try:
            print(text)
        except BrokenPipeError:  # `memtrace params model.pt | head`: the reader had enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    else:
        try:
            Path(arguments.output).write_text(text + "\n")
        except OSError as error:
            raise MemTracerError(f"params: cannot write {arguments.output}: "
                                 f"{error.strerror}") from error
    return 0


def _with_command(argv: list[str]) -> list[str]:
    """`memtrace script.py ...` is `memtrace run script.py ...`: a first argument that is no
    command and no option, but a Python file (or any existing file), is a program to run; and
    `memtrace -m module ...` is `memtrace run -m module ...`."""
    if argv[:1] == ["-m"]:
        return ["run", *argv]
    if not argv or argv[0].startswith("-") or argv[0] in ("run", "params", *_FORWARDED):
        return argv
    return ["run", *argv] if argv[0].endswith(".py") or os.path.isfile(argv[0]) else argv


def main(argv: list[str] | None = None) -> int:
    """The `memtrace` command (and `python -m mem_tracer`); returns the exit status."""
    prog = _program_name()
    arguments = _parser(prog).parse_args(_with_command(sys.argv[1:] if argv is None else argv))
    try:
        if arguments.command == "run":
            return run(arguments)
        if arguments.command == "params":
            return _params(arguments)
        return _forward(prog, arguments.command, arguments.arguments)
    except _BadInput as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemTracerError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT if arguments.command == "run" and arguments.gpu else 1
