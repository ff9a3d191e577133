"""The mem_tracer package, in subprocesses, on the simulated GPU's runtime (PyTorch's own
registration of the allocator needs a CUDA build of torch: tests/gpu covers it)."""
import ast
import importlib.metadata
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, parse_records, run

SCRIPTS = Path(__file__).parent / "scripts"
PACKAGE = ROOT / "python"

# What memtrace adds when a program made no CUDA allocation and the torch it imports is a CPU
# build (this interpreter's, pinned by scripts/setup.sh).
CPU_TORCH = (f" (this Python's torch {importlib.metadata.version('torch')} is a CPU build, "
             "which never allocates GPU memory)")


def tagged_lines(script):
    lines = {}
    for number, text in enumerate(script.read_text().splitlines(), start=1):
        match = re.search(r"# ALLOC:(\w+)", text)
        if match:
            lines[match.group(1)] = number
    return lines


def python(*args, env=None, check=True, cwd=None):
    environment = {"PYTHONPATH": str(PACKAGE)}
    environment.update(env or {})
    return run([sys.executable, *args], environment, check=check, cwd=cwd)


def test_three_line_flow_reports_the_peak_and_its_lines(build, tmp_path):
    trace, report = tmp_path / "flow.bin", tmp_path / "report.txt"
    result = python(SCRIPTS / "flow.py", build.cuda, trace, report)
    said = json.loads(result.stdout.splitlines()[-1])
    lines = tagged_lines(SCRIPTS / "flow.py")
    # The peak is the logits' allocation: weights 64 MiB (untraced) + 3 outputs of 2 MiB +
    # 10 MiB (a layer's 8 MiB hidden never overlaps more than 66 MiB of the rest).
    data = said["data"]
    assert data["summary"]["peak_bytes"] == (64 + 6 + 10) << 20
    # The library's own counter agrees, and what is live at the end too.
    assert said["peak"] == data["summary"]["peak_bytes"]
    assert said["current"] == (64 + 6 + 10) << 20
    rows = {(row.get("line"), row["location"].split(" ")[-1]): row["bytes"] for row in data["live"]["rows"]}
    assert rows == {(None, "untraced"): 64 << 20, (lines["logits"], "(model)"): 10 << 20,
                    (lines["out"], "(layer)"): 6 << 20}
    assert data["live"]["rows"][0]["location"] == "untraced"
    assert all(row["file"] == str(SCRIPTS / "flow.py") for row in data["live"]["rows"][1:])
    assert [(m["kind"], m["name"]) for m in data["markers"]] == [
        ("annotation", "start"), ("phase-begin", "forward"), ("phase-end", "")]
    text = report.read_text()
    assert "Mem         Cumulative Mem  Median" in text
    assert f"flow.py:{lines['logits']} (model)" in text
    assert said["trace"] == str(trace)


def test_counters_track_every_allocation(build, tmp_path):
    code = f"""
import ctypes, sys
ctypes.CDLL({str(build.cuda)!r}, mode=ctypes.RTLD_GLOBAL)
import mem_tracer
from mem_tracer import _native

lib = _native.allocator()
a = lib.memtrace_alloc(1000, 0, None)
b = lib.memtrace_alloc(3000, 1, None)
lib.memtrace_free(a, 1000, 0, None)
print(mem_tracer.memory_allocated(), mem_tracer.max_memory_allocated(),
      mem_tracer.memory_allocated(1), mem_tracer.max_memory_allocated(0))
mem_tracer.reset_peak_memory_stats()
print(mem_tracer.max_memory_allocated())
"""
    out = python("-c", code).stdout.split()
    assert out == ["3000", "4000", "3000", "1000", "3000"]


@pytest.mark.parametrize("naming", ["named", "unnamed"])
def test_module_attribution(build, tmp_path, naming):
    result = python(SCRIPTS / "modules.py", build.cuda, tmp_path / "modules.bin", naming)
    by_module = json.loads(result.stdout.splitlines()[-1])
    # Unnamed, the root is named when first called, by the variable the script calls it by
    # (Note [Module paths as the user names them]): `model`, as start_tracing(model=) names it.
    root = "model"
    assert by_module == {
        f"{root}.layers.0.attn": 3 << 20, f"{root}.layers.1.attn": 3 << 20,
        f"{root}.layers.0.mlp": 1 << 20, f"{root}.layers.1.mlp": 1 << 20,
        root: 7 << 20, "<no module>": 5 << 20}


def package_imports():
    """Each module of the package -> the package's modules it imports, at the top or inside a
    function (a lazy import closes a circle as well). A module is named by its dotted path inside
    the package (`estimator.estimate`), a subpackage by its own (`simulated_gpu`, its
    __init__.py); a name taken from the package's own __init__ (`__version__`) is not counted."""
    root = PACKAGE / "mem_tracer"

    def name_of(path):
        parts = path.relative_to(root).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        return ".".join(parts) or "__init__"

    modules = {name_of(path): path for path in sorted(root.rglob("*.py"))}

    def taken(target, names):
        """What `from <target> import names` imports: each name that is a module, else the
        target module itself."""
        inside = [".".join([*target, name]) for name in names]
        found = [name for name in inside if name in modules]
        if len(found) < len(names) and target:
            found.append(".".join(target))
        return found

    def imported_by(node, package):
        if isinstance(node, ast.ImportFrom) and node.level:  # from . import x, from ..x import y
            above = package[:len(package) - (node.level - 1)]
            target = above + (node.module.split(".") if node.module else [])
            return taken(target, [a.name for a in node.names])
        if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == "mem_tracer":
            return taken(node.module.split(".")[1:], [a.name for a in node.names])
        if isinstance(node, ast.Import):
            return [a.name.removeprefix("mem_tracer").removeprefix(".") or "__init__"
                    for a in node.names if a.name.split(".")[0] == "mem_tracer"]
        return []

    imports = {}
    for name, path in modules.items():
        own = [] if name == "__init__" else name.split(".")
        package = own if path.name == "__init__.py" else own[:-1]
        imports[name] = {imported for node in ast.walk(ast.parse(path.read_text()))
                         for imported in imported_by(node, package)}
    assert all(imported in modules for found in imports.values() for imported in found), imports
    return imports


def test_no_module_of_the_package_imports_one_that_imports_it():
    imports = package_imports()
    assert {"tracing", "training"} <= imports.keys() and "training" in imports["tracing"]

    def circle_from(module, path):
        for imported in sorted(imports[module]):
            if imported in path:
                return path[path.index(imported):] + [imported]
            found = circle_from(imported, path + [imported])
            if found:
                return found
        return None

    for module in sorted(imports):
        assert circle_from(module, [module]) is None, module


def test_run_traces_an_unmodified_script(build, tmp_path):
    script = SCRIPTS / "unmodified.py"
    lines = tagged_lines(script)
    result = python("-m", "mem_tracer", "run", "--output", tmp_path / "run-%p.bin", "--top", "5",
                    script, build.cuda, "3", check=False, cwd=tmp_path)
    assert result.returncode == 3, result.stderr  # the script's own exit status
    assert "script done" in result.stdout
    traces = list(tmp_path.glob("run-*.bin"))
    assert len(traces) == 1
    report = result.stdout.split("== memtrace: ")[1]
    assert "Peak memory: 97.00 MiB" in report
    assert f"unmodified.py:{lines['big']} (build)" in report
    assert f"unmodified.py:{lines['small']} (<module>)" in report


def test_run_without_cuda_allocations_writes_no_trace(build, tmp_path):
    # The program's own options (--help here) are the program's, not the launcher's.
    result = python("-m", "mem_tracer", "run", "-o", tmp_path / "x-%p.bin", "-m", "json.tool", "--help",
                    check=False, cwd=tmp_path)
    assert result.returncode == 0
    assert "usage:" in result.stdout and "json.tool" in result.stdout
    assert result.stderr.splitlines() == [
        "memtrace: json.tool ended without a CUDA allocation: no trace was written" + CPU_TORCH]
    assert not list(tmp_path.glob("x-*.bin"))


def test_switch_allocator_without_cuda(build):
    result = python("-c", "import mem_tracer; mem_tracer.switch_allocator()", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "mem_tracer.errors.MemTracerError: switch_allocator() needs CUDA, and PyTorch sees no CUDA "
        f"device here (torch {torch_version()}, torch.cuda.is_available() is False): run on a machine "
        "with a GPU and a CUDA build of PyTorch")


def torch_version():
    return run([sys.executable, "-c", "import torch; print(torch.__version__)"]).stdout.strip()


def test_switch_allocator_too_late_says_what_to_do(build):
    # Without a GPU PyTorch cannot get this far: replay PyTorch's own refusal (its message,
    # from torch/csrc/cuda/CUDAPluggableAllocator.cpp) to check how mem_tracer explains it.
    code = """
import torch, mem_tracer
torch.cuda.is_available = lambda: True
torch.cuda.memory.CUDAPluggableAllocator = lambda *args: object()
def refuse(allocator):
    raise RuntimeError("Can't swap an already initialized allocator")
torch.cuda.memory.change_current_allocator = refuse
try:
    mem_tracer.switch_allocator()
except mem_tracer.MemTracerError as error:
    print(error)
"""
    said = python("-c", code).stdout
    assert said.startswith("switch_allocator() came too late: this process has already allocated")
    assert "python -m mem_tracer run script.py" in said


def test_using_tracing_before_it_started(build):
    code = """
import mem_tracer
for call in (mem_tracer.stop_tracing, mem_tracer.report_stats, lambda: mem_tracer.annotate("x")):
    try:
        call()
    except mem_tracer.MemTracerError as error:
        print(error)
"""
    said = python("-c", code).stdout.splitlines()
    assert said == [
        "stop_tracing(): tracing has not started (call start_tracing() first)",
        "tracing has not started: call mem_tracer.start_tracing() (or use `with mem_tracer.trace(...)`) "
        "before asking for a report",
        "annotate(): tracing has not started: call memtrace_start() first"]


# A process that loads the simulated CUDA runtime as PyTorch does, then libmemtrace.so through the
# package; `fill_disk` makes the trace file's next write fail (RLIMIT_FSIZE at its size now).
WRITE_FAILS = """
import ctypes, os, resource, signal, sys, warnings
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import mem_tracer
from mem_tracer import _native
lib = _native.library()
allocator = _native.allocator()  # as PyTorch calls it: the GIL released

def fill_disk(path):
    lib.memtrace_flush()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path), resource.RLIM_INFINITY))
    allocator.memtrace_alloc(1 << 20, 0, None)

def unlimit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
"""


def test_start_tracing_warns_unless_allocations_go_through_memtrace(build, tmp_path):
    code = WRITE_FAILS + """
if sys.argv[3] == "environ":  # named after the start: the loader never saw it
    os.environ["LD_PRELOAD"] = str(_native.library_path())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mem_tracer.start_tracing(sys.argv[2])
print(len(caught))
for warning in caught:
    print(warning.message)
"""
    # Nothing preloaded, no switch_allocator(), and no PyTorch allocator to attach to (Note
    # [Attaching from the package]): the warning says why.
    warning = ("mem_tracer.start_tracing(): PyTorch's allocations do not go through memtrace in "
               "this process (torch is not imported); call mem_tracer.switch_allocator() first, "
               "or run the script with `python -m mem_tracer run`")
    for how in ("plain", "environ"):
        said = python("-c", code, build.cuda, tmp_path / f"{how}.bin", how).stdout.splitlines()
        assert said == ["1", warning], how
    # Preloaded by the loader: its hooks see every allocation, nothing to warn about.
    said = python("-c", code, build.cuda, tmp_path / "preloaded.bin", "plain",
                  env={"LD_PRELOAD": str(build.library), "MEMTRACE_AUTOSTART": "0"}).stdout
    assert said.splitlines() == ["0"]


def test_stop_tracing_raises_a_write_error(build, tmp_path):
    code = WRITE_FAILS + """
fill_disk(mem_tracer.start_tracing(sys.argv[2]))
for attempt in range(2):
    try:
        mem_tracer.stop_tracing()
        print("stopped")
    except mem_tracer.MemTracerError as error:
        print(error)
"""
    trace = tmp_path / "full.bin"
    # Through the buffer: a limit at the file's size fails its next write. (A mapped trace has
    # room allocated past its records, which the records after fill first.)
    said = python("-c", code, build.cuda, trace, env={"MEMTRACE_MAP_FILE": "0"}).stdout.splitlines()
    assert said == [
        f"stop_tracing(): cannot write the trace file {trace}: File too large; recording stopped, "
        "the program goes on",
        "stop_tracing(): tracing is not running (it was stopped already; the last error: cannot "
        f"write the trace file {trace}: File too large; recording stopped, the program goes on)"]


def test_trace_raises_errors_at_stop_and_close(build, tmp_path):
    code = WRITE_FAILS + """
try:
    with mem_tracer.trace(sys.argv[2]) as path:
        fill_disk(path)
    print("no error")
except mem_tracer.MemTracerError as error:
    print(error)
# The block's own exception goes on, the trace's error noted on it.
unlimit()
try:
    with mem_tracer.trace(sys.argv[2] + ".2") as path:
        fill_disk(path)
        raise KeyError("the block's")
except KeyError as error:
    print(repr(error), error.__notes__)
# A block that stops tracing itself, and writes fine, is no error.
unlimit()
with mem_tracer.trace(sys.argv[2] + ".3"):
    mem_tracer.stop_tracing()
print("clean")
"""
    trace = tmp_path / "full.bin"
    said = python("-c", code, build.cuda, trace, env={"MEMTRACE_MAP_FILE": "0"}).stdout.splitlines()
    failed = "cannot write the trace file {}: File too large; recording stopped, the program goes on"
    assert said == [f"trace(): {failed.format(trace)}",
                    f"KeyError(\"the block's\") ['mem_tracer.trace(): {failed.format(f'{trace}.2')}']",
                    "clean"]


def test_start_tracing_with_the_stacks_asked_for(build, tmp_path):
    code = WRITE_FAILS + """
for mode in ("none", "all"):
    with mem_tracer.trace(f"{sys.argv[2]}.{mode}", stacks=mode):
        allocator.memtrace_alloc(4096, 0, None)
print(os.environ.get("MEMTRACE_STACKS"))
try:
    mem_tracer.start_tracing(sys.argv[2], stacks="python-only")
except mem_tracer.MemTracerError as error:
    print(error)
"""
    trace = tmp_path / "stacks.bin"
    said = python("-c", code, build.cuda, trace).stdout.splitlines()
    # The environment is the program's again after the start; a mode that does not exist is refused.
    assert said == ["None", "start_tracing(): stacks must be one of python, native, all, none, "
                    "not 'python-only'"]
    for mode, python_stack in (("none", False), ("all", True)):
        records = parse_records(tmp_path / f"stacks.bin.{mode}")
        assert [r["stacks"] for r in records if r["record"] == "process"] == [mode]
        # (The second file starts with the first one's allocation, live then: untraced.)
        (alloc,) = [r for r in records if r["record"] == "alloc" and "traced" in r["words"]]
        # Stack 0 is the empty one.
        assert (int(alloc["pystack"]) != 0, int(alloc["native"]) != 0) == (python_stack,) * 2, alloc


def test_library_not_found(build, tmp_path):
    # A copy of the package away from the build directory, as if installed without its parts.
    shutil.copytree(PACKAGE / "mem_tracer", tmp_path / "mem_tracer")
    code = "import mem_tracer\ntry:\n    mem_tracer.start_tracing()\nexcept mem_tracer.MemTracerError as e:\n    print(e)"
    said = run([sys.executable, "-c", code], {"PYTHONPATH": str(tmp_path)}).stdout
    assert said.startswith("libmemtrace.so not found (looked in ")
    assert str(tmp_path / "mem_tracer" / "lib" / "libmemtrace.so") in said
    assert said.rstrip().endswith("build it with `make build` in the memtrace checkout, or install the "
                                  "package with pip")


ESTIMATE_MODEL = '''
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 256)
        self.l2 = nn.Linear(256, 10)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        return self.l2(h)


class Varargs(Mlp):
    def forward(self, *inputs):  # TorchScript has no *args: this one is traced
        return super().forward(inputs[0])
'''


def test_estimate_a_small_model(build, tmp_path):
    (tmp_path / "tiny.py").write_text(ESTIMATE_MODEL)
    code = """
import json, torch, mem_tracer, tiny
x = torch.randn(32, 64)
results = {}
for name, method in (("Mlp", "torchscript"), ("Varargs", "torchscript"), ("Mlp", "auto")):
    e = mem_tracer.estimate(getattr(tiny, name)(), (x,), batch_sizes=[1, 64], budget="1GiB",
                            method=method)
    results[name + " " + method] = {"method": e.method, "note": e.method_note, "weights": e.weight_bytes,
                     "activations": e.activation_peak_bytes, "inputs": e.input_bytes,
                     "lines": [[l.line, l.bytes] for l in e.by_user_line],
                     "batches": [b.batch for b in e.batches], "largest": e.largest_batch,
                     "growing": e.batches[1].peak_requested_bytes > e.batches[0].peak_requested_bytes}
print(json.dumps(results))
"""
    said = json.loads(python("-c", code, env={"PYTHONPATH": f"{PACKAGE}:{tmp_path}"}, cwd=tmp_path).stdout)
    line = ESTIMATE_MODEL.splitlines().index("        h = torch.relu(self.l1(x))") + 1
    # TorchScript asked for (scripted, or traced where scripting fails), and the default: the
    # forward recorded on fake tensors (Note [Choosing the front end]); the same figures.
    for name, method in (("Mlp torchscript", "script"), ("Varargs torchscript", "trace"),
                         ("Mlp auto", "record")):
        result = said[name]
        assert result["method"] == method
        # Weights: (64 * 256 + 256) + (256 * 10 + 10) floats; input 32 x 64 floats.
        assert result["weights"] == ((64 * 256 + 256) + (256 * 10 + 10)) * 4
        assert result["inputs"] == 32 * 64 * 4
        # At the peak, l1's output and relu's (not in place) are live: 2 x 32 x 256 floats.
        assert result["activations"] == 2 * 32 * 256 * 4
        assert result["lines"] == [[line, 2 * 32 * 256 * 4]]
        assert result["batches"] == [1, 64] and result["growing"]
        assert result["largest"] > 64
    assert said["Varargs torchscript"]["note"].startswith("traced with torch.jit.trace (scripting failed: ")
    assert said["Mlp torchscript"]["note"] == ("scripted with torch.jit.script (TorchScript: "
                                               "method='torchscript')")
    assert said["Mlp auto"]["note"] == ("recorded on fake tensors: one forward as Python runs it, "
                                        "without TorchScript")


def test_estimate_by_recording_calls_nothing_torchscript(build, tmp_path):
    # The default front end (Note [Choosing the front end]): the same figures as TorchScript's,
    # with none of TorchScript's entry points called (torch deprecates them: each warns on
    # every call in torch 2.14) and no warning of any kind reaching the user; method="record"
    # refuses what only TorchScript gives.
    (tmp_path / "tiny.py").write_text(ESTIMATE_MODEL)
    code = """
import json, warnings, torch, mem_tracer, tiny
x = torch.randn(32, 64)
scripted = mem_tracer.estimate(tiny.Mlp(), (x,), budget="1GiB", method="torchscript")
def refused(*args, **kwargs):
    raise AssertionError("TorchScript called")
torch.jit.script = torch.jit.trace = torch.jit.save = torch.jit.load = refused
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    recorded = mem_tracer.estimate(tiny.Mlp(), (x,), budget="1GiB")
refusals = []
for options in ({"semantics": "torchscript"}, {"keep_model": "m.pt"}, {"method": "script"},
                {"assume_worst_case": True}):
    try:
        mem_tracer.estimate(tiny.Mlp(), (x,), **{"method": "record", **options})
    except mem_tracer.MemTracerError as error:
        refusals.append(str(error))
figures = lambda e: [e.peak_requested_bytes, e.weight_bytes, e.input_bytes,
                     e.activation_peak_bytes, [[l.line, l.bytes] for l in e.by_user_line],
                     e.largest_batch]
print(json.dumps({"method": recorded.method, "note": recorded.method_note,
                  "warnings": [str(w.message) for w in caught], "refusals": refusals,
                  "same": figures(recorded) == figures(scripted), "model": str(recorded.model_path)}))
"""
    said = json.loads(python("-c", code, env={"PYTHONPATH": f"{PACKAGE}:{tmp_path}"}, cwd=tmp_path).stdout)
    assert said["method"] == "record"
    assert said["note"] == "recorded on fake tensors: one forward as Python runs it, without TorchScript"
    assert said["warnings"] == [] and said["same"] and said["model"] == "None"
    assert [refusal.split(": ", 1)[1].split(";")[0].split(" (")[0] for refusal in said["refusals"]] == [
        "method='record' gives eager semantics only", "method='record' makes no TorchScript file to keep",
        "method must be one of auto, record, torchscript, not 'script'",
        "method='record' sizes data-dependent ops by the example inputs it runs on"]


def test_report_with_the_prediction_beside_the_measurement(build, tmp_path):
    script = SCRIPTS / "predict.py"
    lines = {}
    for number, text in enumerate(script.read_text().splitlines(), start=1):
        match = re.search(r"# LINE:(\w+)", text)
        if match:
            lines[match.group(1)] = number
    result = python(script, build.cuda, tmp_path / "predict.bin", tmp_path / "predict.txt")
    said = json.loads(result.stdout.splitlines()[-1])
    # The default front end records the forward on fake tensors (fakecuda.track runs on them).
    assert said["method"] == "record" and "without TorchScript" in said["note"], said
    text = (tmp_path / "predict.txt").read_text()
    assert re.search(r"Predicted peak: .* by memtrace-estimate, eager semantics: ", text)
    rows = {}
    for row in text.splitlines():
        match = re.match(r"(\S+ \S+) +(\S+ \S+) +\S+ \S+ +\S+ \S+ +(\d+)  .*predict\.py:(\d+) \(forward\)$", row)
        if match:
            rows[int(match.group(4))] = (match.group(1), match.group(2), int(match.group(3)))
    # Measured at the peak (eager: h and a live while l2's output is made) beside predicted.
    # The prediction is for a CUDA device (the "cuda" profile, no GPU here): l1, the first
    # matmul, takes cuBLAS's 8 MiB workspace too (Note [Workspaces on their lines]), which the
    # stand-in for CUDA the measurement ran on never allocates.
    assert rows == {lines["l1"]: ("32.00 KiB", "8.156 MiB", 1), lines["relu"]: ("32.00 KiB", "32.00 KiB", 1),
                    lines["l2"]: ("1.250 KiB", "1.250 KiB", 1)}


def test_estimate_names_no_deleted_file_and_prints_short(build, tmp_path):
    (tmp_path / "tiny.py").write_text(ESTIMATE_MODEL)
    code = """
import json, os, sys, torch, mem_tracer, tiny
x = torch.randn(32, 64)
temporary = mem_tracer.estimate(tiny.Mlp(), (x,), output="temporary.json", budget="1GiB",
                                method="torchscript")
kept = mem_tracer.estimate(tiny.Mlp(), (x,), output="kept.json", keep_model="kept.pt")
print(json.dumps({"temporary": str(temporary.model_path), "kept": str(kept.model_path),
                  "raw": [temporary.raw["model"], kept.raw["model"]],
                  "files": [json.load(open(name))["model"] for name in ("temporary.json", "kept.json")],
                  "repr": repr(temporary), "str": str(temporary)}))
"""
    said = json.loads(python("-c", code, env={"PYTHONPATH": f"{PACKAGE}:{tmp_path}"}, cwd=tmp_path).stdout)
    # An export to a temporary file, deleted by now, is named nowhere; a kept one everywhere.
    assert said["temporary"] == "None"
    kept = tmp_path / "kept.pt"
    assert said["kept"] == str(kept) and kept.is_file()
    assert said["raw"] == [None, str(kept)] and said["files"] == [None, str(kept)]
    # The tables and the estimator's JSON stay out of repr(); str() is a summary for people.
    assert said["repr"].startswith("Estimate(method='script', method_note=\"scripted with "
                                   "torch.jit.script (TorchScript: method='torchscript')\", "
                                   "model_path=None, semantics='eager', ")
    assert len(said["repr"]) < 600 and "raw=" not in said["repr"]
    lines = said["str"].splitlines()
    # The first figure is the one torch.cuda.max_memory_allocated() answers, named so.
    assert lines[0].startswith("memtrace-estimate (eager semantics): max_memory_allocated() ")
    assert "  model file: none kept (estimate(..., keep_model=PATH) keeps it)" in lines
    assert any(line.startswith("  the largest batch within the budget: ") for line in lines)
    assert lines[-2] == "  live at the peak, by line of your code:"
    line = ESTIMATE_MODEL.splitlines().index("        h = torch.relu(self.l1(x))") + 1
    assert lines[-1].endswith(f"tiny.py:{line} (forward)")
    assert len(said["str"]) < 800


def test_backward_on_a_device_thread_names_the_backward_line(build, tmp_path):
    # Note [Stacks lent to threads without Python]: allocations of a thread that never ran
    # Python, made while backward runs, name the line that called backward (--frame user).
    trace = tmp_path / "backward.bin"
    script = SCRIPTS / "device_backward.py"
    result = python(script, build.cuda, trace,
                    env={"LD_PRELOAD": str(build.library), "MEMTRACE_AUTOSTART": "0"})
    # The engine is wrapped while tracing only, and backward computes what it did before.
    assert result.stdout.split("\n")[0] == "True True [2.0, 2.0, 2.0] [2.0, 2.0, 2.0]"
    lines = tagged_lines(script)
    rows = run([build.report, trace, "--frame", "user", "--format", "json", "--at", "end"]).stdout
    located = {(row.get("line"), row["bytes"]) for row in json.loads(rows)["live"]["rows"]}
    assert located == {(lines["backward"], 5 << 20), (lines["grad"], 5 << 20), (None, 6 << 20)}

