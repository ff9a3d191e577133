"""memtrace-report's views: the HTML report (opened in headless Chromium), the flame graph
(folded stacks, SVG), and the exports (Perfetto JSON, PyTorch's snapshot pickle, checked
with torch's own _memory_viz.py). Most checks run on a hand-written trace whose every
byte count is known, with file, function and annotation names that try to inject script.
"""
import json
import pickle
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chromium  # noqa: E402
from memtrace_testing import Build, preloaded, progress_on_a_terminal, report_json, run  # noqa: E402
from trace_writer import (ANNOTATION, PHASE_BEGIN, PHASE_END, PROCESS_EXIT,  # noqa: E402
                          TRACING_STARTED, TraceWriter)

HOSTILE = "</script><script>alert(1)</script>"
QUOTES = "\"'<&"
MODEL = "/home/user/model.py"
EVIL_FILE = f"/home/user/{HOSTILE}.py"
EVIL_FUNCTION = f"{QUOTES};fn"  # ';' also separates frames in folded stacks
ANNOTATION_NAME = f"step {HOSTILE}"
PHASE_NAME = f"forward {QUOTES}"


def hand_trace(path):
    """The trace every figure below is computed from:

        t=100  alloc 0x1000 1000  model.py:10 (forward)      live 1000
        t=150  annotation ANNOTATION_NAME
        t=200  alloc 0x2000 3000  EVIL_FILE:20 (EVIL_FUNCTION) live 4000
        t=250  phase begins PHASE_NAME
        t=300  alloc 0x3000  500  model.py:10                 live 4500  <- peak, event 2
        t=400  free  0x2000                                    live 1500
        t=450  phase ends
        t=500  alloc 0x4000 2000  model.py:10                 live 3500
        t=550  failed allocation of 10**7 bytes
        t=600  free  0x1000                                    live 2500  (the end)
        t=700  process exit
    Every stack is called from model.py:1 (main)."""
    w = TraceWriter()
    model, evil_file = w.string(MODEL), w.string(EVIL_FILE)
    main, forward, evil_function = w.string("main"), w.string("forward"), w.string(EVIL_FUNCTION)
    annotation, phase, device = w.string(ANNOTATION_NAME), w.string(PHASE_NAME), w.string("dev <b>0</b>")
    root = w.python_stack(0, w.frame(model, main, 1))
    at_forward = w.python_stack(root, w.frame(model, forward, 10))
    at_evil = w.python_stack(root, w.frame(evil_file, evil_function, 20))
    w.device(0, device, 10**6).context(7, 0).marker(0, TRACING_STARTED)
    w.alloc(100, 0x1000, 1000, at_forward)
    w.marker(150, ANNOTATION, annotation)
    w.alloc(200, 0x2000, 3000, at_evil)
    w.marker(250, PHASE_BEGIN, phase)
    w.alloc(300, 0x3000, 500, at_forward)
    w.flush()  # events span chunks, as the recorder's do
    w.free(400, 0x2000)
    w.marker(450, PHASE_END)
    w.alloc(500, 0x4000, 2000, at_forward)
    w.failed_alloc(550, 10**7, at_forward)
    w.free(600, 0x1000)
    w.marker(700, PROCESS_EXIT)
    return w.write(path)


PEAK, PEAK_TIME_NS, PEAK_EVENT, END = 4500, 300, 2, 2500
FORWARD = f"{MODEL}:10 (forward)"
EVIL = f"{EVIL_FILE}:20 ({EVIL_FUNCTION})"
MAIN = f"{MODEL}:1 (main)"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("views")


@pytest.fixture(scope="module")
def trace(work):
    return hand_trace(work / "hand.bin")


@pytest.fixture(scope="module")
def model_trace(work):
    """A model-like program's trace, through the simulated GPU's runtime."""
    path = work / "model.bin"
    run([sys.executable, Build.root / "tests" / "preload" / "scripts" / "host_memory_model.py", Build.cuda],
        preloaded(path))
    return path


def report(*args, check=True):
    return run([Build.report, *args], check=check, timeout=60)


def fails(args, *expected):
    result = report(*args, check=False)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("memtrace-report: error: "), result.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def test_the_hand_trace_reads_as_computed(build, trace):
    document = report_json(trace)
    assert document["summary"]["peak_bytes"] == PEAK
    assert document["summary"]["peak_event"] == PEAK_EVENT
    assert document["summary"]["end_bytes"] == END
    assert [(r["location"], r["bytes"]) for r in document["live"]["rows"]] == [(EVIL, 3000), (FORWARD, 1500)]


# ---- flame graph ------------------------------------------------------------------------

def test_folded_stacks_of_the_peak(build, trace):
    folded = report("flamegraph", trace, "--format", "folded").stdout
    evil = f"{EVIL_FILE}:20 ({QUOTES},fn)"  # ';' in a name would split the frame
    assert folded == f"{MAIN};{evil} 3000\n{MAIN};{FORWARD} 1500\n"


def test_folded_stacks_at_the_end_and_per_device(build, trace):
    assert report("flamegraph", trace, "--format", "folded", "--at", "end").stdout == f"{MAIN};{FORWARD} 2500\n"
    # A device the trace does not have is refused, not drawn empty (issue 12).
    fails(["flamegraph", trace, "--format", "folded", "--device", "3"],
          "device 3 is not in the trace")


def test_flame_svg_is_well_formed_and_escaped(build, trace, work):
    svg_path = work / "flame.svg"
    report("flamegraph", trace, "-o", svg_path)
    text = svg_path.read_text()
    # The one script is the SVG's own (its zoom and search), closed where it was opened:
    # the names went in as text.
    assert HOSTILE not in text and text.count("<script") == 1 and text.count("</script>") == 1
    assert text.index("<script><![CDATA[") > text.rindex("</g>")
    root = ElementTree.fromstring(text)  # well-formed XML, whatever the names held
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in root.iter(f"{ns}title")]
    assert any(t.startswith(f"{EVIL} (3000 bytes") for t in titles), titles
    assert any(t.startswith(f"{FORWARD} (1500 bytes") for t in titles), titles
    assert any(t.startswith("all (4500 bytes") for t in titles), titles
    widths = {t.text.split(" (")[0]: float(g.find(f"{ns}rect").get("width"))
              for g in root.iter(f"{ns}g") for t in [g.find(f"{ns}title")]}
    # Frames are as wide as their bytes: the evil stack is twice the forward one.
    assert widths[EVIL.split(" (")[0]] == pytest.approx(2 * widths[FORWARD.split(" (")[0]], abs=1)


def test_flamegraph_usage_errors(build, trace):
    fails(["flamegraph", trace, "--format", "png"], "--format takes svg or folded")
    fails(["flamegraph", trace, "--estimate", "x.json"], "--estimate is for the report and html")


# ---- Perfetto / Chrome trace JSON -------------------------------------------------------

def test_perfetto_export(build, trace, work):
    path = work / "hand.json"
    report("export", "perfetto", trace, "-o", path)
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    assert {e["ph"] for e in events} <= {"M", "C", "i", "B", "E"}
    assert all(e["pid"] == 4242 for e in events)
    counters = [(e["ts"], e["args"]["bytes"]) for e in events if e["ph"] == "C"]
    assert {e["name"] for e in events if e["ph"] == "C"} == {"live bytes cuda:0"}
    assert counters == [(0, 0), (0.1, 1000), (0.2, 4000), (0.3, 4500), (0.4, 1500), (0.5, 3500),
                        (0.6, 2500), (0.7, 2500)]
    instants = {e["cat"]: e for e in events if e["ph"] == "i"}
    assert instants["peak"]["ts"] == 0.3 and instants["peak"]["args"]["bytes"] == PEAK
    assert instants["oom"]["ts"] == 0.55 and instants["oom"]["args"]["size"] == 10**7
    assert instants["annotation"]["name"] == ANNOTATION_NAME and instants["annotation"]["ts"] == 0.15
    assert instants["tracing-started"]["ts"] == 0 and instants["process-exit"]["ts"] == 0.7
    slices = [(e["ph"], e["ts"], e.get("name")) for e in events if e["ph"] in "BE"]
    assert slices == [("B", 0.25, PHASE_NAME), ("E", 0.45, None)]
    assert document["metadata"]["peak_bytes"] == PEAK


def test_perfetto_downsampling_keeps_the_peak(build, model_trace, work):
    path = work / "model.json"
    report("export", "perfetto", model_trace, "--points", "3", "-o", path)
    counters = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "C"]
    assert len(counters) <= 1 + 3 * 3 + 1  # the start, three per bucket, the end
    assert max(e["args"]["bytes"] for e in counters) == report_json(model_trace)["summary"]["peak_bytes"]


# ---- PyTorch's memory snapshot ----------------------------------------------------------

def replay_peak(snapshot, device=0):
    """The peak of the active-memory timeline, as memory_viz draws it: allocations add,
    completed frees remove, blocks live in the snapshot's segments that the history does
    not allocate were live from the start."""
    allocated_in_history = {e["addr"] for e in snapshot["device_traces"][device] if e["action"] == "alloc"}
    live = sum(b["requested_size"] for s in snapshot["segments"] if s["device"] == device
               for b in s["blocks"] if b["state"] == "active_allocated" and b["address"] not in allocated_in_history)
    peak = live
    for event in snapshot["device_traces"][device]:
        if event["action"] == "alloc":
            live += event["size"]
            peak = max(peak, live)
        elif event["action"] == "free_completed":
            live -= event["size"]
    return peak


@pytest.fixture(scope="module")
def memory_viz():
    import torch.cuda._memory_viz as memory_viz  # torch is installed by scripts/setup.sh
    return memory_viz


def test_pytorch_snapshot_opens_in_torch_memory_viz(build, trace, work, memory_viz):
    path = work / "hand.pickle"
    report("export", "pytorch", trace, "-o", path)
    with open(path, "rb") as file:
        snapshot = pickle.load(file)
    history = snapshot["device_traces"][0]
    assert [(e["action"], e.get("addr")) for e in history] == [
        ("segment_alloc", 0x1000), ("alloc", 0x1000), ("segment_alloc", 0x2000), ("alloc", 0x2000),
        ("segment_alloc", 0x3000), ("alloc", 0x3000),
        ("free_requested", 0x2000), ("free_completed", 0x2000), ("segment_free", 0x2000),
        ("segment_alloc", 0x4000), ("alloc", 0x4000), ("oom", 0),
        ("free_requested", 0x1000), ("free_completed", 0x1000), ("segment_free", 0x1000)]
    assert history[2]["frames"] == [{"filename": EVIL_FILE, "line": 20, "name": EVIL_FUNCTION},
                                    {"filename": MODEL, "line": 1, "name": "main"}]
    assert history[11]["size"] == 10**7 and history[11]["device_free"] == 10**6 - 3500
    assert history[1]["time_us"] == (1700000000000000000 + 100) // 1000
    # torch's own readers: the segment summary (which checks its accounting), the event
    # listing, the flame graph of what is live, and the HTML of memory_viz.
    assert "total_reserved: 2.4KiB" in memory_viz.segsum(snapshot)
    listing = memory_viz.trace(snapshot)
    assert "raise OutOfMemoryError # 9.5MiB requested" in listing and "15 entries" in listing
    live = memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in live.splitlines()) == END
    assert sum(memory_viz.calc_active(segment) for segment in snapshot["segments"]) == END
    assert "snapshot.pickle" in memory_viz.trace_plot(snapshot)
    assert replay_peak(snapshot) == PEAK


def test_pytorch_snapshot_at_the_peak_holds_the_peak(build, trace, work, memory_viz):
    path = work / "hand-peak.pickle"
    report("export", "pytorch", trace, "--at", "peak", "-o", path)
    with open(path, "rb") as file:
        snapshot = pickle.load(file)
    assert sum(memory_viz.calc_active(segment) for segment in snapshot["segments"]) == PEAK
    live = memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert sorted(int(line.rsplit(" ", 1)[1]) for line in live.splitlines()) == [500, 1000, 3000]
    assert snapshot["device_traces"][0][-1]["action"] == "alloc"  # it ends at the peak


def test_pytorch_snapshot_of_a_model_gives_the_reports_peak(build, model_trace, work, memory_viz):
    path = work / "model.pickle"
    report("export", "pytorch", model_trace, "-o", path)
    with open(path, "rb") as file:
        snapshot = pickle.load(file)
    document = report_json(model_trace)
    assert replay_peak(snapshot) == document["summary"]["peak_bytes"]
    assert sum(memory_viz.calc_active(s) for s in snapshot["segments"]) == document["summary"]["end_bytes"]
    memory_viz.segsum(snapshot)
    frames = [f["name"] for e in snapshot["device_traces"][0] for f in e["frames"]]
    assert "forward" in frames and "attention" in frames


# ---- the HTML report --------------------------------------------------------------------

def html_data(path):
    text = Path(path).read_text()
    match = re.search(r'<script type="application/json" id="memtrace-data">(.*?)</script>', text, re.S)
    return text, json.loads(match.group(1))


def test_html_is_self_contained_and_escapes_the_trace(build, trace, work):
    path = work / "hand.html"
    report("html", trace, "-o", path)
    text, data = html_data(path)
    assert HOSTILE not in text and "<script>alert" not in text
    assert text.count("<script") == text.count("</script>") == 4  # license, d3, data, glue
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), "nothing may load from elsewhere"
    assert "Copyright: 2010-2017, Mike Bostock" in text and "BSD-3-Clause" in text  # d3's license
    assert "https://d3js.org v5" in text
    assert data["summary"]["peak_bytes"] == PEAK and data["timeline"]["peak"]["bytes"] == PEAK
    assert [r["location"] for r in data["table"]["rows"]] == [EVIL, FORWARD]
    assert data["timeline"]["lane_names"] == [EVIL, FORWARD, "other"]
    assert [m["name"] for m in data["timeline"]["marks"] if m["kind"] == "annotation"] == [ANNOTATION_NAME]
    # Each sample's lanes add up to its bytes; the peak sample is there.
    timeline = data["timeline"]
    for i, total in enumerate(timeline["bytes"]):
        assert sum(lane[i] for lane in timeline["lanes"]) == total
    assert (PEAK_TIME_NS, PEAK) in zip(timeline["time_ns"], timeline["bytes"])


def test_html_timeline_is_downsampled(build, model_trace, work):
    path = work / "model-small.html"
    report("html", model_trace, "--points", "4", "-o", path)
    _, data = html_data(path)
    timeline = data["timeline"]
    assert len(timeline["time_ns"]) <= 1 + 3 * 4 + 1
    assert max(timeline["bytes"]) == report_json(model_trace)["summary"]["peak_bytes"]
    assert timeline["time_ns"] == sorted(timeline["time_ns"])


def open_in_chromium(html, screenshot):
    """Opens `html`, waits for the report to be drawn, saves a screenshot; returns the
    browser (the caller closes it)."""
    browser = chromium.Browser()
    try:
        browser.open(html)
        browser.wait_until("document.body.getAttribute('data-ready') === '1'")
        browser.screenshot(screenshot)
        print(f"screenshot: {screenshot}")
    except BaseException:
        browser.close()
        raise
    return browser


def needs_chromium(test):
    """Marks a test that drives Chromium. scripts/setup.sh installs it, so a missing Chromium
    is a broken setup: the test fails saying so (it is never skipped)."""
    def checked(*args, **kwargs):
        assert chromium.executable() is not None, "Chromium is not installed (run scripts/setup.sh)"
        return test(*args, **kwargs)
    checked.__name__, checked.__doc__ = test.__name__, test.__doc__
    checked.__signature__ = __import__("inspect").signature(test)
    return checked


@needs_chromium
def test_html_in_chromium(build, model_trace, work):
    html = work / "model.html"
    report("html", model_trace, "-o", html)
    document = report_json(model_trace)
    top = document["live"]["rows"][0]["location"]
    with open_in_chromium(html, work / "model.png") as browser:
        assert browser.problems() == []
        assert browser.requests() == [f"file://{html}"]
        peak = browser.evaluate("document.querySelector('#timeline .peak-marker').getAttribute('data-bytes')")
        assert int(peak) == document["summary"]["peak_bytes"]
        assert browser.evaluate("document.querySelector('#table td.location').textContent") == top
        assert browser.evaluate("document.querySelector('#legend .legend-item').textContent") == top
        assert browser.evaluate("document.querySelectorAll('#table tbody tr.row').length") == len(document["live"]["rows"])
        assert browser.evaluate("document.querySelectorAll('#timeline path.lane').length") == 9  # 8 lines, other
        # Hovering at the peak shows the bytes there and the locations holding them.
        box = browser.evaluate("""(() => { const r = document.querySelector('#timeline .peak-marker circle')
            .getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2 + 40]; })()""")
        browser.mouse("mouseMoved", box[0], box[1])
        tooltip = browser.evaluate("document.getElementById('tooltip').textContent")
        assert "958.0 MiB live" in tooltip and top in tooltip, tooltip
        # A click on a frame of the flame graph zooms to it.
        frame = browser.evaluate("""(() => { const g = [...document.querySelectorAll('#flame .flame-frame')]
            .find(g => g.getAttribute('data-name').endsWith('(mlp)')); g.scrollIntoView({block: 'center'});
            const r = g.querySelector('rect').getBoundingClientRect();
            return [r.x + 2, r.y + r.height / 2, r.width]; })()""")
        browser.click(frame[0], frame[1])
        assert browser.evaluate("document.querySelector('#flame svg').getAttribute('data-focus')").endswith("(mlp)")
        width = browser.evaluate("""[...document.querySelectorAll('#flame .flame-frame')]
            .find(g => g.getAttribute('data-name').endsWith('(mlp)')).querySelector('rect').getBoundingClientRect().width""")
        assert width > frame[2] and width > 600
        assert browser.problems() == []


@needs_chromium
def test_hostile_names_stay_text_in_chromium(build, trace, work):
    html = work / "hand.html"
    report("html", trace, "-f", "-o", html)
    with open_in_chromium(html, work / "hand.png") as browser:
        assert browser.problems() == []
        assert browser.requests() == [f"file://{html}"]
        assert not [e for e in browser.events if e["method"] == "Page.javascriptDialogOpening"]
        cells = browser.evaluate("[...document.querySelectorAll('#table td.location')].map(c => c.textContent)")
        assert cells == [EVIL, FORWARD]
        assert browser.evaluate("document.querySelectorAll('script').length") == 4
        marks = browser.evaluate("[...document.querySelectorAll('#timeline .mark text, #timeline .phase text')]"
                                 ".map(t => t.textContent)")
        assert ANNOTATION_NAME in marks and PHASE_NAME in marks
        assert int(browser.evaluate("document.querySelector('.peak-marker').getAttribute('data-bytes')")) == PEAK
        assert "dev <b>0</b>" in browser.evaluate("document.getElementById('summary').textContent")


# ---- the estimate -----------------------------------------------------------------------

def write_estimate(path, **changes):
    estimate = {
        "format": "memtrace-estimate", "version": 1, "model": "hand", "semantics": "eager",
        "lower_bound": False,
        "summary": {"peak_requested_bytes": 6000, "peak_allocated_bytes": 6144,
                    "activation_peak_requested_bytes": 2000, "weight_bytes": 4000, "input_bytes": 0},
        "peak": {"by_frame": [{"file": MODEL, "line": 10, "function": "forward", "bytes": 1200, "tensors": 2},
                              {"file": MODEL, "line": 10, "function": "forward", "bytes": 34, "tensors": 1},
                              {"file": MODEL, "line": 99, "function": "other", "bytes": 7, "tensors": 1},
                              {"file": None, "line": None, "function": None, "bytes": 5, "tensors": 1}],
                 "by_user_frame": [{"file": MODEL, "line": 10, "function": "forward", "bytes": 777, "tensors": 2},
                                   {"file": MODEL, "line": 1, "function": "main", "bytes": 5000, "tensors": 3}],
                 "by_module": [{"module_path": "layer", "bytes": 1234, "tensors": 2}]}}
    estimate.update(changes)
    path.write_text(json.dumps(estimate))
    return path


def test_html_with_an_estimate(build, trace, work):
    html = work / "estimated.html"
    report("html", trace, "--estimate", write_estimate(work / "est.json"), "--frame", "innermost", "-o", html)
    _, data = html_data(html)
    assert data["estimate"]["peak_requested_bytes"] == 6000
    # By line, innermost frame: model.py:10 is predicted 1200 + 34; the evil line nothing.
    assert [(r["location"], r["predicted_bytes"]) for r in data["table"]["rows"]] == [(EVIL, 0), (FORWARD, 1234)]
    # The default, --frame user, takes by_user_frame (every frame of this trace is user code).
    report("html", trace, "--estimate", work / "est.json", "-f", "-o", html)
    _, data = html_data(html)
    assert [(r["location"], r["predicted_bytes"]) for r in data["table"]["rows"]] == [(EVIL, 0), (FORWARD, 777)]
    report("html", trace, "--estimate", work / "est.json", "--group-by", "file", "--frame", "innermost", "-f",
           "-o", html)
    _, data = html_data(html)
    assert [(r["location"], r["predicted_bytes"]) for r in data["table"]["rows"]] == [(EVIL_FILE, 0), (MODEL, 1241)]
    report("html", trace, "--estimate", work / "est.json", "--group-by", "stack", "-f", "-o", html)
    _, data = html_data(html)
    assert [r["predicted_bytes"] for r in data["table"]["rows"]] == [None, None]


def test_report_with_an_estimate_side_by_side(build, trace, work):
    estimate = write_estimate(work / "est-text.json")
    text = report(trace, "--estimate", estimate, "--frame", "innermost").stdout
    # The measured peak is 4500 bytes; 6000 predicted is 33.3 % more.
    assert "Predicted peak: 5.859 KiB (6000 bytes) by memtrace-estimate, eager semantics: +33.3 % " \
           "against the measured peak" in text
    header = [line for line in text.splitlines() if line.startswith("Mem ")][0]
    assert header.split() == ["Mem", "Predicted", "Cumulative", "Mem", "Median", "Count", "Location"]
    rows = {line.split("  ")[-1].strip(): line.split()[2:4] for line in text.splitlines()
            if line.endswith("(forward)") or line.endswith(f"({EVIL_FUNCTION})")}
    assert rows == {FORWARD: ["1.205", "KiB"], EVIL: ["0", "B"]}
    # What the estimator predicted where nothing was live at the measured peak.
    tail = text.split("but not live at the measured peak:\n")[1].splitlines()
    assert tail == [f"{'7 B':<11} {MODEL}:99 (other)", f"{'5 B':<11} <no source line>"]

    document = report_json(trace, "--estimate", estimate, "--frame", "innermost")
    assert document["estimate"]["peak_requested_bytes"] == 6000
    assert [(r["location"], r["predicted_bytes"]) for r in document["live"]["rows"]] == [(EVIL, 0), (FORWARD, 1234)]
    assert [(e["line"], e["bytes"]) for e in document["estimate"]["predicted_only"]] == [(99, 7), (0, 5)]
    csv_lines = report(trace, "--estimate", estimate, "--format", "csv", "--frame", "innermost").stdout.splitlines()
    assert csv_lines[0].endswith(",predicted_bytes")
    assert [line.rsplit(",", 1)[1] for line in csv_lines[1:]] == ["0", "1234"]
    # Without an estimate nothing changes.
    assert "Predicted" not in report(trace).stdout


def test_module_rows_meet_the_estimates_modules(build, work):
    # The package names modules under a root ("model.layers.0"), the estimator by
    # named_modules() ("layers.0", the root ""): Note [Module paths of the tracer and the estimator].
    w = TraceWriter()
    root, layer, other = w.string("model"), w.string("model.layers.0"), w.string("model.head")
    w.context(1, 0).marker(0, TRACING_STARTED)
    w.module_scope(root).alloc(10, 0x1000, 100)
    w.module_scope(layer).alloc(20, 0x2000, 2000)
    w.module_scope(other).alloc(30, 0x3000, 30)
    w.module_scope(0).alloc(40, 0x4000, 4)
    trace = w.write(work / "modules.bin")
    estimate = write_estimate(work / "est-modules.json", peak={
        "by_frame": [], "by_user_frame": [],
        "by_module": [{"module_path": "", "bytes": 111, "tensors": 1},
                      {"module_path": "layers.0", "bytes": 1999, "tensors": 2}]})
    rows = report_json(trace, "--group-by", "module", "--estimate", estimate)["live"]["rows"]
    assert [(r["location"], r["bytes"], r["predicted_bytes"]) for r in rows] == [
        ("model.layers.0", 2000, 1999), ("model", 100, 111), ("model.head", 30, 0), ("<no module>", 4, None)]


@needs_chromium
def test_estimate_drawn_in_chromium(build, trace, work):
    html = work / "estimated-view.html"
    report("html", trace, "--estimate", write_estimate(work / "est2.json"), "-o", html)
    with open_in_chromium(html, work / "estimated.png") as browser:
        assert browser.problems() == []
        assert browser.requests() == [f"file://{html}"]
        assert int(browser.evaluate("document.querySelector('.predicted-peak').getAttribute('data-bytes')")) == 6000
        headers = browser.evaluate("[...document.querySelectorAll('#table th')].map(h => h.textContent)")
        assert headers == ["Mem", "Cumulative Mem", "Median", "Count", "Predicted", "Location"]
        assert browser.evaluate("[...document.querySelectorAll('#table td.predicted')].map(c => c.textContent)") \
            == ["0 B", "777 B"]  # by the user's frame, the default


def test_bad_estimates_are_refused(build, trace, work):
    not_estimate = work / "not-estimate.json"
    not_estimate.write_text(json.dumps({"format": "something-else", "summary": {}}))
    fails(["html", trace, "--estimate", not_estimate], str(not_estimate),
          'not a memtrace estimate (no "format": "memtrace-estimate")')
    broken = work / "broken.json"
    broken.write_text("{\"format\": ")
    fails(["html", trace, "--estimate", broken], "not valid JSON")
    fails(["html", trace, "--estimate", work / "missing.json"], "cannot open the estimate")
    fails(["html", trace, "--estimate", write_estimate(work / "v2.json", version=2)], "estimate format version 2")
    fails(["html", trace, "--estimate", write_estimate(work / "nopeak.json", summary={})], "peak_requested_bytes")


def test_view_commands_refuse_bad_traces(build, work):
    damaged = work / "damaged.bin"
    damaged.write_bytes(b"GIF89a" + b"\0" * 40)
    for command in (["html"], ["flamegraph"], ["export", "perfetto"], ["export", "pytorch"]):
        fails([*command, damaged], str(damaged), "not a memtrace trace")
    fails(["export", "svg", damaged], "export takes perfetto or pytorch")
    fails(["html", damaged, "--points", "0"], "--points takes a number")


# ---- progress -----------------------------------------------------------------------------

def test_progress_only_on_a_terminal(build, trace, work):
    # Not a terminal: nothing on stderr.
    assert report(trace, "--top", "1").stderr == ""
    # A terminal: each pass is named with a percentage (shown at once: no delay), and the
    # line is erased at the end.
    text = progress_on_a_terminal([Build.report, "html", trace, "-o", work / "progress.html"])
    passes = re.findall(r"\r\x1b\[Kmemtrace-report: \S*hand\.bin: ([a-z ]+?) +\d+%", text)
    assert passes == ["finding the peak", "replaying to the peak", "drawing the timeline"], text
    assert text.endswith("\r\x1b[K")


def test_mixed_stacks_python_then_native(build, work):
    """With native stacks, a frame's Python stack goes on into the native frames from the
    C call down to CUDA's, without the interpreter's own frames in between."""
    trace = work / "all.bin"
    run([sys.executable, Build.root / "tests" / "preload" / "scripts" / "host_memory_model.py", Build.cuda],
        preloaded(trace, MEMTRACE_STACKS="all"))
    lines = report("flamegraph", trace, "--format", "folded").stdout.splitlines()
    forward = [line for line in lines if "host_memory_model.py:68 (forward)" in line]
    assert len(forward) == 1, lines
    frames = forward[0].rsplit(" ", 1)[0].split(";")
    python = [f for f in frames if "host_memory_model.py:" in f]
    assert frames[:len(python)] == python  # Python first, outermost first
    assert frames[-1].startswith("cudacalls_malloc [libcudacalls.so]"), frames
    assert not any("_PyEval_EvalFrame" in f or "[python" in f or "[libpython" in f for f in frames), frames
    snapshot_path = work / "all.pickle"
    report("export", "pytorch", trace, "--at", "peak", "-o", snapshot_path)
    with open(snapshot_path, "rb") as file:
        snapshot = pickle.load(file)
    biggest = max(snapshot["segments"], key=lambda s: s["total_size"])
    names = [f["name"] for f in biggest["frames"]]
    assert names[0] == "cudacalls_malloc" and names[-1] == "<module>" and "forward" in names, names
