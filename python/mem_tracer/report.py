"""report_stats(): the per-line table of what was live at the peak, printed from the trace
by memtrace-report (the same table as on the command line)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal, TextIO, get_args

from . import _native
from .errors import MemTracerError
from .estimator.estimate import write_prediction
from .tracing import last_trace

# memtrace-report's --group-by and --frame.
GroupBy = Literal["line", "function", "file", "stack", "module", "category"]
Frame = Literal["innermost", "user"]
GROUPINGS: tuple[str, ...] = get_args(GroupBy)
FRAMES: tuple[str, ...] = get_args(Frame)
# memtrace-report's --at: a point of the trace by name, or seconds after its start.
At = Literal["peak", "end", "oom"]


def _report_arguments(trace: Path, top: int, group_by: str, frame: str, own: bool = False) -> list[str]:
    """memtrace-report's command line. `own`: the trace of this process, whose report ends
    where tracing was last stopped (allocations made after stop_tracing() do not count)."""
    if group_by not in GROUPINGS:
        raise MemTracerError(f"group_by must be one of {', '.join(GROUPINGS)}, not {group_by!r}")
    if frame not in FRAMES:
        raise MemTracerError(f"frame must be one of {', '.join(FRAMES)}, not {frame!r}")
    return [str(_native.tool_path("memtrace-report")), str(trace), "--top", str(top),
            "--group-by", group_by, "--frame", frame, "--until", "stop" if own else "end"]


def _run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise MemTracerError(result.stderr.strip() or f"{command[0]} exited {result.returncode}")
    return result.stdout


def report_stats(top: int = 20, group_by: GroupBy = "line", file: TextIO | None = None, *,
                 frame: Frame = "user", trace: str | os.PathLike[str] | None = None,
                 predict: Any = None) -> None:
    """Prints the peak and what was live there, by source location: the columns
    ``Mem, Cumulative Mem, Median, Count, Location``, largest first.

    ``group_by``: line, function, file, stack or module. Each allocation is attributed to the
    innermost frame of your own code; ``frame="innermost"`` attributes it to the innermost
    frame, where the allocating call is (inside torch, often).
    The report of this process's trace ends where tracing was last stopped: what the
    program allocates after stop_tracing() is still counted by memory_allocated() but does
    not move the reported peak. ``trace`` reads another trace file, whole. ``predict`` adds the estimator's
    prediction beside the measurement: the predicted peak next to the measured one, and per
    location the bytes predicted live where the predicted peak is (library workspaces on the
    lines that take them) next to those live at the measured peak. It takes ``(model, example_inputs)`` (see mem_tracer.estimate), a saved
    TorchScript path with example inputs, an Estimate, or an estimate JSON file.

    A run on the simulated GPU says so on each device's line, and lists its reads of device
    values by line; a trace with a failed allocation shows the out-of-memory (the request, its
    line and module, what was live, how far over the card's memory), as memtrace-report does."""
    own = trace is None
    path = Path(trace) if trace is not None else last_trace()
    out = file if file is not None else sys.stdout
    if predict is not None:
        with tempfile.TemporaryDirectory(prefix="mem_tracer-") as work:
            prediction = write_prediction(predict, Path(work))
            out.write(_run(_report_arguments(path, top, group_by, frame, own) + ["--estimate", str(prediction)]))
        return
    out.write(_run(_report_arguments(path, top, group_by, frame, own)))


def report_data(top: int = 20, group_by: GroupBy = "line", *, frame: Frame = "user",
                trace: str | os.PathLike[str] | None = None, at: At | float = "peak") -> dict[str, Any]:
    """The report as data (memtrace-report's JSON): summary, devices, marks, and the rows of
    the table under ``["live"]["rows"]``. ``at``: "peak", "end", "oom" (the first failed
    allocation), or seconds after the start. ``["simulated"]`` describes the simulated GPU
    the run was made on (None for a card), ``["device_reads"]`` its reads of device values by
    line, ``["oom"]`` the first failed allocation (None without one)."""
    own = trace is None
    path = Path(trace) if trace is not None else last_trace()
    data: dict[str, Any] = json.loads(_run(_report_arguments(path, top, group_by, frame, own)
                                            + ["--format", "json", "--at", str(at)]))
    return data
