"""The zoo of model families runs to the end on the simulated card (issue 49,
programs/families.py; docs/simulated-gpu.md "The zoo"). Beyond transformers and CNNs: RNNs
through cuDNN's RNN API, an audio front end through cuFFT, linear algebra through cuSOLVER. Before the simulated libraries answered those sizes each stopped at its
first call: CUDNN_STATUS_NOT_SUPPORTED in flatten_parameters (cudnnGetRNNWeightSpaceSize),
CUFFT_NOT_SUPPORTED (cufftXtMakePlanMany), "cusolverDnCreateGesvdjInfo ... unknown error".

Each runs under `memtrace run --gpu h100` and must end with a verdict, with PyTorch's own
requested peak of the same run equal to the trace's, with every size nobody measured listed by
the user's line in the report, and with the verdict's line saying the peak is approximate and by
how much (Note [Sizes nobody measured] in simulator/core/sizes.cpp, Note [The verdict's unknown
sizes] in python/mem_tracer/cli.py). Each program takes a few seconds."""
import json
import sys
from pathlib import Path

import pytest
from memtrace_testing import ROOT, report_json, run

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "programs" / "families.py"


def line_of(text):
    """The line of programs/families.py that holds `text` (its first)."""
    for number, line in enumerate(PROGRAM.read_text().splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} is not in {PROGRAM}")


def memtrace_run(tmp_path, family, *options, check=True):
    # On the card --gpu names, not the tests' own simulated one.
    trace = tmp_path / f"{family}.bin"
    result = run([sys.executable, "-m", "mem_tracer", "run", "--gpu", "h100", *options, "-q",
                  "-o", trace, PROGRAM, family], {"PYTHONPATH": str(ROOT / "python")},
                 check=check, timeout=300, own_card=True)
    return result, trace


def ran_to_the_end(tmp_path, family):
    """Runs `family`; checks the verdict and PyTorch's own peak against the trace's; returns what
    the program said, the report's simulated sizes as (library, call, line) -> row, and stderr."""
    result, trace = memtrace_run(tmp_path, family)
    assert "FITS on a simulated NVIDIA H100 80GB HBM3" in result.stderr, result.stderr[-3000:]
    said = json.loads(result.stdout.strip().splitlines()[-1])
    report = report_json(trace)
    assert report["summary"]["peak_bytes"] == said["requested_peak"]
    assert "PyTorch's own counters differ" not in result.stderr
    sizes = report["simulated_sizes"]
    assert sizes["count"] >= len(sizes["rows"]) > 0
    rows = {}
    for row in sizes["rows"]:
        assert row["file"] == str(PROGRAM), row  # the user's line, not the library's
        assert row["certainty"] == "estimated"
        rows.setdefault((row["library"], row["call"], row["line"]), row)
    assert "== memtrace: the peak is approximate: " in result.stderr
    return said, sizes, rows, result.stderr


def test_lstm_gru_and_projections_train_and_infer(tmp_path):
    said, sizes, rows, stderr = ran_to_the_end(tmp_path, "rnn")
    # The weight space is cuDNN's documented layout: PyTorch's parameters are views of all of it.
    assert [space == parameters for space, parameters in said["weight_spaces"]] == [True] * 3
    forward = line_of("output, state = self.rnn(")
    work = ("cuDNN", "cudnnGetRNNTempSpaceSizes (work space)", forward)
    reserve = ("cuDNN", "cudnnGetRNNTempSpaceSizes (reserve space)", forward)
    states = ("cuDNN", "cudnnDropoutGetStatesSize", forward)
    assert {work, reserve, states} <= set(rows)
    # Every step keeps, for each of the 2 layers, 35 x 8 steps of gates (4 x 256), cell (256) and
    # output (256) in float32, and a byte a dropped element between the layers.
    assert rows[reserve]["bytes"] == 2 * 35 * 8 * (4 * 256 + 256 + 256) * 4 + 35 * 8 * 256
    assert rows[reserve]["at_most"] == 2 * rows[reserve]["bytes"]
    # The GRU (packed, half) and the projected LSTM ask at their own lines.
    assert ("cuDNN", "cudnnGetRNNTempSpaceSizes (reserve space)",
            line_of("output, _ = gru(packed)")) in rows
    # The dropout state (kept for the process) and the reserve spaces saved for the backward are
    # live at the peak, each bounded.
    peak = sizes["at_peak"]
    assert peak["bytes"] >= rows[states]["bytes"] + rows[reserve]["bytes"]
    assert peak["unbounded"] == 0 and peak["extra_bytes"] == peak["bytes"]
    assert (f"the peak is approximate: {peak['bytes'] / 2**20:.2f} MiB of it is held by buffers "
            "sized by answers the simulated libraries could not know (at most "
            f"{peak['extra_bytes'] / 2**20:.2f} MiB more)") in stderr


def test_refusing_unknown_sizes_stops_the_program_as_before(tmp_path):
    result, _ = memtrace_run(tmp_path, "rnn", "--gpu-refuse-unknown-sizes", check=False)
    assert result.returncode == 1
    assert "CUDNN_STATUS_NOT_SUPPORTED" in result.stderr
    assert ("cuDNN's cudnnDropoutGetStatesSize is not simulated: the size it answers is not known "
            "here, and MEMTRACE_GPU_UNKNOWN_SIZES=refuse asks for no estimate") in result.stderr


def test_an_audio_front_end_and_ffts(tmp_path):
    _, sizes, rows, stderr = ran_to_the_end(tmp_path, "audio")
    stft = rows[("cuFFT", "cufftXtMakePlanMany", line_of("spectrum = torch.stft("))]
    # n_fft 400 = 2^4 x 5^2, one pass: no work area, at most one copy of the 4 x 201 x 201 complex
    # frames.
    assert stft["shapes"]["n"] == [400] and stft["bytes"] == 0
    assert stft["at_most"] == stft["shapes"]["batch"] * 201 * 8
    rfft = rows[("cuFFT", "cufftXtMakePlanMany", line_of("signal = torch.fft.irfft("))]
    assert rfft["bytes"] == 4 * 16001 * 8  # 32,000 points: several passes, one copy
    fft2 = rows[("cuFFT", "cufftXtMakePlanMany", line_of("torch.fft.fft2("))]
    assert fft2["shapes"]["n"] == [160, 200] and fft2["bytes"] == 4 * 160 * 200 * 8
    assert sizes["unheld_at_most"] == stft["at_most"]
    assert ("workspaces answered 0 bytes (nobody measured them) could add up to "
            f"{stft['at_most'] / 2**20:.2f} MiB while in use") in stderr


def test_linear_algebra_in_a_training_step(tmp_path):
    _, _, rows, _ = ran_to_the_end(tmp_path, "linalg")
    calls = {(library, call) for library, call, _ in rows}
    assert calls == {("cuSOLVER", "cusolverDnXsyevBatched_bufferSize"),
                     ("cuSOLVER", "cusolverDnXpotrf_bufferSize"),
                     ("cuSOLVER", "cusolverDnSgesvdj_bufferSize")}
    eigh = rows[("cuSOLVER", "cusolverDnXsyevBatched_bufferSize",
                 line_of("torch.linalg.eigh(covariance)"))]
    # LAPACK's ssyevd with vectors: 1 + 6 n + 2 n^2 floats, n = 64.
    assert eigh["bytes"] == (1 + 6 * 64 + 2 * 64 * 64) * 4
    svd = rows[("cuSOLVER", "cusolverDnSgesvdj_bufferSize", line_of("torch.linalg.svd("))]
    assert svd["bytes"] == (64 * 64 + 64 * 64) * 4  # a copy of A and of V
    assert rows[("cuSOLVER", "cusolverDnXpotrf_bufferSize",
                 line_of("torch.linalg.cholesky(kernel)"))]["bytes"] == 0


# The CNNs, the diffusion U-Net and the MoE layer: each trains a step to the end with a verdict and
# PyTorch's own peak equal to the trace's. Convolutions go through cuDNN's plans, whose
# workspaces nobody measured (answered 0 bytes, no bound); the MoE layer's routing is decided by
# the router's values (nonzero's size), which the report lists as values it assumed.
@pytest.mark.parametrize("family", ["resnet", "efficientnet", "convnext", "unet", "diffusion",
                                    "moe"])
def test_the_zoo_runs_to_the_end_with_a_verdict(tmp_path, family):
    result, trace = memtrace_run(tmp_path, family)
    assert "FITS on a simulated NVIDIA H100 80GB HBM3" in result.stderr, result.stderr[-3000:]
    said = json.loads(result.stdout.strip().splitlines()[-1])
    report = report_json(trace, "--top", "0")
    assert report["summary"]["peak_bytes"] == said["requested_peak"]
    assert "PyTorch's own counters differ" not in result.stderr
    reads = report["device_reads"]
    if family == "moe":
        # Eight experts, one nonzero each over topk's indices, which no kernel computed: each
        # count is assumed (Note [Top-k keeps k]: every token to its row's first k experts) and
        # listed at that line; none is left to read as zero.
        assert reads["count"] == 0, reads
        assumed = report["assumed_values"]["rows"]
        assert [(row["line"], row["count"]) for row in assumed] == [
            (line_of(").nonzero(as_tuple=True)"), 8)], assumed
        assert all(row["assumed"].startswith("top-k keeps k") for row in assumed), assumed
        assert "simulated_sizes" not in report or not report["simulated_sizes"]["count"]
        return
    assert reads["count"] == 0
    sizes = report["simulated_sizes"]
    plans = [row for row in sizes["rows"] if row["call"].startswith("cudnnBackendFinalize")]
    assert plans and all(row["bytes"] == 0 and row["at_most"] is None for row in plans)
    assert sizes["at_peak"]["bytes"] == 0 and sizes["unheld_at_most"] is None
    assert ("workspaces answered 0 bytes (nobody measured them) could add an amount nobody "
            "bounded while in use") in result.stderr


def test_the_calibration_dry_run_writes_a_profile_the_next_run_takes_exactly(tmp_path):
    """python -m mem_tracer.calibrate (Note [Calibrating a profile]) on the simulated card
    (--dry-run: the card's answers are the simulated card's here): the RNN and linear algebra
    families' questions asked again through the libraries' own calls and written into a copy of
    the profile, which the next runs take as measured: no size is left unknown."""
    profile = tmp_path / "h100-calibrated.json"
    workload = f"{sys.executable} {PROGRAM} rnn && {sys.executable} {PROGRAM} linalg"
    result = run([sys.executable, "-m", "mem_tracer.calibrate", "h100", "--dry-run", "--out",
                  profile, "--", "sh", "-c", workload], {"PYTHONPATH": str(ROOT / "python")},
                 timeout=300, own_card=True)
    assert "11 questions the simulated libraries could not answer" in result.stderr
    assert "NVIDIA H100 80GB HBM3's answers (dry run: the simulated card):" in result.stdout
    assert "not asked" not in result.stdout
    written = json.loads(profile.read_text())
    entries = written["measured_sizes"]["entries"]
    assert len(entries) == 11
    assert {entry["library"] for entry in entries} == {"cuDNN", "cuSOLVER"}
    reserve = next(e for e in entries if e["call"] == "cudnnGetRNNTempSpaceSizes (reserve space)"
                   and e["match"]["hidden_size"] == 256)
    assert reserve["bytes"] == 2 * 35 * 8 * (4 * 256 + 256 + 256) * 4 + 35 * 8 * 256
    assert reserve["match"]["cell"] == "lstm" and reserve["match"]["mode"] == "training"
    assert all(e["measured"].startswith("NVIDIA H100 80GB HBM3, torch ") and
               e["measured"].endswith("(dry run on the simulated card: not the card's)")
               for e in entries)
    for family in ("rnn", "linalg"):
        trace = tmp_path / f"calibrated-{family}.bin"
        result = run([sys.executable, "-m", "mem_tracer", "run", "--gpu", profile, "-q", "-o",
                      trace, PROGRAM, family], {"PYTHONPATH": str(ROOT / "python")},
                     timeout=300, own_card=True)
        assert "FITS" in result.stderr and "the peak is approximate" not in result.stderr
        assert "memtrace simulated GPU" not in result.stderr
        report = report_json(trace)
        assert not report.get("simulated_sizes", {}).get("count")
