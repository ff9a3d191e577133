"""Naming torch.compile's code by the user's source, the package's half (python/mem_tracer/
_compiled.py, Note [Generated code] in tracer/format/records.h): inductor's line map read into
stretches, the stretches reaching a trace through the C API, the wait for inductor's import, and
the gate on a torch the wrapping does not know. A real compiled model on the simulated device:
tests/simulator/test_compiled_lines.py."""
import sys
import warnings

from memtrace_testing import ROOT, parse_records, run

sys.path.insert(0, str(ROOT / "python"))

from mem_tracer import _compiled  # noqa: E402

FORWARD = '  File "/home/user/model.py", line 12, in forward\n    h = torch.relu(self.up(x))\n'
NESTED = ('  File "/home/user/model.py", line 30, in forward\n    return self.block(h)\n'
          '  File "/home/user/model.py", line 13, in forward\n    return self.down(h) * 2\n')


def test_a_line_map_gives_stretches_to_the_next_entry_and_the_last_to_the_end():
    line_map = [(152, NESTED), (143, FORWARD), (147, None), (160, "no frame here"), (0, FORWARD),
                (165, None), (165, FORWARD)]
    assert _compiled.stretches(line_map, 170) == [
        (143, 4, [("/home/user/model.py", 12, "forward")]),
        (152, 8, [("/home/user/model.py", 30, "forward"), ("/home/user/model.py", 13, "forward")]),
        (165, 6, [("/home/user/model.py", 12, "forward")]),  # two entries of a line: the last
    ]
    assert _compiled.stretches([(143, FORWARD)], 170) == [
        (143, 28, [("/home/user/model.py", 12, "forward")])]
    assert _compiled.stretches([], 170) == []


TOLD = """import sys
from mem_tracer import _compiled, _native
library = _native.library()
assert library.memtrace_start(sys.argv[2].encode()) == 0
line_map = [(3, {forward!r}), (5, None), (7, {nested!r})]
_compiled.GeneratedCodeNames().told(sys.argv[1], line_map)
_compiled.GeneratedCodeNames().told(sys.argv[1] + ".missing", line_map)  # never raises
assert library.memtrace_close() == 0
""".format(forward=FORWARD, nested=NESTED)


def test_stretches_reach_the_trace_through_the_c_api(tmp_path):
    generated = tmp_path / "ab" / "cab.py"
    generated.parent.mkdir()
    generated.write_text("".join(f"line_{number} = {number}\n" for number in range(1, 11)))
    script, trace = tmp_path / "told.py", tmp_path / "told.bin"
    script.write_text(TOLD)
    run([sys.executable, script, generated, trace], {"PYTHONPATH": str(ROOT / "python")})
    records = parse_records(trace)
    strings = {record["id"]: record["words"][0].strip('"') for record in records
               if record["record"] == "string"}
    frames = {record["id"]: (strings[record["file"]], int(record["line"]))
              for record in records if record["record"] == "frame"}
    nodes = {record["id"]: (record["parent"], frames[record["frame"]])
             for record in records if record["record"] == "pystack"}

    def stack(node):
        found = []
        while node != "0":
            node, frame = nodes[node]
            found.insert(0, frame)
        return found

    told = [(strings[record["file"]], int(record["first_line"]), int(record["lines"]),
             stack(record["pystack"])) for record in records if record["record"] == "generated-code"]
    assert told == [
        (str(generated), 3, 2, [("/home/user/model.py", 12)]),
        (str(generated), 7, 4, [("/home/user/model.py", 30), ("/home/user/model.py", 13)]),
    ]


def test_the_wrapping_waits_for_inductors_import(monkeypatch, tmp_path):
    package = tmp_path / "lazy_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "late.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = _compiled._ImportHook("lazy_pkg.late", seen.append)
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    import lazy_pkg  # noqa: F401 - only its submodule is waited for
    assert seen == []
    import lazy_pkg.late
    assert (seen, lazy_pkg.late.VALUE) == (["lazy_pkg.late"], 7)
    assert hook not in sys.meta_path
    assert lazy_pkg.late.__loader__.get_source("lazy_pkg.late") == "VALUE = 7\n"


def test_an_unknown_torch_is_left_alone_and_said_once(monkeypatch):
    monkeypatch.setattr(_compiled, "_torch_version", lambda: "2.15.0")
    monkeypatch.delenv("MEMTRACE_UNTESTED_TORCH", raising=False)
    finders = list(sys.meta_path)
    names = _compiled.GeneratedCodeNames()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        names.install()
        names.install()
    assert names.phase is _compiled.Phase.OFF
    assert sys.meta_path == finders
    assert len(said) == 1, [str(warning.message) for warning in said]
    assert "named by the code inductor generated, not by your source, under torch 2.15.0: " \
           "it is checked on torch 2.11 to 2.14 only" in str(said[0].message)


def test_without_torch_nothing_is_done(monkeypatch):
    monkeypatch.setattr(_compiled, "_torch_version", lambda: None)
    names = _compiled.GeneratedCodeNames()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names.install()
    assert names.phase is _compiled.Phase.OFF
