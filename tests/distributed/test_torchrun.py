"""A torchrun job traced per rank (memtrace run torchrun ...) and read as one, on the CPU: the
gloo backend, each rank allocating through the simulated GPU's runtime with the GIL released, as
PyTorch's ops do (ranks.py), one rank holding more on purpose. What it assumes of the real
platform: torchrun hands every rank its environment (LD_PRELOAD, MEMTRACE_*, RANK, ...) as it
does on a GPU machine, and each of the ranks' CUDA allocations is one recorded event, as each
tensor is from inside PyTorch's caching allocator (Note [PyTorch's own allocator])."""
import json
import re
import socket
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, Build, parse_records, run

SCRIPT = Path(__file__).parent / "ranks.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
MIB = 1 << 20
HEAVY_EXTRA = 24 * MIB


def line_of(tag):
    """The line of ranks.py marked `# ALLOC:tag`."""
    for number, text in enumerate(SCRIPT.read_text().splitlines(), 1):
        if f"# ALLOC:{tag}" in text:
            return number
    raise AssertionError(tag)


def location(tag):
    """How the report names the line (relative to the working directory, as it shows paths)."""
    return f"{SCRIPT.relative_to(ROOT)}:{line_of(tag)} (<module>)"


def memtrace_run(folder, ranks, heavy, *options, torchrun_options=(), quiet=True, run_options=()):
    """`memtrace run -o FOLDER torchrun --standalone --nproc-per-node N ranks.py ...`"""
    return run([sys.executable, "-m", "mem_tracer", "run", *(["-q"] if quiet else []), "-o", folder,
                *run_options, TORCHRUN,
                "--standalone", "--nproc-per-node", ranks, *torchrun_options, SCRIPT, Build.cuda,
                heavy, HEAVY_EXTRA, *options],
               {"PYTHONPATH": str(ROOT / "python")}, timeout=240)


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """Two ranks, rank 1 the heavy one; rank 0 fails the first attempt and torchrun restarts
    both (--max-restarts 1)."""
    folder = tmp_path_factory.mktemp("job") / "two-ranks"
    result = memtrace_run(folder, 2, 1, "fail-first-attempt=0",
                          torchrun_options=("--max-restarts", "1"))
    return folder, result


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job") / "four-ranks"
    return folder, memtrace_run(folder, 4, 2, quiet=False)


def traces_by_attempt(folder):
    files = sorted(folder.glob("*.bin"))
    names = [re.fullmatch(r"memtrace-(.+)-rank(\d)-local(\d)-attempt(\d)\.bin", f.name) for f in files]
    assert all(names), [f.name for f in files]
    return {(int(m[2]), int(m[4])): (f, m[1], int(m[3])) for f, m in zip(files, names)}


def test_every_rank_writes_its_own_file_and_a_restart_keeps_the_first_attempts(restarted):
    folder, _ = restarted
    traces = traces_by_attempt(folder)
    assert sorted(traces) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    jobs = {job for _, job, _ in traces.values()}
    assert len(jobs) == 1 and jobs != {"x"}  # torchrun's run id names the job
    for (rank, attempt), (path, job, local) in traces.items():
        records = parse_records(path)
        assert records[0]["record"] == "process" and records[0]["host"] == socket.gethostname()
        assert records[1]["record"] == "rank"
        assert {k: records[1][k] for k in ("rank", "world_size", "local_rank", "local_world_size",
                                           "group_rank", "restart_count", "job")} == {
            "rank": str(rank), "world_size": "2", "local_rank": str(local),
            "local_world_size": "2", "group_rank": "0", "restart_count": str(attempt), "job": job}


def test_the_job_names_the_heavy_rank_and_how_much_over_the_median(restarted, four_ranks):
    for (folder, _), heavy, world in ((restarted, 1, 2), (four_ranks, 2, 4)):
        job = json.loads(run([Build.report, folder, "--format", "json"]).stdout)
        assert job["world_size"] == world and len(job["ranks"]) == world
        assert [rank["rank"] for rank in job["ranks"]] == list(range(world))
        peaks = [rank["peak_bytes"] for rank in job["ranks"]]
        assert peaks == [10 * MIB + (HEAVY_EXTRA if r == heavy else 0) for r in range(world)]
        assert job["peak"]["label"] == f"rank {heavy}"
        assert job["peak"]["over_median_bytes"] == HEAVY_EXTRA
        assert job["clocks"]["one_host"] is True
    job = json.loads(run([Build.report, restarted[0], "--format", "json"]).stdout)
    assert [Path(p).name.split("-attempt")[1] for p in job["earlier_attempts"]] == ["0.bin", "0.bin"]
    assert all(rank["restart_count"] == 1 for rank in job["ranks"])


def test_memtrace_run_prints_the_jobs_report(four_ranks):
    folder, result = four_ranks  # run without -q: the job's report follows the job
    assert f"== memtrace: 4 traces in {folder}" in result.stdout
    assert "memtrace job report: 4 traces of job" in result.stdout
    # The median of an even count is the lower of the middle two: here any of the three others.
    assert re.search(r"^rank 2 peaks highest: 34\.00 MiB, \+24\.00 MiB over the median rank's "
                     r"10\.00 MiB \(rank [013]\) \(\+240\.0 %\)\.$", result.stdout, re.M), result.stdout
    # Then each rank's trace is compacted (Note [memtrace run compacts the trace] in cli.py): one
    # line for the four, and every file holds compressed chunks (bit 31 of a chunk's size).
    (said,) = [line for line in result.stderr.splitlines() if "compacted" in line]
    assert said.startswith("== memtrace: 4 traces compacted: "), result.stderr
    for path, _, _ in traces_by_attempt(folder).values():
        data = path.read_bytes()
        assert int.from_bytes(data[8:12], "little") == 12  # the recorder's, which compact keeps
        assert int.from_bytes(data[16:20], "little") & 0x80000000, path  # its first chunk
    assert not list(folder.glob("*.compacting*"))


# PyTorch releases the GIL around its ops, and ranks.py calls the runtime the same way: the
# recorder names those allocations' lines (Note [Python frames without the GIL]).
def test_the_job_names_the_heavy_ranks_line(four_ranks):
    job = json.loads(run([Build.report, four_ranks[0], "--format", "json"], cwd=ROOT).stdout)
    assert job["ranks"][2]["line"] == location("heavy")
    rows = {row["location"]: row["bytes"] for row in job["table"]["rows"]}
    assert rows[location("heavy")] == [None, None, HEAVY_EXTRA, None]
    assert rows[location("weights")] == [8 * MIB] * 4


def test_diff_of_two_ranks_names_the_line_and_its_bytes(four_ranks):
    traces = traces_by_attempt(four_ranks[0])
    diff = json.loads(run([Build.report, "diff", traces[(0, 0)][0], traces[(2, 0)][0],
                           "--format", "json", "--group-by", "line"], cwd=ROOT).stdout)
    assert [(row["location"], row["change"], row["delta_bytes"]) for row in
            diff["tables"]["line"]["rows"]] == [(location("heavy"), "appeared", HEAVY_EXTRA)]


# Issue 33, part 4: every rank keeps its own flight recorder (memtrace run --flight N torchrun),
# and the job's report reads them as it reads full traces.
def test_every_rank_keeps_a_flight_recorder_and_the_job_report_reads_them(tmp_path):
    folder = tmp_path / "flight-job"
    memtrace_run(folder, 2, 1, "churn=150000", run_options=("--flight", "500"))
    traces = traces_by_attempt(folder)
    assert sorted(traces) == [(0, 0), (1, 0)]
    for path, _, _ in traces.values():
        flight = json.loads(run([Build.report, path, "--format", "json"]).stdout)["summary"]["flight"]
        assert flight["dropped"] and flight["peak_section"], flight
        assert path.stat().st_size < 4 << 20
    job = json.loads(run([Build.report, folder, "--format", "json"], cwd=ROOT).stdout)
    assert [rank["peak_bytes"] for rank in job["ranks"]] == [10 * MIB, 10 * MIB + HEAVY_EXTRA]
    assert job["peak"]["label"] == "rank 1"
    assert job["ranks"][1]["line"] == location("heavy")
