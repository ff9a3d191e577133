"""The HTML page and the flame graphs as a user sees them, in headless Chromium: geometry
(no two timeline labels intersect, at any zoom and width; the lane holding the peak has an
area), round y ticks, the view opening on the traced activity, and the flame graphs' short
names, search, zoom and "hide library frames" (issue 14). Every page opened is checked for
console errors, exceptions and network requests."""
import json
import math
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chromium
from memtrace_testing import Build, run
from trace_writer import (
    ANNOTATION,
    PHASE_BEGIN,
    PHASE_END,
    PROCESS_EXIT,
    TRACING_STARTED,
    TRACING_STOPPED,
    TraceWriter,
)

MIB = 1 << 20
MS = 10**6  # nanoseconds


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("page")


def report(*args):
    return run([Build.report, *args], timeout=120)


def write_estimate(path, peak_bytes):
    path.write_text(json.dumps({
        "format": "memtrace-estimate", "version": 1, "model": "synthetic", "semantics": "eager",
        "lower_bound": False,
        "summary": {"peak_requested_bytes": peak_bytes, "peak_allocated_bytes": peak_bytes,
                    "activation_peak_requested_bytes": 0, "weight_bytes": 0, "input_bytes": 0},
        "peak": {"by_frame": [], "by_user_frame": [], "by_module": []}}))
    return path


def activity_trace(path, *, peak_at, untraced_ms=0, duration_ms=1000, annotations=20, exit_mark=True):
    """A training-like trace: `untraced_ms` of memory allocated before tracing began (15 MiB,
    flat), then steps of allocations and frees for `duration_ms`, with annotations every
    step (several right at the peak), a phase, and a peak of 60 MiB at `peak_at` (a
    fraction of the traced span; 1.0: the last event). Returns (path, peak time in ns)."""
    w = TraceWriter()
    model, step_fn, head = w.string("/home/user/model.py"), w.string("step"), w.string("head")
    steps = w.python_stack(0, w.frame(model, step_fn, 5))
    at_head = w.python_stack(steps, w.frame(model, head, 9))
    phase = w.string("forward")
    names = [w.string(f"step {i}") for i in range(annotations)]
    w.device(0, w.string("gpu"), 80 << 30).context(1, 0)
    begin = untraced_ms * MS
    if untraced_ms:
        w.alloc(0, 0x100000000, 15 * MIB)
    w.marker(begin, TRACING_STARTED)
    span = duration_ms * MS
    peak_time = begin + int(peak_at * span)
    if peak_at >= 1.0:
        peak_time = begin + span
    events = []  # (time, kind, argument)
    for i in range(annotations):
        events.append((begin + (i * span) // max(annotations, 1), "annotation", names[i]))
    for i in range(3):  # marks crowding the peak
        name = names[i % annotations] if annotations else 0
        events.append((max(begin, peak_time - i * 1000), "annotation", name))
    events.append((begin + span // 4, "phase-begin", phase))
    events.append((begin + span // 2, "phase-end", 0))
    step_count = 40
    for i in range(step_count):
        t = begin + (i * span) // step_count + 1
        if abs(t - peak_time) < span // step_count:
            continue
        events.append((t, "alloc", (0x200000000 + i * 0x10000000, (5 + (i * 7) % 20) * MIB)))
        events.append((t + span // (3 * step_count), "free", 0x200000000 + i * 0x10000000))
    events.append((max(begin, peak_time - 10), "alloc-head", (0x900000000, 30 * MIB)))
    events.append((peak_time, "alloc", (0xA00000000, (60 - 30 - (15 if untraced_ms else 0)) * MIB)))
    if peak_at < 1.0:
        events.append((peak_time + 5, "free", 0xA00000000))
        events.append((peak_time + 6, "free", 0x900000000))
    order = {"annotation": 0, "phase-begin": 0, "phase-end": 0, "alloc-head": 1, "alloc": 2, "free": 3}
    for time, kind, argument in sorted(events, key=lambda e: (e[0], order[e[1]])):
        if kind == "annotation":
            w.marker(time, ANNOTATION, argument)
        elif kind == "phase-begin":
            w.marker(time, PHASE_BEGIN, argument)
        elif kind == "phase-end":
            w.marker(time, PHASE_END)
        elif kind == "alloc-head":
            w.alloc(time, *argument, at_head)
        elif kind == "alloc":
            w.alloc(time, *argument, steps)
        else:
            w.free(time, argument)
    if exit_mark and peak_at < 1.0:
        w.marker(begin + span + MS, PROCESS_EXIT)
    return w.write(path), peak_time


def html(work, name, trace, *extra):
    path = work / f"{name}.html"
    report("html", trace, "-o", path, *extra)
    return path


class Page:
    """A report opened in Chromium; checks that it loaded nothing and logged no problem."""

    def __init__(self, path, width=1400):
        self.path = path
        self.browser = chromium.Browser(width=width, height=1000)
        self.browser.open(path)
        self.browser.wait_until("document.documentElement.getAttribute('data-ready') === '1' || "
                                "(document.body && document.body.getAttribute('data-ready') === '1')")

    def __getattr__(self, name):
        return getattr(self.browser, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                assert self.browser.problems() == []
                assert self.browser.requests() == [f"file://{self.path}"]
        finally:
            self.browser.close()


LABEL_BOXES = """[...document.querySelectorAll('#timeline text.label')].filter(t =>
    t.getAttribute('display') !== 'none' && getComputedStyle(t).visibility !== 'hidden').map(t => {
    const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; })
    .filter(b => b[3] > b[1])"""
SVG_BOX = "(() => { const r = document.querySelector('#timeline svg').getBoundingClientRect();" \
          " return [r.left, r.top, r.right, r.bottom]; })()"


def check_labels(page, where):
    """No two label boxes intersect; each lies inside the chart; the peak's is shown when
    its point is in view. Returns the labels' texts."""
    boxes = page.evaluate(LABEL_BOXES)
    left, top, right, bottom = page.evaluate(SVG_BOX)
    for i, (text, x0, y0, x1, y1) in enumerate(boxes):
        assert left <= x0 and x1 <= right and top <= y0 and y1 <= bottom, (where, text, (x0, y0, x1, y1))
        for other, a0, b0, a1, b1 in boxes[i + 1:]:
            assert not (x0 < a1 and a0 < x1 and y0 < b1 and b0 < y1), (where, text, other)
    peak_in_view = page.evaluate("getComputedStyle(document.querySelector('.peak-marker')).visibility") == "visible"
    texts = [b[0] for b in boxes]
    if peak_in_view:
        assert any(t.startswith("peak ") for t in texts), (where, texts)
    return texts


def zoom_and_check(page, scenario):
    """The labels at the default view, zoomed in around the peak and elsewhere, zoomed out,
    and on the whole trace."""
    texts = check_labels(page, f"{scenario}: default view")
    circle = page.evaluate("(() => { const r = document.querySelector('.peak-marker circle')"
                           ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    plot = page.evaluate("(() => { const r = document.querySelector('#timeline .overlay')"
                         ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
    mid_y = plot[1] + plot[3] / 2
    for step, (x, delta) in enumerate([(circle[0], -300), (circle[0], -600), (circle[0] - 2, -900),
                                       (plot[0] + plot[2] * 0.3, 400), (plot[0] + plot[2] * 0.1, -500),
                                       (plot[0] + plot[2] * 0.9, 2000)]):
        page.wheel(x, mid_y, delta)
        check_labels(page, f"{scenario}: zoom step {step}")
    page.evaluate("document.getElementById('timeline-whole').click()")
    check_labels(page, f"{scenario}: whole trace")
    return texts


SCENARIOS = [
    # name, trace options, estimate (a factor of the peak, or None), page width
    ("peak-near-start", {"peak_at": 0.001}, 1.0, 1400),
    ("prediction-equal", {"peak_at": 0.5}, 1.0, 1400),
    ("prediction-beside", {"peak_at": 0.98}, 1.03, 1400),
    ("prediction-below", {"peak_at": 0.3}, 0.97, 1000),
    ("narrow", {"peak_at": 0.6, "annotations": 60}, 1.01, 700),
    ("peak-last-narrow", {"peak_at": 1.0, "untraced_ms": 9000}, 1.0, 700),
]


@pytest.mark.parametrize("name,options,factor,width", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_timeline_labels_never_intersect(build, work, name, options, factor, width):
    assert chromium.executable() is not None, "Chromium is not installed (run scripts/setup.sh)"
    trace, _ = activity_trace(work / f"{name}.bin", **options)
    extra = []
    if factor is not None:
        extra = ["--estimate", write_estimate(work / f"{name}.json", int(60 * MIB * factor))]
    with Page(html(work, name, trace, *extra), width=width) as page:
        texts = zoom_and_check(page, name)
        assert "tracing on" in texts or options["peak_at"] < 0.01, texts
        if factor is not None:
            assert any(t.startswith("predicted peak") for t in texts), texts
        page.screenshot(work / f"{name}.png")


def tick_texts(page):
    return page.evaluate("[...document.querySelectorAll('#timeline .y-axis .tick text')].map(t => t.textContent)")


def check_round(ticks):
    """0 first, then multiples of one step of 1, 2 or 5 x 10^k in one binary unit."""
    assert ticks[0] == "0", ticks
    values = []
    units = set()
    for text in ticks[1:]:
        match = re.fullmatch(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)", text)
        assert match, ticks
        values.append(float(match.group(1)))
        units.add(match.group(2))
    assert len(units) == 1, ticks
    step = values[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 9) in (1, 2, 5), ticks
    assert values == pytest.approx([step * (i + 1) for i in range(len(values))]), ticks


@pytest.mark.parametrize("peak", [1000, 4500, 60 * MIB, 958 * MIB, 3 * (1 << 30) + 123])
def test_y_ticks_are_round(build, work, peak):
    w = TraceWriter()
    w.device(0, w.string("gpu"), 80 << 30).context(1, 0).marker(0, TRACING_STARTED)
    w.alloc(10, 0x1000, peak // 3).alloc(20, 0x100000000, peak - peak // 3).free(30, 0x1000)
    trace = w.write(work / f"ticks-{peak}.bin")
    with Page(html(work, f"ticks-{peak}", trace)) as page:
        ticks = tick_texts(page)
        check_round(ticks)
        assert not any(re.search(r"\d\.\d{3}", t) for t in ticks), ticks
    if peak == 60 * MIB:  # the axis's top is 66 MiB
        assert ticks == ["0", "10 MiB", "20 MiB", "30 MiB", "40 MiB", "50 MiB", "60 MiB"]


def lane_width_at(page, lane, x, y, span=60):
    """How many pixels, from x rightwards, lie inside the lane's area at height y."""
    return page.evaluate(f"""(() => {{ let n = 0; for (let i = 0; i < {span}; i++) {{
        const hit = document.elementsFromPoint({x} + i, {y}).some(e => e.classList &&
            e.classList.contains('lane') && e.getAttribute('data-lane') === '{lane}');
        if (hit) n += 1; }} return n; }})()""")


def test_peak_at_the_last_event_shows_as_an_area(build, work):
    trace, _ = activity_trace(work / "last.bin", peak_at=1.0)
    _, data = html_data(html(work, "last", trace))
    assert data["timeline"]["time_ns"][-1] == data["timeline"]["peak"]["time_ns"]  # the last event
    with Page(work / "last.html") as page:
        # The lane holding most of the peak: the 30 MiB of model.py:5 (step) and model.py:9.
        lanes = data["timeline"]["lanes"]
        at_peak = [lane[-1] for lane in lanes]
        biggest = max(range(len(lanes)), key=lambda i: at_peak[i])
        below = sum(at_peak[:biggest])
        circle = page.evaluate("(() => { const r = document.querySelector('.peak-marker circle')"
                               ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        axis = page.evaluate("(() => { const r = document.querySelector('#timeline .overlay')"
                             ".getBoundingClientRect(); return [r.top, r.height]; })()")
        peak = data["timeline"]["peak"]["bytes"]
        top = peak * 1.1
        middle = (below + at_peak[biggest] / 2) / top
        y = axis[0] + axis[1] * (1 - middle)
        width = lane_width_at(page, biggest, circle[0] + 1, y)
        assert width > 0, (biggest, at_peak)
        assert width >= 10  # visible, not a hairline


def html_data(path):
    text = Path(path).read_text()
    match = re.search(r'<script type="application/json" id="memtrace-data">(.*?)</script>', text, re.DOTALL)
    return text, json.loads(match.group(1))


def view(page):
    domain = page.evaluate("document.querySelector('#timeline svg').getAttribute('data-view')")
    return [float(v) for v in domain.split()]


def test_view_opens_on_the_traced_activity(build, work):
    # 9 s of 15 MiB allocated before tracing began, then 1 s of activity: 90 % of the axis
    # would be a flat untraced band.
    trace, peak_time = activity_trace(work / "untraced.bin", peak_at=0.5, untraced_ms=9000)
    with Page(html(work, "untraced", trace)) as page:
        start, end = view(page)
        assert 8.9 < start <= 9.0 and end >= 10.001, (start, end)  # a little before 9 s
        assert page.evaluate("getComputedStyle(document.querySelector('.peak-marker')).visibility") == "visible"
        assert "where traced allocations begin" in page.evaluate("document.getElementById('timeline-note').textContent")
        page.evaluate("document.getElementById('timeline-whole').click()")
        assert view(page)[0] == 0
        plot = page.evaluate("(() => { const r = document.querySelector('#timeline .overlay')"
                             ".getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        page.double_click(*plot)
        assert view(page) == pytest.approx([start, end])
    # The live set at the peak stays in view when the peak came before traced allocations
    # began to matter: here it is the first traced allocation's neighbour, the view starts
    # before it.
    trace, peak_time = activity_trace(work / "untraced-early.bin", peak_at=0.0, untraced_ms=9000)
    with Page(html(work, "untraced-early", trace)) as page:
        start, end = view(page)
        assert start <= peak_time / 1e9 <= end
        assert page.evaluate("getComputedStyle(document.querySelector('.peak-marker')).visibility") == "visible"
    # A trace traced from its start opens on all of it.
    trace, _ = activity_trace(work / "traced.bin", peak_at=0.5)
    with Page(html(work, "traced", trace)) as page:
        assert view(page)[0] == 0


# ---- flame graphs -----------------------------------------------------------------------

def library_trace(work):
    """Stacks through a source tree (a directory with .git), an installed package, torch and
    a <frozen> module:
        repo/train.py:3 (main) > repo/pkg/model.py:10 (forward) > site-packages/torch/nn/
            modules/linear.py:125 (forward) > repo/pkg/ops.py:7 (matmul)     3 MiB
        repo/train.py:3 (main) > repo/pkg/model.py:12 (forward) > site-packages/torch/nn/
            modules/module.py:1778 (_call_impl) > <frozen importlib._bootstrap>:1 (_load)   1 MiB
        repo/train.py:3 (main) > repo/pkg/data.py:40 (load)                  4 MiB"""
    repo = work / "repo"
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    site = "/opt/venv/lib/python3.11/site-packages"
    w = TraceWriter()
    s = w.string
    train, model, ops, data = (s(str(repo / p)) for p in ("train.py", "pkg/model.py", "pkg/ops.py", "pkg/data.py"))
    linear, module, frozen = s(f"{site}/torch/nn/modules/linear.py"), s(f"{site}/torch/nn/modules/module.py"), \
        s("<frozen importlib._bootstrap>")
    main, forward, matmul, call, load = s("main"), s("forward"), s("matmul"), s("_call_impl"), s("load")
    root = w.python_stack(0, w.frame(train, main, 3))
    a = w.python_stack(root, w.frame(model, forward, 10))
    a = w.python_stack(a, w.frame(linear, forward, 125))
    a = w.python_stack(a, w.frame(ops, matmul, 7))
    b = w.python_stack(root, w.frame(model, forward, 12))
    b = w.python_stack(b, w.frame(module, call, 1778))
    b = w.python_stack(b, w.frame(frozen, s("_load"), 1))
    c = w.python_stack(root, w.frame(data, load, 40))
    w.device(0, s("gpu"), 80 << 30).context(1, 0).marker(0, TRACING_STARTED)
    w.alloc(10, 0x100000000, 3 * MIB, a).alloc(20, 0x200000000, 1 * MIB, b).alloc(30, 0x300000000, 4 * MIB, c)
    return w.write(work / "library.bin"), repo, site


def frames_shown(page):
    return page.evaluate("""[...document.querySelectorAll('#flame .flame-frame')].filter(g =>
        g.getAttribute('display') !== 'none').map(g => [g.getAttribute('data-name'),
        g.querySelector('text').textContent, Number(g.getAttribute('data-bytes')),
        g.querySelector('rect').getBoundingClientRect().width, g.classList.contains('match')])""")


def test_flame_graph_in_the_page(build, work):
    trace, repo, site = library_trace(work)
    with Page(html(work, "library", trace)) as page:
        shown = {name: (text, size) for name, text, size, _, _ in frames_shown(page)}
        # Short labels, full names kept.
        assert shown[f"{repo}/pkg/model.py:10 (forward)"][0] == "pkg/model.py:10 (forward)"
        linear = f"{site}/torch/nn/modules/linear.py:125 (forward)"
        assert shown[linear][0] == "torch/nn/modules/linear.py:125 (forward)"
        assert shown[f"{repo}/train.py:3 (main)"] == ("train.py:3 (main)", 8 * MIB)
        # Hover: the tooltip has the full path.
        box = page.evaluate("""(() => { const g = [...document.querySelectorAll('#flame .flame-frame')]
            .find(g => g.getAttribute('data-name').includes('linear.py')); g.scrollIntoView({block: 'center'});
            const r = g.querySelector('rect')
            .getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()""")
        page.mouse("mouseMoved", *box)
        assert f"{site}/torch/nn/modules/linear.py:125 (forward)" in page.evaluate(
            "document.getElementById('tooltip').textContent")

        # Search: "forward" matches model.py:10, model.py:12 and linear.py:125 (under
        # model.py:10): 3 + 1 MiB of 8, counted once.
        page.evaluate("document.getElementById('flame-search').focus()")
        page.type_text("FORWARD")
        matched = [name for name, _, _, _, hit in frames_shown(page) if hit]
        assert sorted(matched) == sorted([f"{repo}/pkg/model.py:10 (forward)", f"{repo}/pkg/model.py:12 (forward)",
                                          f"{site}/torch/nn/modules/linear.py:125 (forward)"])
        assert page.evaluate("document.getElementById('flame-matched').textContent") == \
            "matched: 4.000 MiB of 8.000 MiB (50.0%)"
        fills = page.evaluate("[...document.querySelectorAll('#flame .flame-frame.match rect')]"
                              ".map(r => r.getAttribute('fill'))")
        assert set(fills) == {"rgb(230,0,230)"}

        # Hide library frames: torch's and <frozen>'s go, their bytes stay with the caller.
        page.evaluate("document.getElementById('flame-hide-library').click()")
        after = {name: size for name, _, size, _, _ in frames_shown(page)}
        assert not [n for n in after if "site-packages" in n or "<frozen" in n], after
        assert after[f"{repo}/pkg/model.py:10 (forward)"] == 3 * MIB
        assert after[f"{repo}/pkg/ops.py:7 (matmul)"] == 3 * MIB  # now under model.py:10
        assert after[f"{repo}/pkg/model.py:12 (forward)"] == 1 * MIB
        assert after["all"] == 8 * MIB
        assert page.evaluate("document.querySelectorAll('#flame .flame-frame.library').length") == 0
        # The search still applies to what is drawn.
        assert page.evaluate("document.getElementById('flame-matched').textContent") == \
            "matched: 4.000 MiB of 8.000 MiB (50.0%)"

        # Zoom to data.py:40 by a click, then reset.
        box = page.evaluate("""(() => { const g = [...document.querySelectorAll('#flame .flame-frame')]
            .find(g => g.getAttribute('data-name').includes('data.py')); g.scrollIntoView({block: 'center'});
            const r = g.querySelector('rect')
            .getBoundingClientRect(); return [r.x + 3, r.y + r.height / 2, r.width]; })()""")
        page.click(box[0], box[1])
        assert page.evaluate("document.querySelector('#flame svg').getAttribute('data-focus')").endswith("(load)")
        widths = {name: width for name, _, _, width, _ in frames_shown(page)}
        assert widths[f"{repo}/pkg/data.py:40 (load)"] > 2 * box[2]
        assert f"{repo}/pkg/model.py:10 (forward)" not in widths
        page.evaluate("document.getElementById('flame-reset').click()")
        assert page.evaluate("document.querySelector('#flame svg').getAttribute('data-focus')") == "all"
        page.evaluate("document.getElementById('flame-hide-library').click()")
        assert any("site-packages" in name for name, *_ in frames_shown(page))


def svg_frames(page):
    return page.evaluate("""[...document.querySelectorAll('g.frame')].filter(g =>
        g.getAttribute('display') !== 'none').map(g => [g.getAttribute('data-name'),
        g.querySelector('text').textContent, Number(g.querySelector('rect').getAttribute('width')),
        g.querySelector('rect').getAttribute('fill')])""")


def test_svg_flame_graph_is_interactive(build, work):
    trace, repo, _ = library_trace(work)
    path = work / "library.svg"
    report("flamegraph", trace, "-o", path)
    text = path.read_text()
    assert text.count("<script") == 1 and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") \
        .replace('xmlns="http://www.w3.org/1999/xhtml"', "")
    with Page(path) as page:
        frames = {name: (label, width) for name, label, width, _ in svg_frames(page)}
        assert frames[f"{repo}/pkg/data.py:40 (load)"][0] == "pkg/data.py:40 (load)"
        assert frames[f"{repo}/pkg/data.py:40 (load)"][1] == pytest.approx(1200 * 4 / 8 - 0.5, abs=0.1)
        # Click to zoom: data.py:40 fills the width, other stacks go, its caller spans all.
        box = page.evaluate("""(() => { const g = [...document.querySelectorAll('g.frame')]
            .find(g => g.getAttribute('data-name').includes('data.py')); g.scrollIntoView({block: 'center'});
            const r = g.querySelector('rect')
            .getBoundingClientRect(); return [r.x + 3, r.y + r.height / 2]; })()""")
        page.click(*box)
        zoomed = {name: width for name, _, width, _ in svg_frames(page)}
        assert zoomed[f"{repo}/pkg/data.py:40 (load)"] == pytest.approx(1199.5, abs=0.1)
        assert f"{repo}/pkg/model.py:10 (forward)" not in zoomed
        assert zoomed[f"{repo}/train.py:3 (main)"] == pytest.approx(1199.5, abs=0.1)
        assert page.evaluate("document.getElementById('reset').getAttribute('visibility')") == "visible"
        page.evaluate("document.getElementById('reset').dispatchEvent(new MouseEvent('click'))")
        assert len(svg_frames(page)) == len(frames)
        # Search: type into the box.
        page.evaluate("document.getElementById('search').focus()")
        page.type_text("model.py")
        hits = sorted(name for name, _, _, fill in svg_frames(page) if fill == "rgb(230,0,230)")
        assert hits == [f"{repo}/pkg/model.py:10 (forward)", f"{repo}/pkg/model.py:12 (forward)"]
        assert page.evaluate("document.getElementById('matched').textContent") == \
            "matched: 4.000 MiB of 8.000 MiB (50.0%)"
        # Hide library frames: torch's and <frozen>'s go; ops.py moves up under model.py:10.
        page.evaluate("document.getElementById('hide-library').click()")
        hidden = {name: width for name, _, width, _ in svg_frames(page)}
        assert not [n for n in hidden if "site-packages" in n or "<frozen" in n], hidden
        assert hidden[f"{repo}/pkg/ops.py:7 (matmul)"] == pytest.approx(1200 * 3 / 8 - 0.5, abs=0.1)
        assert hidden[f"{repo}/pkg/model.py:12 (forward)"] == pytest.approx(1200 * 1 / 8 - 0.5, abs=0.1)
        rows = page.evaluate("""Object.fromEntries([...document.querySelectorAll('g.frame')].filter(g =>
            g.getAttribute('display') !== 'none').map(g => [g.getAttribute('data-name'),
            Number(g.querySelector('rect').getAttribute('y'))]))""")
        assert rows[f"{repo}/pkg/ops.py:7 (matmul)"] == rows[f"{repo}/pkg/model.py:10 (forward)"] + 17
        assert page.evaluate("document.getElementById('matched').textContent") == \
            "matched: 4.000 MiB of 8.000 MiB (50.0%)"
        page.screenshot(work / "library-svg.png")
        page.evaluate("document.getElementById('hide-library').click()")
        assert len(svg_frames(page)) == len(frames)


def test_a_one_event_peak_shows_in_a_long_trace(build, work):
    """A peak one microsecond wide in ten seconds is far under a pixel: the area still
    reaches it (each pixel column is drawn at its highest sample). Tracing switched on and
    off often is shaded, without a label per switch."""
    w = TraceWriter()
    model, fn = w.string("/home/user/model.py"), w.string("forward")
    stack = w.python_stack(0, w.frame(model, fn, 10))
    w.device(0, w.string("gpu"), 80 << 30).context(1, 0).marker(0, TRACING_STARTED)
    w.alloc(1000, 0x100000000, 10 * MIB, stack)
    second = 10**9
    # Three spans with tracing stopped, around a 50 MiB allocation freed 1 us later.
    w.marker(1 * second, TRACING_STOPPED).marker(2 * second, TRACING_STARTED)
    w.marker(3 * second, TRACING_STOPPED).marker(4 * second, TRACING_STARTED)
    w.alloc(5 * second, 0x200000000, 50 * MIB, stack).free(5 * second + 1000, 0x200000000)
    w.marker(7 * second, TRACING_STOPPED).marker(8 * second, TRACING_STARTED)
    w.alloc(10 * 10**9, 0x300000000, 1 * MIB, stack).marker(10 * 10**9 + 1, PROCESS_EXIT)
    trace = w.write(work / "spike.bin")
    with Page(html(work, "spike", trace)) as page:
        circle = page.evaluate("(() => { const r = document.querySelector('.peak-marker circle')"
                               ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        # Just under the peak's point, beside its marker line: inside the lane's area.
        hits = [page.evaluate(f"""document.elementsFromPoint({circle[0] + dx}, {circle[1] + 8}).some(e =>
            e.classList && e.classList.contains('lane'))""") for dx in (-1, 0, 1)]
        assert any(hits), hits
        assert page.evaluate("document.querySelectorAll('#timeline rect.tracing-off').length") == 3
        texts = check_labels(page, "spike")
        assert not [t for t in texts if t.startswith("tracing")], texts
        assert "tracing off" in page.evaluate("document.getElementById('legend').textContent")


def test_labels_lose_the_directory_their_files_share(build, work):
    """Outside any source tree found on this machine, the flame graph's labels drop the
    directory shared by the user's files; the names keep it."""
    w = TraceWriter()
    main_file, sub = w.string("/srv/jobs/run/train.py"), w.string("/srv/jobs/run/lib/ops.py")
    root = w.python_stack(0, w.frame(main_file, w.string("main"), 1))
    leaf = w.python_stack(root, w.frame(sub, w.string("mm"), 7))
    w.device(0, w.string("gpu"), 80 << 30).context(1, 0).marker(0, TRACING_STARTED)
    w.alloc(10, 0x1000, 4096, leaf)
    trace = w.write(work / "shared.bin")
    _, data = html_data(html(work, "shared", trace))
    labels = {node[1]: node[5] for node in data["flame"]["nodes"]}
    assert labels == {"all": "all", "/srv/jobs/run/train.py:1 (main)": "train.py:1 (main)",
                      "/srv/jobs/run/lib/ops.py:7 (mm)": "lib/ops.py:7 (mm)"}
    assert report("flamegraph", trace, "--format", "folded").stdout == \
        "/srv/jobs/run/train.py:1 (main);/srv/jobs/run/lib/ops.py:7 (mm) 4096\n"
