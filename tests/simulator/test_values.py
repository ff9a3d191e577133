"""Values on the simulated card where they decide the path (issue 50): what the program
determines itself is known there (Note [Known values on the simulated card] in
python/mem_tracer/simulated_gpu/values.py), so transformers' generate() stops after exactly
max_new_tokens, as on a card where no sequence ends early, with its KV cache's peak what its
shapes say; a read of a value no kernel computed takes the path of Note [Values where they
decide the path], listed by line; and under `--values cpu` (Note [Real values beside the
card]) detection and MoE routing follow a CPU run's values.

Each program runs under `memtrace run --gpu h100` (`--values known` unless said), traced."""
import json
import sys
from pathlib import Path

import pytest
from memtrace_testing import (
    ROOT,
    Build,
    allocation_stacks,
    parse_records,
    report_json,
    run,
    simulated_environment,
)

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"


def memtrace_run(*arguments, env=None):
    # Not on the tests' own simulated card: `--gpu` puts the program on its own.
    return run([sys.executable, "-m", "mem_tracer", "run", *map(str, arguments)],
               {"PYTHONPATH": str(ROOT / "python"), **(env or {})}, timeout=600, own_card=True)


def on_the_host(program, *arguments):
    """The program run on the CPU, untraced: the values a CPU run computes."""
    result = run([sys.executable, PROGRAMS / program, *arguments], timeout=600, own_card=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def kv_cache_peak(trace):
    """The most bytes live at once in allocations of 1 KiB or more made in transformers'
    cache_utils.py (their innermost frame there): the KV cache's tensors, without the few bytes
    of bookkeeping a static cache keeps beside them (its length, its positions)."""
    strings = {}
    for line in run([Build.report, "parse", trace]).stdout.splitlines():
        if line.startswith("string "):
            _, number, text = line.split(" ", 2)
            strings[number] = json.loads(text)
    frames, innermost, sizes, live, peak = {}, {0: ""}, {}, 0, 0
    for record in parse_records(trace):
        kind = record["record"]
        if kind == "frame":
            frames[record["id"]] = strings[record["file"]]
        elif kind == "pystack":
            innermost[int(record["id"])] = frames[record["frame"]]
        elif kind == "alloc" and int(record["size"]) >= 1024 and \
                innermost[int(record["pystack"])].endswith("transformers/cache_utils.py"):
            sizes[record["address"]] = int(record["size"])
            live += int(record["size"])
            peak = max(peak, live)
        elif kind == "free" and record["address"] in sizes:
            live -= sizes.pop(record["address"])
    return peak


def predicted_kv_cache_peak(said):
    """From the shapes alone. The cache holds prompt + new - 1 positions at the end (the last
    token is never fed back), K and V for each layer, fp16; at its peak, one more tensor of the
    last layer is live beside them:
    - a dynamic cache grows by torch.cat: the last layer's values of one position fewer, while
      the longer copy is made;
    - beam search then reorders every layer's cache by index_select: the last layer's values of
      the full length, while the reordered copy is made;
    - a static cache is allocated once, at its full length."""
    sequences = said["batch"] * said["beams"]
    positions = said["prompt"] + said["new"] - 1

    def tensor(length):
        return sequences * said["heads"] * length * said["head_dim"] * 2

    cache = 2 * said["layers"] * tensor(positions)
    extra = {"greedy": tensor(positions - 1), "sample": tensor(positions - 1),
             "beam": tensor(positions), "static": 0}[said["mode"]]
    return cache + extra


# Reads of values no kernel computed, each listed by the user's line with what it took: the
# stop test of every token but the last, whose test is known (the length limit makes `is_done`
# all True): read as zero, transformers' sampling loop goes on; beam search's test is one whose
# worst case memtrace knows (it goes on while True), and so are the two crops of its output
# after the loop (nothing is cropped).
ZERO = "False: read as zero: no kernel computed it"
GOES_ON = "True: beam search goes on to its length limit"
WHOLE = "the whole length: no beam ended before the limit, nothing is cropped"
EXPECTED_ASSUMED = {"greedy": {ZERO: 63}, "sample": {ZERO: 63}, "static": {ZERO: 63},
                    "beam": {GOES_ON: 63, WHOLE: 2}}
# Beam search chooses its beams and tokens by topk over scores no kernel computed: each row's
# first k (Note [Top-k keeps k] in python/mem_tracer/simulated_gpu/values.py), known from then on,
# so its crops (their line's worst case all the same) and the program's sum of its tokens read
# known values, resting on that assumption, and are not counted as reads of device values.
TOP_K = "top-k keeps k: each row's first k (every token to the same k experts)"
TOKENS_READ = {"greedy": "0: read as zero: no kernel computed it",
               "sample": "0: read as zero: no kernel computed it",
               "static": "0: read as zero: no kernel computed it", "beam": TOP_K}


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam", "static"])
def test_generate_ends_after_max_new_tokens_with_the_kv_cache_its_shapes_predict(tmp_path, mode):
    trace = tmp_path / f"{mode}.bin"
    # A static cache makes generate() compile the model's decoding step (torch.compile, CUDA
    # graphs): with Inductor's caches of its own, empty, it compiles every time, as on a fresh
    # machine, never loading what an earlier run of any test left in the shared one.
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "generate_gpt2.py", mode,
                          env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    said = json.loads(result.stdout.strip().splitlines()[-1])
    # The prompt's 32 tokens and 64 new ones: one forward a token, the first over the prompt.
    assert said["shape"] == [4, 96] and said["forwards"] == 64, said
    assert kv_cache_peak(trace) == predicted_kv_cache_peak(said)
    report = report_json(trace)
    expected = EXPECTED_ASSUMED[mode]
    # By the user's line: the generate() call; and the program's own sum of the tokens, which
    # no kernel computed either, or resting on the assumed top-k.
    lines = (PROGRAMS / "generate_gpt2.py").read_text().splitlines()
    call = next(number for number, text in enumerate(lines, 1) if "model.generate(" in text)
    tokens = next(number for number, text in enumerate(lines, 1) if "int(out.sum())" in text)
    rows = report["assumed_values"]["rows"]
    assert {(row["line"], row["assumed"]): row["count"] for row in rows} == {
        **{(call, assumed): count for assumed, count in expected.items()},
        (tokens, TOKENS_READ[mode]): 1}
    reads = report["device_reads"]["count"]
    # Compiling, Inductor folds each constant of one value (joint_graph.py's
    # constant_fold_uniform_value) and reads that value back with .item(): 8 fp16 scalars, made
    # and read by torch.compile's internals, which the mode leaves alone (Note [Known values on
    # the simulated card]), so they read as zeros. A compile loaded from Inductor's cache reads
    # none: with the shared cache, the count depended on whether an earlier run had compiled
    # the same graph.
    folded = 8 if mode == "static" else 0
    unknown = {"greedy": 63 + 1, "sample": 63 + 1, "static": 63 + 1, "beam": 63}[mode]
    assert reads == unknown + folded, reads
    assert "FITS on a simulated NVIDIA H100 80GB HBM3" in result.stderr


def test_what_the_program_determines_is_known_and_read_uncounted(tmp_path):
    trace = tmp_path / "known.bin"
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "known_values.py")
    said = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert said == {
        "item": "145",  # sum(3 * arange(10) + 1), computed on the host beside the card
        "full": "True",
        "tolist": "[[6, 8, 1, 4], [2, 1, 1, 3]]",  # torch.tensor's data, lifted
        "cpu": "[5, 6, 7, 8, 9]",
        "in_place": "55",  # add_ wrote the shadow of the storage the view shares
        "view": "4",
        "nonzero": "5",  # an output of the host's size, where the card's read its count as 0
        "repeat_interleave": "[6, 4, 4]",  # output_size from the host: no read inside the op
        "mask": "6",
        "index_put": "6.0",  # x[mask] = v: the known mask's nonzero made by the mode
        "where": "-1",
        "or_true": "True",  # unknown | True
        "and_false": "False",  # unknown & False
        "zeros_like": "0.0",  # reads only the shape of an unknown tensor
        "unknown": "False",  # read as zero: a kernel computes it
    }
    # Only the last read a value no kernel computed: the others read what the card would.
    rows = report_json(trace)["device_reads"]["rows"]
    marked = next(number for number, text in enumerate(
        (PROGRAMS / "known_values.py").read_text().splitlines(), 1) if text.endswith("# READ"))
    assert [(row["line"], row["count"]) for row in rows] == [(marked, 1)]
    # Every op ran through the mode, whose frames the recorder leaves out (Note [Frames memtrace
    # hides]): no stack holds the mode's frames nor torch's OpOverload.__call__, through which it
    # calls each op; the innermost frame is the line that made the op (the program's, or torch's
    # nn.Module code it called).
    stacks = [frames for _, _, frames in allocation_stacks(trace)]
    hidden = [frame for frames in stacks for frame in frames
              if frame[0].endswith(("mem_tracer/simulated_gpu/values.py", "torch/_ops.py"))]
    assert stacks and not hidden, hidden[:3]
    assert {frames[-1][0] for frames in stacks} >= {str(PROGRAMS / "known_values.py")}


def test_an_output_sized_by_a_mask_no_kernel_computed_keeps_everything(tmp_path):
    trace = tmp_path / "masks.bin"
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "masks.py")
    said = {name: json.loads(shape) for name, shape in
            (line.split(" ", 1) for line in result.stdout.strip().splitlines())}
    # 8 x 16 values no kernel computed: every element kept; the known mask keeps its 4 rows.
    assert said == {"known_mask": [4, 16], "mask": [128], "nonzero": [128, 2],
                    "masked_select": [128], "unique": [8], "where": [8]}
    lines = (PROGRAMS / "masks.py").read_text().splitlines()
    marked = [number for number, text in enumerate(lines, 1) if text.endswith("# EVERYTHING")]
    rows = report_json(trace)["assumed_values"]["rows"]
    assert sorted((row["line"], row["assumed"], row["count"]) for row in rows) == [
        (line, "everything: a mask no kernel computed keeps every element", 1) for line in marked]
    # The known mask's count, read inside the op, is not a read of an unknown value.
    known = next(number for number, text in enumerate(lines, 1) if text.endswith("# KNOWN"))
    assert known not in [row["line"] for row in report_json(trace)["device_reads"]["rows"]]


def test_a_routing_computed_from_known_values_is_the_real_one_and_nothing_is_assumed(tmp_path):
    # Issue 53: the referee saw the zoo's top-1 MoE (nonzero over an argmax of the router)
    # record no assumption on the card. Why: its router's weights and input come from the host,
    # so what the router computes is known, computed on the host (Note [Known values on the
    # simulated card]), and argmax passes no gradient, so AdamW never changes the router. The
    # card routes as a real one would: each expert's rows are the CPU run's, step after step,
    # and no value was assumed. What the test assumes of a real card: its fp32 router logits
    # pick the same argmax as the host's (no two logits of a token within rounding).
    trace = tmp_path / "known.bin"
    card = json.loads(memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "moe_top1.py")
                      .stdout.strip().splitlines()[-1])
    cpu = on_the_host("moe_top1.py", "cpu")
    assert card["loads"] == cpu["loads"] and len(cpu["loads"]) == 8, (card, cpu)
    assert sum(cpu["loads"][:4]) == 16 and max(cpu["loads"]) < 16
    assert "assumed_values" not in report_json(trace)  # the report's section of assumptions
    # Drawn on the card, the input is a value no kernel computed: every expert's nonzero keeps
    # every token (Note [Values where they decide the path]), and each is said at its line.
    trace = tmp_path / "drawn.bin"
    drawn = json.loads(memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "moe_top1.py",
                                    "cuda", "drawn").stdout.strip().splitlines()[-1])
    assert drawn["loads"] == [16] * 8
    zoo = ROOT / "tests" / "estimator" / "zoo.py"
    line = next(number for number, text in enumerate(zoo.read_text().splitlines(), 1)
                if "torch.nonzero(choice == index)" in text)
    rows = report_json(trace)["assumed_values"]["rows"]
    assert [(row["line"], row["assumed"], row["count"]) for row in rows] == [
        (line, "everything: a mask no kernel computed keeps every element", 8)]


@pytest.mark.parametrize("program", ["moe.py", "detection.py"])
def test_real_values_beside_the_card_route_and_detect_as_a_cpu_run(tmp_path, program):
    # An MoE's expert loads and Faster R-CNN's boxes are decided by values kernels compute:
    # under --values cpu the host computes them beside the card, as the CPU run does.
    trace = tmp_path / "cpu.bin"
    result = memtrace_run("--gpu", "h100", "--values", "cpu", "-q", "-o", trace,
                          PROGRAMS / program)
    said = json.loads(result.stdout.strip().splitlines()[-1])
    on_cpu = on_the_host(program, "cpu")
    assert {key: said[key] for key in on_cpu} == on_cpu
    assert "--values cpu computed" in result.stderr and "FITS" in result.stderr
    # Nothing was assumed: every value that decided the path was computed.
    assert "assumed_values" not in report_json(trace)


def test_greedy_generate_under_real_values_makes_a_cpu_runs_tokens(tmp_path):
    # Its end tokens too: the host's values decide when each sequence ends.
    result = memtrace_run("--gpu", "h100", "--values", "cpu", "-q", "-o", tmp_path / "cpu.bin",
                          PROGRAMS / "generate_gpt2.py", "greedy")
    said = json.loads(result.stdout.strip().splitlines()[-1])
    on_cpu = on_the_host("generate_gpt2.py", "greedy", "cpu")
    assert {key: said[key] for key in ("shape", "forwards", "tokens")} == {
        key: on_cpu[key] for key in ("shape", "forwards", "tokens")}


def test_real_values_stay_within_their_host_memory(tmp_path):
    # 1 MiB holds the router and a few experts' weights: past it values are unknown, as
    # without --values cpu (the router's topk takes each token's first two experts: Note
    # [Top-k keeps k]), and the run says so.
    result = memtrace_run("--gpu", "h100", "--values", "cpu", "--values-memory", "1MiB", "-q",
                          "-o", tmp_path / "budget.bin", PROGRAMS / "moe.py")
    said = json.loads(result.stdout.strip().splitlines()[-1])
    assert said["loads"] == [512, 512, 0, 0, 0, 0, 0, 0]
    assert "its budget (--values-memory 1.0 MiB): values past it are unknown" in result.stderr
    assert "values past the budget were left unknown" in result.stderr


def test_detection_without_real_values_keeps_every_box_it_can(tmp_path):
    # Without --values cpu every score and overlap is unknown: every mask keeps everything, NMS
    # suppresses nothing, and each image keeps the detector's most boxes (100). Its labels come
    # from a known arange of 91 classes: the per-class NMS loop runs over 91 values, not over
    # every box (Note [How many distinct values an unknown tensor holds]).
    trace = tmp_path / "known.bin"
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "detection.py")
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"boxes": [100, 100]}
    assumed = report_json(trace)["assumed_values"]
    assert {row["assumed"] for row in assumed["rows"]} == {
        "everything: a mask no kernel computed keeps every element"}
    assert assumed["count"] < 1000, assumed["count"]


def round_up(nbytes):
    """What PyTorch's caching allocator holds for a request of `nbytes`: multiples of 512."""
    return max(512, -(-nbytes // 512) * 512)


def expert_loop_peak(load):
    """What moe.py's loop over experts holds above what it held when the loop began, from the
    shapes, at the expert of `load` tokens: its tokens' (row, slot) pairs (int64), their rows
    of x (64 fp32) and, at the GELU, the first Linear's output and the GELU's (256 fp32 each);
    the previous expert's are freed by then."""
    return (round_up(load * 2 * 8) + round_up(load * 64 * 4)
            + 2 * round_up(load * 256 * 4))


def test_top_k_keeps_k_each_token_to_the_same_k_experts(tmp_path):
    # Note [Top-k keeps k]: 512 tokens, 8 experts, top-2: under known values each token goes to
    # experts 0 and 1, 1,024 dispatches in all as on any card (not 512 x 8 x 2, every mask
    # keeping everything), and the loop's largest expert holds every token: its peak is what
    # the shapes say for 512, above what a real routing (a CPU run's) holds for its largest.
    trace = tmp_path / "known.bin"
    known = json.loads(memtrace_run("--gpu", "h100", "-q", "-o", trace, PROGRAMS / "moe.py")
                       .stdout.strip().splitlines()[-1])
    cpu = json.loads(memtrace_run("--gpu", "h100", "--values", "cpu", "-q", "-o",
                                  tmp_path / "cpu.bin", PROGRAMS / "moe.py")
                     .stdout.strip().splitlines()[-1])
    assert known["loads"] == [512, 512, 0, 0, 0, 0, 0, 0]
    assert sum(cpu["loads"]) == 512 * 2 and max(cpu["loads"]) < 512, cpu["loads"]
    for said in (known, cpu):
        assert said["peak"] - said["before_loop"] == expert_loop_peak(max(said["loads"])), said
    assert known["before_loop"] == cpu["before_loop"] and known["peak"] > cpu["peak"]
    # Each read of what the assumed indices decide, by the program's line: each expert's
    # torch.where in both forwards; and the output's sum, which no kernel computed.
    lines = (PROGRAMS / "moe.py").read_text().splitlines()
    where = next(number for number, text in enumerate(lines, 1) if "torch.where(" in text)
    total = next(number for number, text in enumerate(lines, 1) if "out.sum().item()" in text)
    rows = report_json(trace)["assumed_values"]["rows"]
    assert {(row["line"], row["assumed"]): row["count"] for row in rows} == {
        (where, TOP_K): 16, (total, "0.0: read as zero: no kernel computed it"): 1}


def test_top_k_keeps_k_in_transformers_mixtral(tmp_path):
    # transformers' own MoE, its experts a loop over those the tokens chose (the eager
    # implementation: one_hot of the chosen experts, nonzero of the experts hit, where of each
    # expert's tokens): under known values each layer routes every token to experts 0 and 1,
    # tokens x 2 in all; under --values cpu as a CPU run routes them; the largest expert of the
    # first holds more than any of the second.
    trace = tmp_path / "known.bin"
    known = json.loads(memtrace_run("--gpu", "h100", "-q", "-o", trace,
                                    PROGRAMS / "moe_mixtral.py").stdout.strip().splitlines()[-1])
    cpu = json.loads(memtrace_run("--gpu", "h100", "--values", "cpu", "-q", "-o",
                                  tmp_path / "cpu.bin", PROGRAMS / "moe_mixtral.py")
                     .stdout.strip().splitlines()[-1])
    assert known["loads"] == [[512, 512, 0, 0, 0, 0, 0, 0]] * 2
    assert cpu["loads"] == on_the_host("moe_mixtral.py", "cpu")["loads"]
    assert [sum(layer) for layer in cpu["loads"]] == [512 * 2] * 2
    assert known["peak"] > cpu["peak"]
    # Every value read to decide the path rests on the assumed top-k: none read as zero.
    rows = report_json(trace)["assumed_values"]["rows"]
    assert {row["assumed"] for row in rows} == {TOP_K}


@pytest.mark.parametrize("variant", ["fp32", "bf16", "flash"])
def test_training_through_the_cards_own_kernels_under_real_values(tmp_path, variant):
    # Note [Backward through the host's stand-ins]: cuDNN's batch norm and the memory-efficient
    # attention the card runs for fp32, cuDNN's attention for bf16 (flash attention with cuDNN's
    # turned off) have no host kernel, forward or backward (and the card's batch norm saves fp32
    # statistics for bf16, which the host's backward does not take): the host's math stands in, so three SGD steps' losses and the
    # weights after them are a CPU run's, where every value after the first backward was
    # unknown and read as zero, unsaid.
    result = memtrace_run("--gpu", "h100", "--values", "cpu", "-q", "-o", tmp_path / "train.bin",
                          PROGRAMS / "train_stand_ins.py", "cuda", variant)
    said = json.loads(result.stdout.strip().splitlines()[-1])
    assert said == on_the_host("train_stand_ins.py", "cpu", variant)
    assert "did not have" not in result.stderr and "cannot run" not in result.stderr


def test_training_through_attention_with_dropout_says_what_the_host_cannot_know(tmp_path):
    # The backward of attention with dropout cannot be recomputed (the forward's mask is not
    # kept): the host says so, and says how many ops then read what it did not have.
    result = memtrace_run("--gpu", "h100", "--values", "cpu", "-q", "-o",
                          tmp_path / "dropout.bin", PROGRAMS / "train_stand_ins.py", "cuda",
                          "dropout")
    assert ("the host cannot run aten._scaled_dot_product_efficient_attention_backward.default "
            "(dropout's mask was drawn in the forward; the host did not keep it)") in result.stderr
    assert " ops read values the host did not have, the first " in result.stderr


def random_reads(case):
    """tests/simulator/programs/random_reads.py's `case` on a simulated H200 under --values cpu,
    untraced: how many ops drew at random on the host, and how many reads of what they drew."""
    env = simulated_environment({"PYTHONPATH": str(ROOT / "python")}, "h200")
    result = run([sys.executable, PROGRAMS / "random_reads.py", case], env, timeout=300,
                 own_card=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_dropout_in_a_training_step_draws_and_decides_nothing():
    # Note [Values drawn on the host]: dropout draws its masks on the host's own stream, and
    # the step's gradients and weights rest on them, but nothing reads them back: the path is
    # the card's, and tests/estimator/referee.py judges the row.
    counted = random_reads("dropout")
    assert counted["random_draws"] == 2 and counted["random_reads"] == 0
    assert counted["program_random_reads"] == 0


def test_a_size_decided_by_a_value_drawn_on_the_host_is_one_read():
    # int(torch.rand(()) * 8) + 1: the draw, the product computed from it, then its read.
    counted = random_reads("sized")
    assert counted["random_draws"] == 1 and counted["random_reads"] == 1
    assert counted["program_random_reads"] == 0
    # Drawn by the program's own generator, then moved to the card (VITS's durations): not at
    # the same point of its stream in the referee's two runs, so read alike.
    counted = random_reads("sized_from_the_cpu")
    assert counted["random_draws"] == 0 and counted["random_reads"] == 0
    assert counted["program_random_reads"] == 1


def test_attention_without_dropout_draws_nothing():
    # The memory-efficient attention's forward and backward carry the tag
    # nondeterministic_seeded, with dropout_p 0 (left out of the call: its default) they draw
    # nothing.
    counted = random_reads("sdpa")
    assert counted["random_draws"] == 0 and counted["random_reads"] == 0
