"""A run on memtrace's simulated GPU, and an out-of-memory, as every view shows them (issue 31):
on traces written by hand from docs/trace-format.md ("The simulated device"), so that every byte
is known. Each view says the run was simulated, on which profile (the text and JSON reports,
the CSV, the flame graph's title, the HTML page's banner, a job's ranks, a diff's sides, the
Python package), lists the reads of device values by line, and shows the OOM: the request, its
line and module, what was live by line and by module, the card's memory and how far over it
went. A trace of a card says none of it."""
import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chromium  # noqa: E402
from memtrace_testing import ROOT, Build, parse_records, report_json, run  # noqa: E402
from trace_writer import (CUDA_MALLOC_ASYNC, DEVICE_READ_API, PROCESS_EXIT,  # noqa: E402
                          SIMULATED_SIZE_API, TRACING_STARTED, TraceWriter)

MIB = 1 << 20
GIB = 1 << 30
BASE = 0x7f0000000000
MEANING = "memtrace's simulated GPU: sizes as on the card, no kernel ran, time not simulated"
READS_MEANING = ("On the simulated device these read zeros, so what the program did after them (a loop "
                 "ending at an end token, MoE routing, nonzero's size, a boolean mask) may differ from the card.")


def generation_trace(path, *, simulated=True, card_total=GIB, request=200 * MIB):
    """A generation loop on an L4 whose memory the user set to 1 GiB: 100 MiB of weights before
    tracing began, one read of 8 bytes then (untraced), 800 MiB at gen.py:31 (step) in
    model.lm_head, five reads of 4 bytes at gen.py:31 and one of 1 MiB at gen.py:12 (main), then
    a request of `request` at gen.py:31 that the card refuses. `simulated=False`: the same on a
    card of `card_total` bytes, with neither the simulated device's record nor reads."""
    w = TraceWriter(command=("python", "gen.py"))
    if simulated:
        w.simulated_device("l4", "/opt/memtrace/profiles/l4.json", GIB, memory_set_by_user=True)
    file = w.string("/home/user/gen.py")
    main = w.python_stack(0, w.frame(file, w.string("main"), 12))
    step = w.python_stack(main, w.frame(file, w.string("step"), 31))
    w.device(0, w.string("NVIDIA L4"), GIB if simulated else card_total)
    w.context(1, 0, api=CUDA_MALLOC_ASYNC)
    w.alloc(1, BASE, 100 * MIB)  # the weights, before tracing
    if simulated:
        w.context(1, 0, api=DEVICE_READ_API).device_read(2, 8)
    w.marker(3, TRACING_STARTED)
    w.context(1, 0, api=CUDA_MALLOC_ASYNC).module_scope(w.string("model.lm_head"))
    w.alloc(10, BASE + GIB, 800 * MIB, step)
    if simulated:
        w.context(1, 0, api=DEVICE_READ_API)
        for time in range(20, 25):
            w.device_read(time, 4, step)
        w.device_read(30, MIB, main)
        w.context(1, 0, api=CUDA_MALLOC_ASYNC)
    w.failed_alloc(40, request, step)
    w.free(50, BASE + GIB)
    w.marker(60, PROCESS_EXIT)
    return w.write(path)


@pytest.fixture
def simulated(tmp_path):
    return generation_trace(tmp_path / "simulated.bin")


@pytest.fixture
def card(tmp_path):
    return generation_trace(tmp_path / "card.bin", simulated=False, card_total=GIB)


def text_of(*args):
    return run([Build.report, *args]).stdout


def test_the_text_report_says_simulated_lists_the_reads_and_shows_the_oom(simulated):
    text = text_of(simulated)
    device = [line for line in text.splitlines() if line.startswith("  device 0")][0]
    assert device.startswith(f"  device 0   NVIDIA L4, 1.000 GiB (SIMULATED: profile l4, 1.000 GiB set by the "
                             f"user — {MEANING}): peak 900.0 MiB")
    # The OOM: request, line and module, what was live, the card's memory, how far over.
    oom = text[text.index("Out of memory"):text.index("Live at peak")]
    assert oom.splitlines()[:4] == [
        "Out of memory at 0.000 s (event 2) on device 0: a request of 200.0 MiB (209715200 bytes) failed",
        "  requested at  /home/user/gen.py:31 (step), in model.lm_head",
        "  live then     900.0 MiB in 2 allocations on device 0; live + request = 1.074 GiB",
        "  memory        1.000 GiB (the simulated l4's, set by the user): over by 76.00 MiB (79691776 bytes)",
    ]
    assert re.search(r"Live at the OOM by line:\n.*\n  800\.0 MiB +1  /home/user/gen.py:31 \(step\)\n"
                     r"  100\.0 MiB +1  untraced\n", oom), oom
    assert re.search(r"Live at the OOM by module:\n.*\n  800\.0 MiB +1  model.lm_head\n"
                     r"  100\.0 MiB +1  untraced\n", oom), oom
    # The reads, most frequent first, and what they mean.
    reads = text[text.index("Reads of device values"):]
    assert reads.splitlines() == [
        "Reads of device values (7 copies from the device to the host, 1.000 MiB), by line:",
        "  Count  Bytes       Location",
        "      5  20 B        /home/user/gen.py:31 (step)",
        "      1  1.000 MiB   /home/user/gen.py:12 (main)",
        "      1  8 B         untraced",
        READS_MEANING,
    ]
    # --frame user names the same lines (all in user code); --top cuts the reads too.
    assert "      5  20 B        /home/user/gen.py:31 (step)" in text_of(simulated, "--frame", "user")
    assert "top 1 of 3" in text_of(simulated, "--top", "1")


def test_json_and_csv_say_simulated_and_carry_the_reads_and_the_oom(simulated):
    document = report_json(simulated)
    assert document["simulated"] == {
        "profile": "l4", "profile_file": "/opt/memtrace/profiles/l4.json", "memory_bytes": GIB,
        "memory_set_by_user": True, "devices": 1, "label": "SIMULATED: profile l4, 1.000 GiB set by the user",
        "meaning": MEANING}
    reads = document["device_reads"]
    assert (reads["count"], reads["bytes"], reads["locations"]) == (7, MIB + 28, 3)
    assert [(row["location"], row["count"], row["bytes"]) for row in reads["rows"]] == [
        ("/home/user/gen.py:31 (step)", 5, 20), ("/home/user/gen.py:12 (main)", 1, MIB), ("untraced", 1, 8)]
    assert reads["rows"][0]["line"] == 31 and reads["rows"][0]["file"] == "/home/user/gen.py"
    assert reads["meaning"] == READS_MEANING
    oom = document["oom"]
    assert oom["request"] == {"event": 2, "time_ns": 40, "bytes": 200 * MIB, "device": 0,
                              "location": "/home/user/gen.py:31 (step)", "kind": "python",
                              "module": "model.lm_head", "file": "/home/user/gen.py", "line": 31,
                              "function": "step"}
    assert (oom["live_bytes"], oom["live_allocations"], oom["memory_bytes"], oom["memory_source"],
            oom["over_bytes"]) == (900 * MIB, 2, GIB, "simulated", 76 * MIB)
    assert [(r["location"], r["bytes"]) for r in oom["by_line"]["rows"]] == [
        ("/home/user/gen.py:31 (step)", 800 * MIB), ("untraced", 100 * MIB)]
    assert [(r["location"], r["bytes"]) for r in oom["by_module"]["rows"]] == [
        ("model.lm_head", 800 * MIB), ("untraced", 100 * MIB)]
    # The OOM is there whatever point the table is at; --at oom puts the table there too.
    assert report_json(simulated, "--at", "oom")["live"]["bytes"] == oom["live_bytes"]
    rows = list(csv.DictReader(io.StringIO(text_of(simulated, "--format", "csv"))))
    assert rows and all(row["simulated_profile"] == "l4" for row in rows)


def test_the_flame_graph_and_parse_say_so(simulated, tmp_path):
    svg = text_of("flamegraph", simulated)
    title = re.search(r'<text x="600" y="20"[^>]*>(.*?)</text>', svg).group(1)
    assert title.endswith("— SIMULATED: profile l4, 1.000 GiB set by the user (no kernel ran, time not simulated)")
    records = parse_records(simulated)
    device = [r for r in records if r["record"] == "simulated-device"]
    assert device == [{"record": "simulated-device", "words": [], "profile": "l4",
                       "file": "/opt/memtrace/profiles/l4.json", "memory_bytes": str(GIB),
                       "memory_set_by_user": "1", "devices": "1"}]
    assert records.index(device[0]) == 1  # right after the process record
    reads = [r for r in records if r["record"] == "device-read"]
    assert [(r["t"], r["bytes"], r["words"]) for r in reads[:2]] == [("2", "8", ["untraced"]), ("20", "4", ["traced"])]


def test_a_trace_of_a_card_says_none_of_it(card, tmp_path):
    text = text_of(card)
    assert "SIMULATED" not in text and "simulated" not in text and "Reads of device values" not in text
    # The OOM against the device record's memory.
    assert "  memory        1.000 GiB (the device's total): over by 76.00 MiB (79691776 bytes)" in text
    document = report_json(card)
    assert document["simulated"] is None and "device_reads" not in document
    assert document["oom"]["memory_source"] == "device" and document["oom"]["over_bytes"] == 76 * MIB
    assert "simulated_profile" not in text_of(card, "--format", "csv").splitlines()[0]
    # A request that fits what no allocation holds: under the memory, and said so.
    roomy = generation_trace(tmp_path / "roomy.bin", simulated=False, card_total=2 * GIB)
    assert ("  memory        2.000 GiB (the device's total): 948.0 MiB under it; the rest was held "
            "outside any allocation call") in text_of(roomy)
    assert report_json(roomy)["oom"]["over_bytes"] == -948 * MIB
    # A trace without a failed allocation has no OOM.
    w = TraceWriter()
    w.device(0, w.string("GPU"), GIB).context(1, 0).alloc(1, BASE, 64)
    fine = w.write(tmp_path / "fine.bin")
    assert "Out of memory" not in text_of(fine) and report_json(fine)["oom"] is None


def test_a_report_of_another_device_shows_no_oom(simulated, tmp_path):
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), GIB).device(1, w.string("GPU 1"), GIB)
    w.context(1, 1).alloc(1, BASE, 64 * MIB)
    w.context(1, 0).alloc(2, BASE + GIB, 900 * MIB).failed_alloc(3, 200 * MIB)
    two = w.write(tmp_path / "two.bin")
    assert report_json(two, "--device", "1")["oom"] is None
    whole = report_json(two)["oom"]
    # Only the request's device competes with it: device 1's 64 MiB are not counted.
    assert (whole["live_bytes"], whole["over_bytes"]) == (900 * MIB, 76 * MIB)


def test_the_python_package_reports_it(simulated):
    sys.path.insert(0, str(ROOT / "python"))
    from mem_tracer import report

    data = report.report_data(trace=simulated)
    assert data["simulated"]["profile"] == "l4" and data["oom"]["over_bytes"] == 76 * MIB
    assert data["device_reads"]["count"] == 7
    out = io.StringIO()
    report.report_stats(trace=simulated, file=out)
    assert "(SIMULATED: profile l4, 1.000 GiB set by the user" in out.getvalue()
    assert "over by 76.00 MiB" in out.getvalue() and READS_MEANING in out.getvalue()


def rank_trace(path, rank, profile):
    """A rank of a 2-rank job, on the simulated `profile` (None: a card), peaking at 64 MiB."""
    w = TraceWriter(pid=100 + rank).distributed(rank, 2, local_rank=rank, job_id="job-9")
    if profile:
        w.simulated_device(profile, f"/opt/memtrace/profiles/{profile}.json", 150_754_820_096, devices=2)
    w.device(0, w.string("NVIDIA H200"), 150_754_820_096).context(1, 0)
    w.marker(1, TRACING_STARTED)
    w.alloc(2, BASE, 64 * MIB, w.python_stack(0, w.frame(w.string("/w/train.py"), w.string("step"), 7)))
    w.marker(3, PROCESS_EXIT)
    return w.write(path)


def test_a_jobs_ranks_and_a_diffs_sides_say_which_were_simulated(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        rank_trace(folder / f"rank{rank}.bin", rank, "h200")
    text = text_of(folder)
    assert f"  simulated  every rank ran on the simulated GPU (SIMULATED: profile h200 — {MEANING})" in text
    job = json.loads(text_of(folder, "--format", "json"))
    assert [rank["simulated"]["profile"] for rank in job["ranks"]] == ["h200", "h200"]
    assert job["ranks"][0]["simulated"]["devices"] == 2
    rows = list(csv.DictReader(io.StringIO(text_of(folder, "--format", "csv"))))
    assert rows and {row["simulated_profile"] for row in rows} == {"h200"}
    # One rank on a card: only the simulated one is named.
    rank_trace(folder / "rank1.bin", 1, None)
    text = text_of(folder)
    assert f"  simulated  rank 0 (SIMULATED: profile h200 — {MEANING})" in text
    assert "rank 1 (SIMULATED" not in text and "every rank ran" not in text
    assert json.loads(text_of(folder, "--format", "json"))["ranks"][1]["simulated"] is None
    # diff: A simulated, B a card.
    diff = text_of("diff", folder / "rank0.bin", folder / "rank1.bin")
    assert f"               A SIMULATED: profile h200 — {MEANING}" in diff
    assert "B SIMULATED" not in diff
    sides = json.loads(text_of("diff", folder / "rank0.bin", folder / "rank1.bin", "--format", "json"))
    assert sides["a"]["simulated"]["profile"] == "h200" and sides["b"]["simulated"] is None
    # Without any simulated trace, the job's views say nothing of it.
    rank_trace(folder / "rank0.bin", 0, None)
    assert "simulated" not in text_of(folder)
    assert "simulated_profile" not in text_of(folder, "--format", "csv").splitlines()[0]


class Page:
    """A page opened in Chromium; nothing logged, nothing loaded."""

    def __init__(self, path):
        self.path = path
        self.browser = chromium.Browser(width=1400, height=1000)
        self.browser.open(path)
        self.browser.wait_until("document.body && document.body.getAttribute('data-ready') === '1'")

    def __enter__(self):
        return self.browser

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                assert self.browser.problems() == []
                assert self.browser.requests() == [f"file://{self.path}"]
        finally:
            self.browser.close()


def box(browser, selector):
    return browser.evaluate(f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
                            " return [r.left, r.top, r.width, r.height]; })()")


def test_the_page_shows_a_banner_the_oom_and_the_reads(simulated, card, tmp_path):
    assert chromium.executable() is not None, "Chromium is not installed (run scripts/setup.sh)"
    page = tmp_path / "simulated.html"
    run([Build.report, "html", simulated, "-o", page])
    with Page(page) as browser:
        banner = browser.evaluate("document.getElementById('simulated-banner').textContent")
        assert banner.startswith(f"SIMULATED: profile l4, 1.000 GiB set by the user: {MEANING}.")
        # Visible, above the summary, and across the page.
        left, top, width, height = box(browser, "#simulated-banner")
        assert height > 10 and width > 1000 and top < box(browser, "#summary-section")[1]
        devices = browser.evaluate("[...document.querySelectorAll('#summary dt')].map(dt => [dt.textContent, "
                                   "dt.nextElementSibling.textContent])")
        assert ["Simulated", f"SIMULATED: profile l4, 1.000 GiB set by the user: {MEANING}"] in devices
        assert any(term == "Device 0" and "(SIMULATED: profile l4" in value for term, value in devices)
        # The OOM section, drawn: its title, figures and tables.
        assert not browser.evaluate("document.getElementById('oom-section').hidden")
        assert browser.evaluate("document.getElementById('oom-title').textContent") == \
            "Out of memory at 0.0 µs on device 0: a request of 200.0 MiB failed"  # the page's seconds()
        terms = dict(browser.evaluate("[...document.querySelectorAll('#oom-summary dd')]"
                                      ".map(dd => [dd.getAttribute('data-term'), dd.textContent])"))
        assert terms["Requested at"] == "/home/user/gen.py:31 (step), in model.lm_head"
        assert terms["Memory"] == "1.000 GiB (the simulated l4's, set by the user)"
        assert terms["Over by"] == "76.00 MiB (79691776 bytes)"
        table = "[...document.querySelectorAll('{} tbody tr')].map(tr => [...tr.children].map(td => td.textContent))"
        assert browser.evaluate(table.format("#oom-by-line")) == [
            ["800.0 MiB", "1", "/home/user/gen.py:31 (step)"], ["100.0 MiB", "1", "untraced"]]
        assert browser.evaluate(table.format("#oom-by-module"))[0] == ["800.0 MiB", "1", "model.lm_head"]
        assert box(browser, "#oom-by-line")[3] > 20
        # The reads, by line, with what they mean.
        assert browser.evaluate("document.getElementById('reads-title').textContent") == \
            "Reads of device values (7 copies from the device to the host, 1.000 MiB), by line"
        assert browser.evaluate(table.format("#reads"))[0] == ["5", "20 B", "/home/user/gen.py:31 (step)"]
        assert browser.evaluate("document.getElementById('reads-meaning').textContent") == READS_MEANING
    # A card's page: no banner, no reads; its OOM still shown.
    page = tmp_path / "card.html"
    run([Build.report, "html", card, "-o", page])
    with Page(page) as browser:
        assert browser.evaluate("document.getElementById('simulated-banner').hidden")
        assert browser.evaluate("document.getElementById('reads-section').hidden")
        assert not browser.evaluate("document.getElementById('oom-section').hidden")
        assert box(browser, "#simulated-banner")[3] == 0


def test_the_job_page_shows_the_banner(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        rank_trace(folder / f"rank{rank}.bin", rank, "h200")
    page = tmp_path / "job.html"
    run([Build.report, "html", folder, "-o", page])
    with Page(page) as browser:
        assert browser.evaluate("document.getElementById('simulated-banner').textContent") == \
            f"Every rank: SIMULATED: profile h200: {MEANING}."
        assert box(browser, "#simulated-banner")[3] > 10


def sizes_trace(path):
    """A simulated run whose libraries answered three sizes nobody measured (Note [Sizes in the
    trace]): at fft.py:7 (spectrum) cuSOLVER's 1 MiB buffer (at most 2 MiB), told at the question
    on thread 1, then a 3 MiB tensor (not it) and its 1 MiB allocation; at fft.py:9 (spectrum)
    cuFFT's 4 MiB work area allocated (the peak, 108 MiB) and only then handed to the plan,
    without a bound; at fft.py:11 a cuDNN plan's workspace answered 0 bytes, without a bound.
    A 1 MiB answer on thread 2 links to nothing of thread 1's."""
    w = TraceWriter(command=("python", "fft.py"))
    w.simulated_device("h100-80gb", "/opt/memtrace/profiles/h100-80gb.json", 80 * GIB)
    file = w.string("/home/user/fft.py")
    main = w.python_stack(0, w.frame(file, w.string("main"), 3))
    line7 = w.python_stack(main, w.frame(file, w.string("spectrum"), 7))
    line9 = w.python_stack(main, w.frame(file, w.string("spectrum"), 9))
    line11 = w.python_stack(main, w.frame(file, w.string("spectrum"), 11))
    solver = w.string('{"library":"cuSOLVER","call":"cusolverDnSgesvdj_bufferSize",'
                      '"shapes":{"routine":"gesvdj","m":512,"n":256}}')
    fft = w.string('{"library":"cuFFT","call":"cufftXtMakePlanMany","shapes":{"n":[4096],'
                   '"batch":128}}')
    plan = w.string('{"library":"cuDNN","call":"cudnnBackendFinalize (convolution_forward plan)",'
                    '"shapes":{}}')
    w.device(0, w.string("NVIDIA H100 80GB HBM3"), 80 * GIB)
    w.marker(1, TRACING_STARTED)
    w.context(1, 0).alloc(2, BASE, 100 * MIB, main)
    w.context(2, 0, api=SIMULATED_SIZE_API).simulated_size(3, solver, MIB, 2 * MIB, python=line7)
    w.context(1, 0, api=SIMULATED_SIZE_API).simulated_size(4, solver, MIB, 2 * MIB, python=line7)
    w.context(1, 0).alloc(5, BASE + GIB, 3 * MIB, line7)
    w.alloc(6, BASE + 2 * GIB, MIB, line7)
    w.free(7, BASE + GIB)
    w.alloc(8, BASE + 3 * GIB, 4 * MIB, line9)  # the peak: 105 MiB
    w.context(1, 0, api=SIMULATED_SIZE_API).simulated_size(9, fft, 4 * MIB, None,
                                                             address=BASE + 3 * GIB, python=line9)
    w.simulated_size(10, plan, 0, None, python=line11)
    w.context(1, 0).free(11, BASE + 3 * GIB)
    w.marker(12, PROCESS_EXIT)
    return w.write(path, version=6)


def test_sizes_nobody_measured_are_listed_by_line_and_bounded_at_the_peak(tmp_path):
    trace = sizes_trace(tmp_path / "sizes.bin")
    sizes = report_json(trace)["simulated_sizes"]
    assert report_json(trace)["summary"]["peak_bytes"] == 105 * MIB
    assert sizes["count"] == 4 and sizes["locations"] == 3
    rows = [(row["location"], row["library"], row["call"], row["count"], row["bytes"],
             row["at_most"], row["certainty"]) for row in sizes["rows"]]
    assert rows == [
        ("/home/user/fft.py:9 (spectrum)", "cuFFT", "cufftXtMakePlanMany", 1, 4 * MIB, None,
         "estimated"),
        ("/home/user/fft.py:7 (spectrum)", "cuSOLVER", "cusolverDnSgesvdj_bufferSize", 2, MIB,
         2 * MIB, "estimated"),
        ("/home/user/fft.py:11 (spectrum)", "cuDNN",
         "cudnnBackendFinalize (convolution_forward plan)", 1, 0, None, "estimated")]
    assert sizes["rows"][0]["shapes"] == {"n": [4096], "batch": 128}
    # At the peak: thread 1's 1 MiB allocation (its answer's, not the 3 MiB one before it) and
    # the work area linked after the peak; thread 2's answer holds nothing of thread 1's.
    assert sizes["at_peak"] == {"bytes": 5 * MIB, "extra_bytes": MIB, "unbounded": 1}
    assert sizes["unheld_at_most"] is None
    text = text_of(trace)
    assert "Sizes nobody measured (4 answers of the simulated libraries), by line:" in text
    assert ("      1  4.000 MiB   no bound    estimated  cuFFT's cufftXtMakePlanMany at "
            "/home/user/fft.py:9 (spectrum)") in text
    assert ("At the peak: 5.000 MiB of it live, at most 1.000 MiB more (1 without a bound); "
            "answers of 0 bytes could have held up to an unknown size while in use.") in text
    parsed = run([Build.report, "parse", trace]).stdout
    assert re.search(rf"simulated-size t=9 address={BASE + 3 * GIB:#x} bytes={4 * MIB} "
                     r"at_most=none certainty=estimated question=\d+ pystack=\d+ native=0 traced",
                     parsed), parsed
