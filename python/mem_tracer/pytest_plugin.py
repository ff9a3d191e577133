"""GPU memory limits in a test suite: the pytest plugin (registered under the `pytest11` entry
point; off unless asked).

    pytest --memtrace                 # each test's GPU memory, and the tests by peak at the end
    pytest --memtrace-gpu l4          # the same, on a simulated L4 (no GPU needed)

    @pytest.mark.limit_gpu_memory("2 GiB")        # fails a test whose peak is over 2 GiB
    @pytest.mark.limit_gpu_leaks("0 B", warmups=1) # fails a test that leaves memory allocated

ini options: `memtrace = true` turns it on, `memtrace_gpu = l4` picks the simulated card.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._sizes import size_text
from .errors import MemTracerError

# Note [The library before the first CUDA allocation]
# libmemtrace.so sees CUDA memory through its LD_PRELOAD hooks (and, on the simulated card, the
# simulated libraries must be the ones PyTorch loads): both must be in the process from exec,
# before torch is imported, and a conftest or a plugin may import torch before any test runs.
# So a session asked to trace that does not have them is executed again, from its start, with
# them (os.execve at pytest_load_initial_conftests: the options and the ini file are read, no
# conftest is imported yet). _REEXECUTED guards against a loop: a session re-executed that still
# lacks them stops with one line. MEMTRACE_AUTOSTART=0: the library counts from its load and
# writes nothing until the plugin opens a test's trace; the programs the tests start inherit
# the environment, count, and write no file either.
_REEXECUTED = "MEMTRACE_PYTEST_REEXECUTED"

# Rows of the live table shown under a failing test, and beside each test of the summary.
_LINES_SHOWN = 5
_SUMMARY_LINES = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memtrace", "GPU memory (memtrace)")
    group.addoption("--memtrace", action="store_true", default=False,
                    help="trace each test's GPU memory: check limit_gpu_memory / limit_gpu_leaks, "
                         "and list the tests by peak at the end")
    group.addoption("--memtrace-gpu", metavar="PROFILE", default=None,
                    help="run the session on a simulated GPU of that profile (l4, h100, h200, "
                         "...; implies --memtrace)")
    group.addoption("--memtrace-top", metavar="N", type=int, default=10,
                    help="tests listed by peak at the end (default 10; 0: none)")
    parser.addini("memtrace", type="bool", default=False,
                  help="trace each test's GPU memory, as --memtrace")
    parser.addini("memtrace_gpu", default="",
                  help="the simulated GPU's profile the session runs on, as --memtrace-gpu")


def pytest_configure(config: pytest.Config) -> None:
    # Registered always, so that --strict-markers accepts the markers in a session that does
    # not trace.
    config.addinivalue_line(
        "markers", "limit_gpu_memory(size): fail the test if its GPU memory peaks above size "
                   "(\"2 GiB\"; checked under --memtrace)")
    config.addinivalue_line(
        "markers", "limit_gpu_leaks(size, warmups=0): fail the test if it leaves more than size "
                   "of GPU memory allocated after it returns; warmups: calls before the one "
                   "checked (checked under --memtrace)")
    if _enabled(config):
        try:
            session = _Session(config)
        except MemTracerError as error:
            raise pytest.UsageError(f"memtrace: {error}") from None
        config.pluginmanager.register(session, "memtrace-session")
    else:
        config.pluginmanager.register(_Unchecked(), "memtrace-unchecked")


def _option(config: pytest.Config, name: str) -> Any:
    # Before the command line is parsed whole (pytest_load_initial_conftests), the options
    # are only in known_args_namespace; config.option holds their defaults until then.
    early = getattr(config, "known_args_namespace", None)
    value = getattr(early, name, None) if early is not None else None
    return value if value is not None else config.getoption(name)


def _profile_option(config: pytest.Config) -> str | None:
    profile = _option(config, "memtrace_gpu") or str(config.getini("memtrace_gpu") or "")
    return profile or None


def _enabled(config: pytest.Config) -> bool:
    return bool(_option(config, "memtrace") or config.getini("memtrace")
                or _profile_option(config))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    """Note [The library before the first CUDA allocation]."""
    if not _enabled(early_config):
        return
    profile = _profile_option(early_config)
    try:
        wanted = _session_environment(profile)
    except MemTracerError as error:
        raise pytest.UsageError(f"memtrace: {error}") from None
    if _has_environment(wanted, profile):
        # The guard is this execution's: a session the tests start (pytester, another card)
        # may need one of its own.
        os.environ.pop(_REEXECUTED, None)
        return
    if os.environ.get(_REEXECUTED):
        raise pytest.UsageError(
            "memtrace: this session was executed again with libmemtrace.so in LD_PRELOAD and "
            "still does not have it (something in between drops LD_PRELOAD)")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        raise pytest.UsageError(
            "memtrace: an xdist worker without libmemtrace.so preloaded: start the whole "
            "session with --memtrace, so that the workers inherit it")
    if list(early_config.invocation_params.args) != sys.argv[1:]:
        raise pytest.UsageError(
            "memtrace: pytest.main() in a running program cannot be executed again with "
            "libmemtrace.so preloaded: run pytest as a command, or run the program under "
            "`memtrace run` / LD_PRELOAD")
    wanted[_REEXECUTED] = "1"
    # pytest captures the output already (its capture plugin wraps this hook): the process
    # executed again must write to the terminal, not into the capture's temporary files.
    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    # sys.orig_argv (3.10) is the interpreter's own command line, options and -m included.
    argv = list(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    os.execve(sys.executable, argv, wanted)


def _session_environment(profile: str | None) -> dict[str, str]:
    """This process's environment with libmemtrace.so first in LD_PRELOAD, and the simulated
    card of `profile` after it (MemTracerError for an unknown profile or a library not built)."""
    from . import _native

    library = str(_native.library_path())
    environment = dict(os.environ)
    preload = [entry for entry in environment.get("LD_PRELOAD", "").replace(":", " ").split()
               if Path(entry).name != "libmemtrace.so"]
    environment["LD_PRELOAD"] = " ".join([library, *preload])
    environment.setdefault("MEMTRACE_AUTOSTART", "0")
    if profile is not None:
        from . import simulated_gpu

        environment = simulated_gpu.environment(profile, base=environment)
    return environment


def _has_environment(wanted: dict[str, str], profile: str | None) -> bool:
    """Whether this process was started with what `wanted` preloads (LD_PRELOAD as exec read it)
    and on the card it names."""
    from .tracing import _preload_list_at_exec

    loaded = {Path(entry).name for entry in _preload_list_at_exec()}
    needed = {Path(entry).name for entry in wanted["LD_PRELOAD"].split()}
    if not needed <= loaded:
        return False
    profile_path = wanted.get("MEMTRACE_GPU_PROFILE")
    return profile is None or os.environ.get("MEMTRACE_GPU_PROFILE") == profile_path


@dataclasses.dataclass(frozen=True)
class _Limits:
    """What a test's markers ask for."""

    memory: int | None = None
    memory_text: str = ""
    leaks: int | None = None
    leaks_text: str = ""
    warmups: int = 0


def _limits(item: pytest.Item) -> _Limits:
    """The test's limits; pytest.fail (one line, the session goes on) for one that does not
    parse."""
    from .simulated_gpu import parse_size

    found: dict[str, Any] = {}
    for name in ("limit_gpu_memory", "limit_gpu_leaks"):
        marker = item.get_closest_marker(name)
        if marker is None:
            continue
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            pytest.fail(f"{name} takes one size, as in {name}(\"2 GiB\"), not {marker.args!r}",
                        pytrace=False)
        try:
            found[name] = (parse_size(marker.args[0]), marker.args[0])
        except MemTracerError as error:
            problem = str(error)
        else:
            problem = ""
        if problem:  # outside the except block: one line, without the exception it replaces
            pytest.fail(f"{name}: {problem}", pytrace=False)
        if name == "limit_gpu_leaks":
            unknown = set(marker.kwargs) - {"warmups"}
            warmups = marker.kwargs.get("warmups", 0)
            if unknown or not isinstance(warmups, int) or warmups < 0:
                pytest.fail(f"limit_gpu_leaks takes warmups=N (N >= 0) besides the size, not "
                            f"{marker.kwargs!r}", pytrace=False)
            found["warmups"] = warmups
    memory = found.get("limit_gpu_memory", (None, ""))
    leaks = found.get("limit_gpu_leaks", (None, ""))
    return _Limits(memory=memory[0], memory_text=memory[1], leaks=leaks[0], leaks_text=leaks[1],
                   warmups=found.get("warmups", 0))


@dataclasses.dataclass
class _Measure:
    """One test's call, measured: the counters of libmemtrace.so (bytes of the tensors the
    program asked for, all devices) and the trace of the call."""

    trace: Path  # from the call's start
    checked_trace: Path | None = None  # from the checked call's start, after warmups
    at_call: int = 0  # live when the call began (fixtures, earlier tests)
    before: int = 0  # live when the checked call began (after the warmups)
    warmups_peak: int = 0  # the most live at once during the warmups
    peak: int = 0  # the most live at once during the call, warmups included
    after: int = 0  # live after the checked call returned
    forked: bool = False
    out_of_memory: bool = False  # the call raised PyTorch's OutOfMemoryError
    # PyTorch's requested_bytes.all.peak of each device when the call began (Note [PyTorch's
    # counters beside each test]); and what the check found, None where the two agree.
    torch_peaks: dict[int, int] = dataclasses.field(default_factory=dict)
    counters: str | None = None

    def peak_trace(self) -> tuple[Path, str]:
        """The trace whose peak is the call's peak, and what its untraced bytes are."""
        if self.checked_trace is not None and self.peak > self.warmups_peak:
            return self.checked_trace, "live before the checked call (untraced)"
        return self.trace, "live before the test's call (untraced)"

    @property
    def leaked(self) -> int:
        return self.after - self.before


_LIMITS = pytest.StashKey[_Limits]()
_FAILURE = pytest.StashKey[str]()


@dataclasses.dataclass(frozen=True)
class Step:
    """One training step's figures, at its peak."""

    number: int  # as the optimizer counted it in this process (from 1)
    peak_bytes: int
    peak_phase: str  # forward, backward, optimizer or none
    peak_module: str  # the nn.Module running at the peak ("" when none)
    categories: dict[str, int]  # parameter, gradient, optimizer_state, activation, input, ...
    finished: bool  # False: the block ended before this step's optimizer step


@dataclasses.dataclass
class Training:
    """The figures of the training steps inside ``with memtrace_training(...)``: filled when the
    block ends."""

    peak_bytes: int = 0  # the most live at once during the block, everything counted
    categories_at_peak: dict[str, int] = dataclasses.field(default_factory=dict)
    steps: list[Step] = dataclasses.field(default_factory=list)

    def _fill(self, training: dict[str, Any], steps_before: int) -> None:
        self.categories_at_peak = {name: int(value) for name, value in
                                   (training.get("categories_at_peak") or {}).items()}
        # The report's steps are those of the test's whole trace: the block's are numbered after
        # the steps this process had counted before it (an earlier block of the same test).
        steps = [Step(number=int(step["step"]), peak_bytes=int(step["peak_bytes"]),
                      peak_phase=str(step["peak_phase"]), peak_module=str(step["peak_module"]),
                      categories={name: int(value) for name, value in step["categories"].items()},
                      finished=bool(step["finished"]))
                 for step in training.get("steps", [])]
        self.steps = [step for step in steps if step.number > steps_before]


class _Session:
    """The plugin of a session that traces: one per process (each xdist worker has its own, and
    the controller one that only gathers the reports)."""

    def __init__(self, config: pytest.Config) -> None:
        from . import _native, simulated_gpu

        self.config = config
        self.library = _native.library()
        self.report_tool = str(_native.tool_path("memtrace-report"))
        self.directory = Path(tempfile.mkdtemp(prefix="memtrace-pytest-"))
        self.top = max(0, int(config.getoption("memtrace_top")))
        # The card the session runs on when it is a simulated one: --memtrace-gpu's, or the
        # one the session was started on (memtrace run --gpu l4 -- pytest --memtrace).
        profile = _profile_option(config) or os.environ.get("MEMTRACE_GPU_PROFILE")
        self.card = simulated_gpu.profile(profile) if profile else None
        self.count = 0
        self.kept: list[tuple[int, str]] = []  # this process's tests with the highest peaks
        self.results: dict[str, dict[str, Any]] = {}  # every test's figures, by node id
        self.forking = False
        self.measure: _Measure | None = None  # the test whose call runs now
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._fork)

    def _fork(self) -> None:
        self.forking = True

    def _current(self) -> int:
        return int(self.library.memtrace_current_bytes(-1))

    def _start(self, trace: Path) -> None:
        if self.library.memtrace_start(os.fsencode(trace)) != 0:
            from . import _native
            raise MemTracerError(f"memtrace: cannot trace to {trace}: {_native.last_error()}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[_LIMITS] = _limits(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        limits = item.stash.get(_LIMITS, _Limits())
        self.count += 1
        measure = _Measure(trace=self.directory / f"test-{self.count}.bin")
        self.measure = measure
        self.forking = False
        original = getattr(item, "obj", None)
        # A coroutine function (pytest-asyncio's tests) is called by its own plugin, which a
        # wrapper would hide: its leaks are counted over the whole call, warmups not run.
        wrapped = (limits.leaks is not None and callable(original)
                   and not inspect.iscoroutinefunction(original))
        if wrapped:
            item.obj = self._checked_call(original, limits, measure)  # type: ignore[attr-defined]
        # The trace opens with what is live now written as untraced: the report's live table at
        # the peak then has every byte the counters have, the fixtures' as "untraced".
        self._start(measure.trace)
        self.library.memtrace_reset_peak(-1)
        measure.at_call = measure.before = self._current()
        measure.torch_peaks = _torch_requested_peaks()
        outcome = None
        try:
            outcome = yield
        finally:
            measure.out_of_memory = _out_of_memory(outcome)
            if wrapped:
                item.obj = original  # type: ignore[attr-defined]
            else:
                measure.after = self._current()
            measure.peak = max(measure.peak, int(self.library.memtrace_peak_bytes(-1)))
            measure.counters = self._counters_differ(measure.torch_peaks)
            self.measure = None
            measure.forked = self.forking
            self.library.memtrace_close()
            self._judge(item, limits, measure)

    # Note [PyTorch's counters beside each test]
    # `memtrace run` compares PyTorch's own peaks with the trace's at the program's end (Note
    # [PyTorch's counters beside the trace] in cli.py); a test's call has no such end, and
    # resetting PyTorch's peak counters per test would change the program under test. What can
    # be read without changing anything: PyTorch's requested_bytes.all.peak of each device when
    # the call begins and when it ends. Where it rose, PyTorch's peak of the whole session was
    # reached during this call, and the trace's peak for the call (which counts what was live
    # before it) must be the same number: each test that raises the session's peak is checked to
    # the byte, the others are not checked. Where the bridge records PyTorch's tensors (reserved
    # bytes seen on the device); a trace of segments counts what PyTorch keeps, not its requests.
    # A trace above PyTorch's holds memory allocated outside its allocator (a library's own
    # cudaMalloc); one below it missed a tensor. Either is said beside the test in the summary.
    def _counters_differ(self, before: dict[int, int]) -> str | None:
        after = _torch_requested_peaks()
        differences = []
        for device, peak in sorted(after.items()):
            if peak <= before.get(device, 0):
                continue  # the session's peak was not reached in this call
            if not self.library.memtrace_peak_reserved_bytes(device):
                continue  # no bridge: the trace holds segments
            traced = int(self.library.memtrace_peak_bytes(device))
            if traced != peak:
                why = ("memory allocated outside PyTorch's allocator" if traced > peak
                       else "the trace missed a tensor")
                differences.append(f"device {device}: PyTorch's requested peak {peak:,} B, the "
                                   f"trace's {traced:,} B ({why})")
        return "; ".join(differences) or None

    @pytest.fixture
    def memtrace_training(self) -> Callable[..., contextlib.AbstractContextManager[Training]]:
        """``with memtrace_training(model) as training:`` around a test's training steps gives
        their figures after the block: ``training.peak_bytes``, ``training.steps[i]`` (each
        step's peak, its phase and module, its bytes by category at that peak),
        ``training.categories_at_peak``. The optimizer's steps end the steps (any optimizer);
        ``model`` (optional) tells inputs and activations apart."""
        return self._training

    @contextlib.contextmanager
    def _training(self, model: Any = None) -> Iterator[Training]:
        from . import _native, training

        measure = self.measure
        if measure is None:
            raise MemTracerError("memtrace_training() is for a test's call, not its fixtures")
        # The block's own peak: the counters' peak is reset at its start, and what the test
        # reached before is kept for the test's own figure.
        measure.peak = max(measure.peak, int(self.library.memtrace_peak_bytes(-1)))
        self.library.memtrace_reset_peak(-1)
        figures = Training()
        steps_before = training._steps  # the optimizer steps this process counted
        training.install(model)
        try:
            yield figures
        finally:
            training.uninstall()
        figures.peak_bytes = int(self.library.memtrace_peak_bytes(-1))
        measure.peak = max(measure.peak, figures.peak_bytes)
        if self.library.memtrace_flush() != 0:
            raise MemTracerError(f"memtrace_training(): {_native.last_error()}")
        data = self._report(measure.checked_trace or measure.trace, "peak", 0)
        if isinstance(data, str):
            raise MemTracerError(f"memtrace_training(): {data}")
        figures._fill(data.get("training") or {}, steps_before)

    def _checked_call(self, function: Any, limits: _Limits, measure: _Measure) -> Any:
        """The test function run `warmups` times, then once more with the memory it leaves
        counted: what is live after it returned (cycles collected) less what was live before."""
        def checked(*args: Any, **kwargs: Any) -> Any:
            for _ in range(limits.warmups):
                function(*args, **kwargs)
            gc.collect()
            # A trace of its own for the checked call: what it leaves live is then exactly the
            # traced allocations live at that trace's end (what the warmups left is untraced
            # there). The first trace, closed by this start, keeps the warmups' peak.
            if limits.warmups:
                measure.warmups_peak = int(self.library.memtrace_peak_bytes(-1))
                measure.checked_trace = measure.trace.with_name(f"{measure.trace.stem}-checked.bin")
                self._start(measure.checked_trace)
            measure.before = self._current()
            try:
                return function(*args, **kwargs)
            finally:
                gc.collect()
                measure.after = self._current()
        return checked

    def _judge(self, item: pytest.Item, limits: _Limits, measure: _Measure) -> None:
        """Decides whether the test went over a limit (the message, for makereport) and what
        of it goes to the summary (user_properties travel with the report, under xdist too)."""
        problems = []
        peak_trace, untraced = measure.peak_trace()
        if limits.memory is not None and measure.peak > limits.memory:
            lines, reads = self._lines(peak_trace, "peak", _LINES_SHOWN, untraced)
            before = (f"; {size_text(measure.at_call)} of it was live before the test's call"
                      if measure.at_call else "")
            problems.append(
                f"GPU memory peaked at {size_text(measure.peak)}, over the limit of "
                f"{size_text(limits.memory)} (limit_gpu_memory({limits.memory_text!r})){before}."
                f"\nLive at the peak, by line:\n{lines}{reads}")
        if limits.leaks is not None and measure.leaked > limits.leaks:
            lines, reads = self._lines(measure.checked_trace or measure.trace, "end",
                                       _LINES_SHOWN, None)
            warmups = f" after {limits.warmups} warmup call(s)" if limits.warmups else ""
            problems.append(
                f"GPU memory leaked: {size_text(measure.leaked)} was still allocated after the "
                f"test returned{warmups}, over the limit of {size_text(limits.leaks)} "
                f"(limit_gpu_leaks({limits.leaks_text!r})).\n"
                f"Allocated by the test and still live, by line:\n{lines}{reads}")
        if problems and measure.forked:
            problems.append("The test forked: what its child allocated is not counted here.")
        if problems:
            item.stash[_FAILURE] = "\n".join(problems)
        result: dict[str, Any] = {"peak": measure.peak, "leaked": measure.leaked,
                                  "at_call": measure.at_call}
        if measure.forked:
            result["forked"] = True
        if measure.counters:
            result["counters"] = measure.counters
        if measure.out_of_memory:
            result["oom"] = self._out_of_memory_text(measure.checked_trace or measure.trace)
            item.add_report_section("call", "memtrace", result["oom"])
        if self._among_top(measure.peak, item.nodeid):
            data = self._report(peak_trace, "peak", _SUMMARY_LINES + 1)
            lines, reads = self._lines_of(data, _SUMMARY_LINES, untraced, plain=True)
            result["lines"] = lines.splitlines()
            result["reads"] = bool(reads)
            modules = _modules_text(data)
            if modules:
                result["modules"] = modules
        item.user_properties.append(("memtrace", json.dumps(result)))
        for trace in (measure.trace, measure.checked_trace):
            if trace is not None:
                trace.unlink(missing_ok=True)

    def _among_top(self, peak: int, nodeid: str) -> bool:
        """Whether the test is among the `top` highest peaks of this process so far: only those
        get the report run for the summary's line (a report costs a process start), and the
        session's top tests are among them, in every xdist worker."""
        if self.top == 0 or peak == 0:
            return False
        self.kept.append((peak, nodeid))
        self.kept.sort(reverse=True)
        del self.kept[self.top:]
        return (peak, nodeid) in self.kept

    def _report(self, trace: Path, at: str, top: int) -> dict[str, Any] | str:
        """memtrace-report's JSON of the trace at `at`, by the user's line (as the reports show
        it), or why there is none."""
        result = subprocess.run(
            [self.report_tool, str(trace), "--format", "json", "--at", at, "--top", str(top),
             "--group-by", "line", "--frame", "user"],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            why = (result.stderr.strip().splitlines() or ["?"])[-1]
            return f"memtrace-report could not read the test's trace: {why}"
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def _out_of_memory_text(self, trace: Path) -> str:
        data = self._report(trace, "oom", _LINES_SHOWN)
        if isinstance(data, str):
            return f"ran out of GPU memory ({data})"
        oom = data.get("oom")
        if not oom:
            return "ran out of GPU memory (no refused allocation in the trace)"
        memory = oom.get("memory_bytes")
        card = f" on the {size_text(int(memory))} card" if memory else ""
        return (f"ran out of memory{card}: asked for {size_text(int(oom['request']['bytes']))} "
                f"at {oom['request']['location']}, {size_text(int(oom['live_bytes']))} live")

    def _lines(self, trace: Path, at: str, top: int, untraced: str | None,
               plain: bool = False) -> tuple[str, str]:
        """The largest lines live at `at` of the trace as text, and a warning when the test
        read device values on the simulated card. `untraced` names what was live when the trace
        began; None leaves it out."""
        return self._lines_of(self._report(trace, at, top + 1), top, untraced, plain)

    def _lines_of(self, data: dict[str, Any] | str, top: int, untraced: str | None,
                  plain: bool = False) -> tuple[str, str]:
        """_lines, of a report already read (`top` + 1 rows, or why there is none)."""
        if isinstance(data, str):
            return f"    ({data})\n", ""
        rows = [row for row in data["live"]["rows"]
                if untraced is not None or row.get("kind") != "untraced"][:top]
        for row in rows:
            # What nothing told (Note [What was live before tracing] in tracer/report/
            # analysis.h): the weights a module owns keep their own name.
            if row.get("kind") == "untraced" and row.get("location") == "untraced":
                row["location"] = untraced
        reads = int((data.get("device_reads") or {}).get("count", 0))
        reads_text = (f"The test read device values {reads} time(s) on the simulated card, where "
                      "they are zeros: shapes that follow them may not be a real run's.\n"
                      if reads else "")
        if plain:
            return "\n".join(f"{size_text(row['bytes'])} {_location(row)}"
                             for row in rows), reads_text
        if not rows:
            return "    (none traced)\n", reads_text
        return "".join(f"    {size_text(row['bytes']):>11}  {_location(row)}\n"
                       for row in rows), reads_text

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        failure = item.stash.get(_FAILURE, None)
        if call.when == "call" and failure is not None and report.passed:
            report.outcome = "failed"
            report.longrepr = failure

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == "memtrace":
                self.results[report.nodeid] = json.loads(str(value))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        differing = [(nodeid, result["counters"]) for nodeid, result in self.results.items()
                     if result.get("counters")]
        if differing:  # Note [PyTorch's counters beside each test]: said whatever --memtrace-top
            terminalreporter.write_sep("=", "memtrace: PyTorch's own counters differ from the "
                                            "trace")
            for nodeid, text in differing:
                terminalreporter.write_line(f"{nodeid}: {text}")
        if self.top == 0 or not self.results:
            return
        where = (f"on a simulated {self.card.device_name} ({size_text(self.card.memory_bytes)})"
                 if self.card else "")
        terminalreporter.write_sep("=", f"memtrace: GPU memory by test {where}".rstrip())
        ranked = sorted(self.results.items(), key=lambda entry: -int(entry[1]["peak"]))
        terminalreporter.write_line(
            f"{'peak':>11} {'leaked':>11}  test / largest lines at its peak")
        for nodeid, result in ranked[:self.top]:
            terminalreporter.write_line(
                f"{size_text(int(result['peak'])):>11} {size_text(int(result['leaked'])):>11}  "
                f"{nodeid}")
            lines = list(result.get("lines") or [""])
            notes = [lines[0]] if lines[0] else []
            if result.get("reads"):
                notes.append("(read device values: shapes may follow zeros)")
            if result.get("oom"):
                notes.append(f"({result['oom']})")
            if result.get("forked"):
                notes.append("(forked: its child's memory is not counted)")
            if notes:
                terminalreporter.write_line(f"{'':>25}{'  '.join(notes)}")
            for line in lines[1:]:
                terminalreporter.write_line(f"{'':>25}{line}")
            if result.get("modules"):
                terminalreporter.write_line(f"{'':>25}{result['modules']}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def _torch_requested_peaks() -> dict[int, int]:
    """PyTorch's requested_bytes.all.peak of each device its caching allocator counted on, as
    `memtrace run` reads them at the program's end (mem_tracer._run._torch_peaks: never
    importing torch or initializing CUDA, {} under an allocator that keeps no counters)."""
    from ._run import _torch_peaks
    return {int(device): peaks["requested"] for device, peaks in _torch_peaks().items()}


def _out_of_memory(outcome: Any) -> bool:
    """Whether the call ended in PyTorch's OutOfMemoryError (or an error raised from one)."""
    from ._run import _out_of_memory as is_out_of_memory

    error = getattr(outcome, "exception", None)  # pluggy's Result (1.1 and later)
    if error is None and getattr(outcome, "excinfo", None):  # pluggy 1.0
        error = outcome.excinfo[1]
    return isinstance(error, BaseException) and is_out_of_memory(error)


def _location(row: dict[str, Any]) -> str:
    return str(row.get("location", "?"))


def _modules_text(data: dict[str, Any] | str) -> str:
    """The largest rows of the module table at the peak (Note [The module table] in
    tracer/report/analysis.h), the report's own, as one line: "by module: model.layers.* (x4)
    1.2 GiB (61 %), ...". "" for a test that did not train (no module table)."""
    if isinstance(data, str):
        return ""
    table = (data.get("training") or {}).get("modules_at_peak") or {}
    rows = table.get("rows") or []
    total = sum(int(row["bytes"]) for row in rows)
    if not rows or not total:
        return ""
    shown = [f"{_location(row)} {size_text(int(row['bytes']))} "
             f"({100 * int(row['bytes']) / total:.0f} %)" for row in rows[:_SUMMARY_LINES]]
    more = f", {len(rows) - _SUMMARY_LINES} more" if len(rows) > _SUMMARY_LINES else ""
    return f"by module: {', '.join(shown)}{more}"


class _Unchecked:
    """A session that does not trace: the tests run as they would without the plugin; their
    limits, unchecked, are said once at the end."""

    def __init__(self) -> None:
        self.marked = 0

    @pytest.fixture
    def memtrace_training(self) -> None:
        pytest.fail("memtrace_training needs a session that traces: run pytest with --memtrace, "
                    "or --memtrace-gpu PROFILE", pytrace=False)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.marked = sum(1 for item in items if item.get_closest_marker("limit_gpu_memory")
                          or item.get_closest_marker("limit_gpu_leaks"))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.marked:
            terminalreporter.write_line(
                f"memtrace: {self.marked} test(s) have GPU memory limits that were not checked "
                "(run pytest with --memtrace, or --memtrace-gpu PROFILE)")
