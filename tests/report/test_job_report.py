"""A job's ranks read as one, and two traces compared (memtrace-report FOLDER, memtrace-report
diff A B), on traces written by hand so that every byte, time and step is known: which rank
peaks, where and by how much over the median, the peak rank's rows beside the others', the
ranks' clocks on one axis, restarted ranks, and the diff's rows and exit status."""
import csv
import io
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chromium  # noqa: E402
from memtrace_testing import Build, run  # noqa: E402
from memtrace_testing import report_fails as fails  # noqa: E402
from trace_writer import (BACKWARD, FORWARD, PROCESS_EXIT, TRACING_STARTED,  # noqa: E402
                          TraceWriter)

MIB = 1 << 20
BASE = 0x7f0000000000


def rank_trace(path, rank, world=3, extra=0, restart=0, job="job-1", host="node0",
               start_monotonic_ns=1000, start_unix_ns=1700000000000000000, steps=2):
    """A rank's trace: `steps` training steps, each allocating 4 MiB at train.py:10 (forward,
    module model.encoder) and 2 MiB at train.py:20 (backward, model.head), freed at the step's
    end; and, when `extra`, `extra` bytes at train.py:30 (backward, model.head) in the last
    step, the last allocation before its end: that step's peak, and the trace's."""
    w = TraceWriter(pid=100 + rank, host=host, start_monotonic_ns=start_monotonic_ns,
                    start_unix_ns=start_unix_ns)
    w.distributed(rank, world, local_rank=rank % 2, local_world_size=2, group_rank=rank // 2,
                  restart_count=restart, job_id=job)
    file, function = w.string("/work/train.py"), w.string("step")
    stacks = {line: w.python_stack(0, w.frame(file, function, line)) for line in (10, 20, 30)}
    encoder, head = w.string("model.encoder"), w.string("model.head")
    w.device(0, w.string("GPU 0"), 80 << 30).context(1, 0)
    w.marker(5, TRACING_STARTED)
    time = 10
    for step in range(1, steps + 1):
        w.training_phase(time, FORWARD).module_scope(encoder)
        w.alloc(time + 1, BASE, 4 * MIB, stacks[10])
        w.training_phase(time + 2, BACKWARD).module_scope(head)
        w.alloc(time + 3, BASE + 64 * MIB, 2 * MIB, stacks[20])
        if extra and step == steps:
            w.alloc(time + 4, BASE + 128 * MIB, extra, stacks[30])
            w.free(time + 5, BASE + 128 * MIB)
        w.free(time + 6, BASE).free(time + 7, BASE + 64 * MIB)
        w.step_end(time + 8, step)
        time += 100
    w.marker(time, PROCESS_EXIT)
    return w.write(path)


def job_folder(tmp_path, extras=(0, 3 * MIB, MIB), **kwargs):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, extra in enumerate(extras):
        rank_trace(folder / f"rank{rank}.bin", rank, world=len(extras), extra=extra, **kwargs)
    return folder


def job_json(*paths, args=()):
    return json.loads(run([Build.report, *paths, "--format", "json", *args]).stdout)


def test_the_job_names_the_rank_that_peaks_its_line_step_phase_and_module(tmp_path):
    folder = job_folder(tmp_path)
    (folder / "notes.txt").write_text("not a trace: a folder may hold other files")
    job = job_json(folder)
    assert job["format"] == "memtrace-job" and job["job_id"] == "job-1" and job["world_size"] == 3
    assert [rank["label"] for rank in job["ranks"]] == ["rank 0", "rank 1", "rank 2"]
    assert [rank["peak_bytes"] for rank in job["ranks"]] == [6 * MIB, 9 * MIB, 7 * MIB]
    peak = job["ranks"][1]
    assert (peak["step"], peak["phase"], peak["module"], peak["line"]) == (
        2, "backward", "model.head", "/work/train.py:30 (step)")
    # Rank 0 never allocates at line 30: its peak is its first step's (the first to reach it).
    assert (job["ranks"][0]["step"], job["ranks"][0]["line"]) == (1, "/work/train.py:20 (step)")
    assert job["peak"] == {"index": 1, "label": "rank 1", "bytes": 9 * MIB, "median_index": 2,
                           "median_bytes": 7 * MIB, "over_median_bytes": 2 * MIB}
    assert job["missing_ranks"] == [] and job["earlier_attempts"] == []
    rows = {row["location"]: row["bytes"] for row in job["table"]["rows"]}
    assert rows == {"/work/train.py:30 (step)": [None, 3 * MIB, MIB],
                    "/work/train.py:10 (step)": [4 * MIB, 4 * MIB, 4 * MIB],
                    "/work/train.py:20 (step)": [2 * MIB, 2 * MIB, 2 * MIB]}
    assert job["ranks"][2]["line"] == "/work/train.py:30 (step)"

    text = run([Build.report, folder]).stdout
    assert "memtrace job report: 3 traces of job 'job-1', world size 3" in text
    assert "rank 1 peaks highest: 9.000 MiB, +2.000 MiB over the median rank's 7.000 MiB " \
           "(rank 2) (+28.6 %)." in text
    assert re.search(r"^1 \*\s+1\s+node0\s+9\.000 MiB\s+0\.000 s\s+2\s+backward\s+model\.head\s+"
                     r"/work/train\.py:30 \(step\)$", text, re.M), text
    assert re.search(r"^3\.000 MiB\s+-\s+1\.000 MiB\s+/work/train\.py:30 \(step\)$", text,
                     re.M), text


def test_the_same_rows_by_module_and_as_csv(tmp_path):
    folder = job_folder(tmp_path)
    job = job_json(folder, args=("--group-by", "module"))
    assert {row["location"]: row["bytes"] for row in job["table"]["rows"]} == {
        "model.head": [2 * MIB, 5 * MIB, 3 * MIB], "model.encoder": [4 * MIB, 4 * MIB, 4 * MIB]}
    text = run([Build.report, folder / "rank0.bin", folder / "rank1.bin", folder / "rank2.bin",
                "--format", "csv"]).stdout
    lines = list(csv.DictReader(io.StringIO(text)))
    assert text.startswith("rank,local_rank,host,trace,peak_bytes,peak_time_ns,step,phase")
    # One line per rank and row of the peak rank's table: 3 ranks x 3 rows.
    assert len(lines) == 9
    line30 = [line for line in lines if line["location"] == "/work/train.py:30 (step)"]
    assert [(line["rank"], int(line["bytes"]), int(line["peak_bytes"])) for line in line30] == [
        ("0", 0, 6 * MIB), ("1", 3 * MIB, 9 * MIB), ("2", MIB, 7 * MIB)]
    assert line30[1]["phase"] == "backward" and line30[1]["peak_module"] == "model.head"


def test_every_ranks_module_table_and_the_module_whose_share_differs(tmp_path):
    """Issue 51: the job report has each rank's module x category table at its peak (Note [The
    job's module table]), joined by module, and names the module whose share of the peak
    differs most between ranks: model.head holds 2 of rank 0's 6 MiB, 5 of rank 1's 9."""
    folder = job_folder(tmp_path)
    job = job_json(folder)
    for rank, head in zip(job["ranks"], (2 * MIB, 5 * MIB, 3 * MIB)):
        table = rank["modules_at_peak"]
        assert [(row["module"], row["bytes"]) for row in table["rows"]] == sorted(
            [("model.encoder", 4 * MIB), ("model.head", head)], key=lambda row: -row[1])
        # Every rank's table sums to its categories, cell by cell.
        for category, value in rank["categories"].items():
            assert sum(row["categories"][category] for row in table["rows"]) == value, category
    modules = job["modules"]
    assert [(row["location"], row["bytes"]) for row in modules["rows"]] == [
        ("model.head", [2 * MIB, 5 * MIB, 3 * MIB]), ("model.encoder", [4 * MIB] * 3)]
    differs = modules["differs_most"]
    assert (differs["location"], differs["highest_index"], differs["lowest_index"]) == (
        "model.head", 1, 0)
    assert abs(differs["highest_share"] - 5 / 9) < 1e-12
    assert abs(differs["lowest_share"] - 2 / 6) < 1e-12
    text = run([Build.report, folder]).stdout
    assert "By module at each rank's peak" in text
    assert re.search(r"^5\.000 MiB\s+2\.000 MiB\s+3\.000 MiB\s+model\.head$", text, re.M), text
    assert "Differs most between ranks: model.head holds 55.6 % of rank 1's peak (5.000 MiB), " \
           "33.3 % of rank 0's (2.000 MiB)." in text
    # Ranks that hold the same: said so, no module named.
    (tmp_path / "same").mkdir()
    same = job_folder(tmp_path / "same", extras=(MIB, MIB))
    assert job_json(same)["modules"]["differs_most"] is None
    assert "Every module's share of the peak is the same on every rank (within 0.1 point)." in \
        run([Build.report, same]).stdout


def test_clocks_are_aligned_at_the_jobs_start(tmp_path):
    # One host: by CLOCK_MONOTONIC (rank 1 started 2 s after rank 0); the wall clocks, which
    # disagree, are not used.
    folder = tmp_path / "one-host"
    folder.mkdir()
    rank_trace(folder / "a.bin", 0, world=2, start_monotonic_ns=5_000_000_000,
               start_unix_ns=1700000000_000000000)
    rank_trace(folder / "b.bin", 1, world=2, extra=MIB, start_monotonic_ns=7_000_000_000,
               start_unix_ns=1700000100_000000000)
    job = job_json(folder)
    assert job["clocks"]["one_host"] is True and "CLOCK_MONOTONIC" in job["clocks"]["how"]
    assert [rank["offset_ns"] for rank in job["ranks"]] == [0, 2_000_000_000]
    assert job["ranks"][1]["job_peak_time_ns"] == 2_000_000_000 + job["ranks"][1]["peak_time_ns"]
    # Two hosts: by the wall clock (rank 0 started 0.5 s after rank 1).
    folder = tmp_path / "two-hosts"
    folder.mkdir()
    rank_trace(folder / "a.bin", 0, world=2, host="node0", start_unix_ns=1700000000_500000000)
    rank_trace(folder / "b.bin", 1, world=2, host="node1", start_unix_ns=1700000000_000000000)
    job = job_json(folder)
    assert job["clocks"]["one_host"] is False and "wall clock" in job["clocks"]["how"]
    assert [rank["offset_ns"] for rank in job["ranks"]] == [500_000_000, 0]


def test_a_restarted_rank_is_read_from_its_latest_attempt(tmp_path):
    folder = tmp_path / "elastic"
    folder.mkdir()
    rank_trace(folder / "rank0-attempt0.bin", 0, world=2, extra=16 * MIB, restart=0)
    rank_trace(folder / "rank1-attempt0.bin", 1, world=2, restart=0)
    rank_trace(folder / "rank0-attempt1.bin", 0, world=2, restart=1)
    rank_trace(folder / "rank1-attempt1.bin", 1, world=2, extra=MIB, restart=1)
    job = job_json(folder)
    assert [Path(rank["trace"]).name for rank in job["ranks"]] == ["rank0-attempt1.bin",
                                                                  "rank1-attempt1.bin"]
    assert [rank["restart_count"] for rank in job["ranks"]] == [1, 1]
    assert [Path(path).name for path in job["earlier_attempts"]] == ["rank0-attempt0.bin",
                                                                     "rank1-attempt0.bin"]
    assert job["peak"]["label"] == "rank 1" and job["peak"]["bytes"] == 7 * MIB
    assert "an earlier attempt, set aside" in run([Build.report, folder]).stdout


def test_a_missing_rank_is_said(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    rank_trace(folder / "rank0.bin", 0, world=4)
    rank_trace(folder / "rank2.bin", 2, world=4, extra=MIB)
    assert job_json(folder)["missing_ranks"] == [1, 3]
    assert "no trace of rank 1, 3" in run([Build.report, folder]).stdout


def test_traces_of_two_jobs_or_one_rank_twice_are_refused(tmp_path):
    a = rank_trace(tmp_path / "a.bin", 0, job="job-1")
    b = rank_trace(tmp_path / "b.bin", 1, job="job-2")
    fails([a, b], "the traces belong to 2 jobs ('job-1' in", "give the traces of one job")
    c = rank_trace(tmp_path / "c.bin", 0, job="job-1")
    fails([a, c], "two traces of rank 0, attempt 0:")
    (tmp_path / "empty").mkdir()
    fails([tmp_path / "empty"], "a folder without a memtrace trace")
    fails(["parse", tmp_path], "is a folder: parse reads one trace")
    fails([a, c, "--estimate", "est.json"], "--estimate is for one trace")


def test_the_page_draws_one_timeline_per_rank_on_the_jobs_axis(tmp_path):
    folder = job_folder(tmp_path)
    page = run([Build.report, "html", folder, "-o", tmp_path / "job.html"]).stdout
    assert page == ""
    html = (tmp_path / "job.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="memtrace-data">(.*?)</script>',
                                html, re.S).group(1))
    assert len(data["timelines"]) == 3 and data["peak"]["label"] == "rank 1"
    for rank, timeline in zip(data["ranks"], data["timelines"]):
        assert timeline["peak"]["bytes"] == rank["peak_bytes"]
        assert timeline["peak"]["time_ns"] == rank["peak_time_ns"]
    assert "job's start" in data["clocks"]["how"] and "<svg" not in html  # drawn by the script
    # Drawn in a browser: a chart per rank, bytes as the text report writes them (the page's
    # humanBytes, html/bytes.js, against byte_format.h), nothing logged.
    browser = chromium.Browser()
    try:
        browser.open(tmp_path / "job.html")
        browser.wait_until("document.querySelectorAll('#timelines svg').length === 3 && "
                           "document.querySelectorAll('#ranks tr').length === 4")
        peak = browser.evaluate("document.querySelector('#summary dd').textContent")
        assert peak == f"rank 1: 9.000 MiB ({9 * MIB} bytes)"
        assert "9.000 MiB" in run([Build.report, folder]).stdout
        ranks = browser.evaluate("[...document.querySelectorAll('#ranks tr')].slice(1)"
                                 ".map(row => row.children[3].textContent)")
        assert ranks == ["6.000 MiB", "9.000 MiB", "7.000 MiB"]
        # The module table (issue 51): every rank's column, the peak rank's order first, the
        # module whose share differs most named; a click on a title sorts by that column.
        modules = ("[...document.querySelectorAll('#modules tbody tr')]"
                   ".map(row => [...row.children].map(cell => cell.textContent))")
        assert not browser.evaluate("document.querySelector('#modules-section').hidden")
        assert browser.evaluate(modules) == [
            ["2.000 MiB", "5.000 MiB", "3.000 MiB", "model.head"],
            ["4.000 MiB", "4.000 MiB", "4.000 MiB", "model.encoder"]]
        assert browser.evaluate("document.querySelector('#modules-differs').textContent") == (
            "Differs most between ranks: model.head holds 55.6 % of rank 1's peak (5.000 MiB), "
            "33.3 % of rank 0's (2.000 MiB).")
        browser.evaluate("document.querySelector('#modules th[data-column=\"rank 0\"]')"
                         ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        assert [row[-1] for row in browser.evaluate(modules)] == ["model.encoder", "model.head"]
        browser.evaluate("document.querySelector('#modules th[data-column=\"Module\"]')"
                         ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        assert [row[-1] for row in browser.evaluate(modules)] == ["model.encoder", "model.head"]
        assert browser.evaluate("document.querySelector('#modules').dataset.sorted") == \
            "Module ascending"
        assert browser.evaluate("document.querySelector('#error').hidden")
        assert browser.problems() == []
    finally:
        browser.close()


# ---- diff -----------------------------------------------------------------------------------

def test_diff_of_two_runs_names_the_line_that_differs_and_its_bytes(tmp_path):
    a = rank_trace(tmp_path / "a.bin", 0, extra=0)
    b = rank_trace(tmp_path / "b.bin", 0, extra=3 * MIB)
    diff = json.loads(run([Build.report, "diff", a, b, "--format", "json"]).stdout)
    assert diff["format"] == "memtrace-diff"
    assert diff["peak"] == {"a_bytes": 6 * MIB, "b_bytes": 9 * MIB, "delta_bytes": 3 * MIB,
                            "delta_percent": 50.0}
    line = diff["tables"]["line"]
    assert line["changed"] == 1 and line["unchanged"] == 2
    assert {k: line["rows"][0][k] for k in ("location", "change", "a_bytes", "b_bytes", "delta_bytes")} == {
        "location": "/work/train.py:30 (step)", "change": "appeared", "a_bytes": 0,
        "b_bytes": 3 * MIB, "delta_bytes": 3 * MIB}
    module = diff["tables"]["module"]
    assert [(r["location"], r["change"], r["delta_bytes"]) for r in module["rows"]] == [
        ("model.head", "grew", 3 * MIB)]
    category = diff["tables"]["category"]
    assert [(r["location"], r["change"], r["delta_bytes"]) for r in category["rows"]] == [
        ("temporary", "grew", 3 * MIB)]
    # And the other way round: the line went.
    back = json.loads(run([Build.report, "diff", b, a, "--format", "json", "--group-by", "line"]).stdout)
    assert list(back["tables"]) == ["line"]
    assert [(r["change"], r["delta_bytes"]) for r in back["tables"]["line"]["rows"]] == [
        ("went", -3 * MIB)]
    text = run([Build.report, "diff", a, b]).stdout
    assert "B - A: +3145728 bytes (+50.0 %)" in text
    assert re.search(r"^\+3\.000 MiB\s+-\s+3\.000 MiB\s+appeared\s+/work/train\.py:30 \(step\)$",
                     text, re.M), text


def test_diff_fails_over_a_threshold_for_ci(tmp_path):
    a = rank_trace(tmp_path / "a.bin", 0, extra=0)
    b = rank_trace(tmp_path / "b.bin", 0, extra=MIB // 4)  # +4.2 % of 6 MiB
    assert run([Build.report, "diff", a, b, "--fail-over", "5%"], check=False).returncode == 0
    over = run([Build.report, "diff", a, b, "--fail-over", "4%"], check=False)
    assert over.returncode == 1 and "OVER the threshold (4%)" in over.stdout
    assert run([Build.report, "diff", a, b, "--fail-over", "200KiB"], check=False).returncode == 1
    assert run([Build.report, "diff", a, b, "--fail-over", "1MiB"], check=False).returncode == 0
    # Shrinking is never over.
    assert run([Build.report, "diff", b, a, "--fail-over", "0%"], check=False).returncode == 0
    verdict = json.loads(run([Build.report, "diff", a, b, "--fail-over", "4%", "--format", "json"],
                             check=False).stdout)
    assert verdict["over"] is True and verdict["fail_over"] == "4%"
    fails(["diff", a, b, "--fail-over", "five"], "--fail-over takes a share of A's peak (5%)")
    fails(["diff", a], "diff compares two traces, A and B, not 1")
    fails(["diff", a, b, "--format", "csv"], "--format takes text or json for diff")
