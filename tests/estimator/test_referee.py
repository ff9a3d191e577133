"""The referee run's sample (issue 53): six rows of docs/referee.jsonl run again on the simulated
card, and the table of docs/accuracy.md made again from the committed data file.

What must stay true: each sample row (a transformers decoder, an encoder, a vision transformer,
a torchvision CNN, a zoo model and a training step) is measured and estimated again; the card
measures what the committed row says, to the byte (the simulated card and PyTorch's allocator
are deterministic); the estimate's |error| is no worse than the bin of the table's distribution
the committed row is in (exact, 0.1 %, 1 %, 3 %); and the table in docs/accuracy.md is the one
referee_table.py makes from the committed data file, so that the docs and the data cannot
drift. A row that fails, or a referee that cannot find its card, fails the test saying why.
"""
import inspect
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import referee
import referee_table

SAMPLE = (
    "transformers/gpt2/sdpa/infer-b1",
    "transformers/bert/eager/infer-b2",
    "transformers/vit/sdpa/infer-b1",
    "torchvision/resnet18/-/infer-b1",
    "zoo/unet/-/infer-b1",
    "zoo/gpt2-sdpa/-/train-b2",
)
BINS = (0.0, 0.1, 1.0, referee_table.BUDGET)


def bin_of(error):
    """The first bin of the table's distribution that holds |error|."""
    for limit in BINS:
        if abs(error) <= limit:
            return limit
    return float("inf")


@pytest.fixture(scope="module")
def committed():
    rows = {referee.key(row): row for row in referee.read_rows(referee.DATA)}
    missing = [case for case in SAMPLE if tuple(case.split("/")) not in rows]
    assert not missing, f"{referee.DATA} lacks the sample rows {missing}: run referee.py --case"
    return rows


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    build = os.environ.get("MEMTRACE_BUILD_DIR")
    if build:  # the build ctest names, not whatever the checkout's build/ holds
        os.environ.setdefault("MEMTRACE_BIN_DIR", str(Path(build) / "bin"))
        os.environ.setdefault("MEMTRACE_SIMULATOR_DIR", str(Path(build) / "simulator"))
        os.environ.setdefault("MEMTRACE_LIBRARY", str(Path(build) / "allocator" / "libmemtrace.so"))
    data = tmp_path_factory.mktemp("referee") / "sample.jsonl"
    arguments = ["--data", str(data), "--timeout", "120"]
    for case in SAMPLE:
        arguments += ["--case", case]
    assert referee.main(arguments) == 0
    return {referee.key(row): row for row in referee.read_rows(data)}


@pytest.mark.parametrize("case", SAMPLE)
def test_the_sample_row_is_the_tables(case, sample, committed):
    wanted = tuple(case.split("/"))
    assert wanted in sample, f"the referee wrote no row {case}"
    row, before = sample[wanted], committed[wanted]
    assert "error" not in row, row["error"]
    assert row["judged"], row.get("assumed")
    assert row["measured"]["allocated"] == before["measured"]["allocated"], (row, before)
    assert row["measured"]["requested"] == before["measured"]["requested"], (row, before)
    assert row["measured"]["phase"] == before["measured"]["phase"]
    assert bin_of(row["error_allocated"]) <= bin_of(before["error_allocated"]), \
        f"{case}: {row['error_allocated']:+.3f} %, the table says {before['error_allocated']:+.3f} %"
    assert abs(row["error_allocated"]) <= referee_table.BUDGET


def test_the_table_is_the_data_files():
    table = referee_table.render(referee.read_rows(referee.DATA))
    page = referee_table.PAGE.read_text()
    assert referee_table.BEGIN in page and referee_table.END in page
    assert referee_table.page_with(table, page) == page, \
        "docs/accuracy.md's table is not the data file's: run referee_table.py --write"


def _fails():
    raise RuntimeError("first line\nthe model cannot be built")


def _dies():
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_failing_or_dying_model_is_a_row_with_its_reason():
    assert referee.in_child(_fails, (), 30)["error"].startswith(
        "RuntimeError: the model cannot be built")
    assert referee.in_child(_dies, (), 30) == {"error": "the child died of signal 9"}
    assert referee.in_child(lambda: 42, (), 30) == {"result": 42}
    # transformers' message for a package missing ends with advice that does not name it.
    missing = ("LayoutLMv2Model requires the detectron2 library but it was not found in your "
               "environment.\nthat match your environment. Please note that you may need to "
               "restart your runtime after installation.")
    assert referee.last_line(missing).startswith("LayoutLMv2Model requires the detectron2")
    row = {"family": "transformers", "model": "layoutlmv2", "attention": "eager",
           "task": "infer-b1", "error": f"builds or runs nowhere: ImportError: "
                                        f"{referee.last_line(missing)}"}
    assert referee_table._packages([[row]])[-1].endswith("`detectron2` 1 model type (layoutlmv2).")
    row = referee.make_row(("zoo", "m", "-"), "infer-b1", {"result": {}},
                           {"error": "ValueError: no"}, 1.0)
    assert row["error"] == "estimate: ValueError: no"
    assert referee_table.kind(row) == "failed"
    assert referee_table.failure_kind(row["error"]) == "the estimate (the card ran it)"


def test_the_card_measures_again_with_the_hosts_values_where_it_failed_alone():
    # fastspeech2_conformer_with_hifigan (2026-11-30): the card's length regulator read
    # durations no kernel computed, while the CPU's run of the same forward (the estimate's)
    # stopped on the shrinker's sizes; the row said the card's message, not the model's.
    card = {"error": "RuntimeError: repeats can not be negative (_ops.py:916)"}
    model = {"error": "RuntimeError: The size of tensor a (16) must match the size of tensor b "
                      "(80) at non-singleton dimension 2 (_ops.py:916)"}
    estimate = {"error": "MemTracerError: estimate(): running the forward on the example input "
                         "(for its data-dependent ops) failed: RuntimeError: The size of tensor "
                         "a (16) must match the size of tensor b (80) at non-singleton dimension "
                         "2 (estimate.py:567)"}
    ran = {"result": {"allocated": 1}}
    assert referee.card_failed_alone(card, ran)
    assert referee.card_failed_alone(card, estimate)
    assert not referee.card_failed_alone(model, estimate)  # the same error on both sides
    assert not referee.card_failed_alone(ran, estimate)
    row = referee.make_row(("transformers", "m", "eager"), "infer-b1", model, estimate, 1.0)
    assert row["error"] == f"builds or runs nowhere: {model['error']}"


def test_a_row_whose_estimate_failed_keeps_the_card_side_and_is_estimated_again():
    measured = {"result": {"requested": 10, "allocated": 12, "reserved": 20, "phase": "forward",
                           "assumed": []}}
    taken = {"measured": {"at": "2026-11-29T17:00:00Z", "commit": "abc1234"}}
    row = referee.make_row(("zoo", "m", "-"), "infer-b1", measured,
                           {"error": "MemTracerError: no"}, 1.0, taken=taken)
    assert row["measured"]["allocated"] == 12 and row["taken"] == taken
    assert referee_table.kind(row) == "failed"
    assert referee.stale_estimate(row)  # the estimate failed, not yet taken again
    row["taken"]["estimate_failed"] = {"at": "2026-11-29T17:05:00Z", "commit": "def5678"}
    assert not referee.stale_estimate(row)  # taken again and failed again: not a third time


def test_a_row_measured_with_the_hosts_values_is_judged_where_the_example_sized_tensors():
    # The card computes no values (Note [Values where they decide the path]); where its run
    # failed, run() measures again with every op's values computed on the host beside it, so
    # the card follows the example's values as the recording did.
    guess = {"result": {"requested": 10, "allocated": 12, "reserved": 20, "phase": "forward",
                        "method": "record", "lower_bound": False, "approximate": False,
                        "data_dependent": ["aten::repeat_interleave.Tensor"]}}
    for values, judged in (("known", False), ("cpu", True)):
        truth = {"result": {"requested": 10, "allocated": 12, "reserved": 20,
                            "phase": "forward", "assumed": [], "values": values}}
        row = referee.make_row(("transformers", "m", "eager"), "infer-b1", truth, guess, 1.0)
        assert row["judged"] is judged and row.get("values", "known") == values
    truth["result"]["assumed"] = ["x.py:1: a value the host could not compute"]
    assert not referee.make_row(("transformers", "m", "eager"), "infer-b1", truth, guess,
                                1.0)["judged"]
    # Values the host drew at random (its own stream: VITS's stochastic durations) are not the
    # example run's: a shape the estimate says values decided is then not judged; without such
    # a shape the row is, as any other.
    truth["result"].update(assumed=[], random_draws=3)
    row = referee.make_row(("transformers", "m", "eager"), "infer-b1", truth, guess, 1.0)
    assert not row["judged"] and row["random_draws"] == 3
    sized = {"result": {**guess["result"], "data_dependent": []}}
    assert referee.make_row(("transformers", "m", "eager"), "infer-b1", truth, sized,
                            1.0)["judged"]
    # Where the reads of drawn values were counted (Note [Values drawn on the host]), a row
    # whose program read none is judged (dropout in a step, sdpa's kernels), one that read one
    # is not; a row measured before they were counted falls back on its draws (above).
    truth["result"].update(random_reads=0)
    row = referee.make_row(("transformers", "m", "eager"), "infer-b1", truth, guess, 1.0)
    assert row["judged"] and row["random_reads"] == 0 and row["random_draws"] == 3
    truth["result"].update(random_reads=1)
    row = referee.make_row(("transformers", "m", "eager"), "infer-b1", truth, guess, 1.0)
    assert not row["judged"] and row["random_reads"] == 1


def test_the_host_counts_the_ops_it_draws_at_random():
    import torch
    from mem_tracer.simulated_gpu import values

    host = values.HostValues(1 << 20)
    state = torch.default_generator.get_state()
    host.compute(torch.ops.aten.randn.default, ([2, 2],), {}, [], lambda func: None,
                 drew=True)
    host.compute(torch.ops.aten.add.Tensor, (torch.ones(2), torch.ones(2)), {}, [],
                 lambda func: None, drew=False)
    # Dropout with p 0 draws nothing, but runs on the host's stream all the same.
    host.compute(torch.ops.aten.native_dropout.default, (torch.ones(4), 0.0, True), {}, [],
                 lambda func: None, drew=False)
    assert host.random_draws == 1 and host.ops == 3
    # The program's own generator is left as it was (the host draws from a stream of its own).
    assert torch.equal(torch.default_generator.get_state(), state)


def test_an_op_tagged_random_draws_only_where_its_arguments_say_it_does():
    # Note [Values drawn on the host]: sdpa's kernels carry the tag nondeterministic_seeded
    # whatever their dropout_p; dropout draws nothing with p 0 or out of training.
    import torch
    from mem_tracer.simulated_gpu import values

    aten = torch.ops.aten
    x = torch.ones(2, 2, 4, 8)

    def draws(op, *args, **kwargs):
        return values._OpTraits.of(op, True).really_draws(args, kwargs)

    efficient = aten._scaled_dot_product_efficient_attention.default
    assert not draws(efficient, x, x, x, None, True)  # dropout_p left out: its default, 0
    assert not draws(efficient, x, x, x, None, True, 0.0)
    assert draws(efficient, x, x, x, None, True, 0.1)
    assert draws(aten._scaled_dot_product_flash_attention.default, x, x, x, dropout_p=0.1)
    assert not draws(aten._scaled_dot_product_flash_attention.default, x, x, x, dropout_p=0.0)
    assert draws(aten.native_dropout.default, x, 0.1, True)
    assert not draws(aten.native_dropout.default, x, 0.0, True)
    assert not draws(aten.native_dropout.default, x, 0.1, False)
    assert draws(aten.bernoulli.p, x, 0.0)  # bernoulli's p is no dropout's: it draws
    assert draws(aten.randn.default, [2])
    assert not draws(aten.add.Tensor, x, x)


def test_the_rows_estimated_again_are_those_of_another_front_end_not_yet_taken_again():
    row = {"family": "zoo", "model": "m", "attention": "-", "task": "infer-b1",
           "measured": {"allocated": 1}, "method": "trace", "error_allocated": 0.0}
    assert referee.stale_estimate(row)
    assert not referee.stale_estimate({**row, "method": referee.DEFAULT_FRONT_END})
    # TorchScript standing in after the recording failed, estimated this session: kept.
    stamped = {**row, "taken": {"estimated": {"at": "2026-11-29T17:10:00Z", "commit": "x"}}}
    assert not referee.stale_estimate(stamped)
    assert not referee.stale_estimate({k: v for k, v in row.items() if k != "measured"})


def test_the_rows_estimated_again_by_commit_are_those_whose_estimate_predates_it(tmp_path):
    # A history of its own (a clean clone may be shallow): the card changes at `card`, the
    # estimator at `fix`, and the card once more at `card_again`.
    def git(*command):
        return subprocess.run(["git", "-C", str(tmp_path), *command], check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    commits = {}
    for name, path in (("card", "simulator/a"), ("fix", "python/b"), ("later", "docs/c"),
                       ("card_again", "python/mem_tracer/simulated_gpu/d")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(name)
        git("add", path)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name)
        commits[name] = git("rev-parse", "--short", "HEAD")
    card, fix, later, card_again = (commits[name] for name in commits)

    def row(estimated, measured=None, **more):
        taken = {"estimated": {"at": "x", "commit": estimated},
                 "measured": {"at": "x", "commit": measured or estimated}}
        return {"family": "zoo", "model": "m", "attention": "-", "task": "infer-b1",
                "measured": {"allocated": 1}, "taken": taken, **more}

    def by(row_, before=None, at=()):
        return referee.estimated_by(row_, {}, before, at, repository=tmp_path)

    assert by(row(card), before=fix)  # estimated with code that lacked the fix
    assert not by(row(fix), before=fix) and not by(row(later), before=fix)
    assert by(row(f"{later}+changes"), at=(later,))  # "+changes" still names its commit
    assert not by(row(fix), at=(later, card))
    # The estimate failed (its own stamp) but the card ran: selected as well.
    failed = row(card)
    failed["taken"]["estimate_failed"] = failed["taken"].pop("estimated")
    assert by(failed, before=fix)
    # Only rows whose card side ran: a row the card failed is --retry-failed's.
    assert not by({k: v for k, v in row(card).items() if k != "measured"}, before=fix)
    # A row written before stamps: the commit that recorded it, less one, took it.
    legacy = {referee.key(row(card)): {"at": "x", "commit": later}}
    unstamped = {k: v for k, v in row(card).items() if k != "taken"}
    assert referee.estimated_by(unstamped, legacy, before=fix, repository=tmp_path) is False
    legacy[referee.key(row(card))]["commit"] = fix  # recorded in the fix: taken before it
    assert referee.estimated_by(unstamped, legacy, before=fix, repository=tmp_path)
    # The card's side is measured again only where the card changed after it was taken.
    assert referee.card_changed_since(row(later), {}, repository=tmp_path)
    assert not referee.card_changed_since(row(later, measured=card_again), {},
                                          repository=tmp_path)
    with pytest.raises(SystemExit, match="git cannot tell"):
        by(row("0000000"), before=fix)


def test_a_model_type_tried_at_a_task_supersedes_its_row_without_one(tmp_path):
    data = tmp_path / "rows.jsonl"
    old = {"family": "transformers", "model": "t", "attention": "-", "task": "-",
           "error": "no base model in transformers' auto mapping"}
    other = {**old, "model": "u"}
    new = {"family": "transformers", "model": "t", "attention": "eager", "task": "infer-b1",
           "error": "builds or runs nowhere: ValueError: x"}
    data.write_text("".join(json.dumps(row) + "\n" for row in (old, other, new)))
    assert [referee.key(row) for row in referee.read_rows(data)] == [
        ("transformers", "u", "-", "-"), ("transformers", "t", "eager", "infer-b1")]


def test_a_model_type_without_a_base_model_takes_another_mappings_class_or_its_own():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    for model_type, wanted in (("trocr", "TrOCRForCausalLM"),  # MODEL_FOR_CAUSAL_LM_...
                               ("blip_text_model", "BlipTextModel")):  # modeling_blip_text.py
        assert model_type not in MODEL_MAPPING_NAMES
        cls, how = referee.model_class(model_type, CONFIG_MAPPING[model_type]())
        assert cls.__name__ == wanted, how
    with pytest.raises(ValueError, match="no model class for SamMaskDecoderConfig"):
        referee.model_class("sam_mask_decoder", CONFIG_MAPPING["sam_mask_decoder"]())


def test_a_heterogeneous_config_is_made_small_layer_by_layer():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING["dots3_note"]()
    text = config.text_config
    assert text.is_heterogeneous, \
        "dots3_note's text config is no longer heterogeneous: the test needs another"
    before = {int(index): dict(values)
              for index, values in text._heterogeneity_spec.per_layer_overrides.items()}
    referee.shrink(config)
    layers = text.num_hidden_layers
    assert layers <= 2
    overrides = {int(index): values
                 for index, values in text._heterogeneity_spec.per_layer_overrides.items()}
    assert set(overrides) == {index for index in before if index < layers}
    for index, values in overrides.items():
        assert values.keys() == before[index].keys()
        for name, value in values.items():
            assert value == referee._small(name, before[index][name])
            assert getattr(text.per_layer_config[index], name) == value


def test_a_shrinking_variant_is_taken_only_where_the_plain_config_does_not_run():
    # Each variant's rule, where the config made small by _SMALL alone fails its forward.
    for model_type, wanted in (("gptj", "head"),  # rotary_dim 64 > the head's 16
                               ("deepseek_v3", "head"),  # MLA's rope/nope parts, kv heads
                               ("efficientnet", "keep hidden_dim"),  # round_filters(1280)
                               ("parakeet_ctc", "mel bins, time first"),  # encoder's bins
                               ("paligemma", "image tokens 16"),  # 16 features an image
                               ("parakeet_encoder", "time first"),  # (batch, time, bins)
                               ("glm4v_text", "mrope 8"),  # [8, 12, 12] by default
                               ("colqwen2", "mrope 8"),  # its sub-config's package says mrope
                               # LLaVA's kind: the message counts features × width
                               ("deepseek_vl", "image tokens 16"),
                               ("glm4v_vision", "image grid"),  # flat patches and grid_thw
                               # patches as images, then the sections the forward asks for
                               ("paddleocr_vl", "image grid, patches, mrope 8")):
        assert referee.transformers_variant(model_type, "eager", 1) == wanted, model_type
    # "own backbone", for a venv without timm: transformers' own ResNet in place of timm's.
    assert referee._timm_backbone(referee._default_config("detr"))
    assert not referee._timm_backbone(referee._default_config("detr", "own backbone"))
    # Llama's "head" config differs (as many key/value heads as query heads), but the plain
    # one runs: Llama keeps the sizes its rows were taken with.
    assert referee._config_text("llama", "head") != referee._config_text("llama", "")
    assert referee.transformers_variant("llama", "eager", 1) == ""
    # Where no variant runs either, the plain config: the row says the plain one's error.
    assert referee.transformers_variant("granite_speech5_ctc", "eager", 1) == ""


def test_a_hybrids_step_keeps_every_kind_of_layer():
    # Cut to its first two layers, OLMo-hybrid has linear attention only: its training step's
    # forward (with a cache) then asks for an attention layer's length and fails; the step
    # takes "layer kinds", the forward without a cache keeps the sizes its rows were taken with.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    assert referee.transformers_variant("olmo_hybrid", "eager", 2, train=True) == "layer kinds"
    assert referee.transformers_variant("olmo_hybrid", "eager", 1) == ""
    # Every kind of a list, the layer count raised to as many kinds as it has (LFM3: three).
    kinds = set(CONFIG_MAPPING["lfm3"]().layer_types)
    config = referee.shrink(CONFIG_MAPPING["lfm3"](), variant="layer kinds")
    assert set(config.layer_types) == kinds and len(kinds) == 3, config.layer_types
    assert config.num_hidden_layers == len(config.layer_types) == 3
    # A kind placed by period and offset (Jamba's attention: every 8th layer from the 4th).
    config = referee.shrink(CONFIG_MAPPING["jamba"](), variant="layer kinds")
    assert config.attn_layer_offset < config.num_hidden_layers == 2
    assert referee.shrink(CONFIG_MAPPING["jamba"]()).attn_layer_offset == 4  # plain: none


def test_tokens_are_those_of_the_sub_config_that_embeds_them():
    # FastSpeech2 with HiFi-GAN has no vocab_size of its own: its `model_config` embeds 78
    # tokens, and ids up to VOCABULARY were out of its range ("index out of range in self").
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = referee.shrink(CONFIG_MAPPING["fastspeech2_conformer_with_hifigan"]())
    assert referee._sub_config_vocabulary(config) == config.model_config.vocab_size < 512
    assert referee._sub_config_vocabulary(referee.shrink(CONFIG_MAPPING["gpt2"]())) == 512


def test_an_encoder_alone_gets_the_input_its_forward_takes_first():
    # PreTrainedModel's main input is "input_ids" unless a class says otherwise; a vision
    # encoder alone (Idefics2's) takes pixel_values first and cannot go without.
    import torch

    model, config = referee.transformers_model("idefics2_vision", "eager")
    assert model.main_input_name not in inspect.signature(model.forward).parameters
    inputs = referee.transformers_inputs(model, config, 2)
    assert list(inputs) == ["pixel_values"] and inputs["pixel_values"].shape[0] == 2
    with torch.no_grad():
        model.eval()(**inputs)
    # A time series model's context (PatchTST): (batch, context length, channels).
    model, config = referee.transformers_model("patchtst", "eager")
    inputs = referee.transformers_inputs(model, config, 2)
    assert inputs["past_values"].shape == (2, config.context_length, config.num_input_channels)


def test_a_failure_of_the_recording_reads_the_same_for_a_forward_and_a_step():
    step = ("estimate: MemTracerError: estimate(): recording the step on fake tensors failed: "
            "KeyError: 'Number of patches 4 not found'")
    forward = step.replace("the step", "the forward")
    assert referee_table._reason(step) == referee_table._reason(forward) == (
        "estimate: recording on fake tensors: KeyError: '…'")


def test_the_shrinking_rules_of_the_failed_rows_run_what_failed():
    # Each rule of 2026-11-30 (helper i53failB), on a model type whose rows failed before it:
    # taken only where the plain config (and every older variant) does not run its forward.
    for model_type, wanted in (("mistral4", "head"),  # head_dim = MLA's nope + rope parts
                               ("mamba2", "head"),  # heads × head size = 2 × hidden
                               ("axk1", "head, expert groups"),  # 8 groups of 4 experts
                               ("hunyuan_v1_dense", "more sizes"),  # head_dim None
                               ("dac", "audio channels"),  # (batch, 1, samples)
                               ("detr", ""),  # timm's ResNet: the venv has timm now
                               # DINOv2's stages 9-12 kept for the neck
                               ("depth_anything", "backbone layers"),
                               ("owlvit_text_model", "positions")):  # 16 positions
        assert referee.transformers_variant(model_type, "eager", 1) == wanted, model_type


def test_sdpa_where_a_part_has_none_and_a_vq_vae_encodes():
    import torch

    # D-FINE's kind: the model's attention has sdpa, its backbone's class none; the backbone
    # takes eager and the row says so. A class without sdpa itself still refuses it (no row).
    model, config = referee.transformers_model("pp_ocrv6_small_rec", "sdpa")
    assert referee.BUILT["eager"] == ["backbone_config"]
    assert model.config._attn_implementation == "sdpa"
    assert model.config.backbone_config._attn_implementation == "eager"
    with pytest.raises(ValueError, match="MobileNetV1Model does not support an attention"):
        referee.transformers_model("mobilenet_v1", "sdpa")
    # A VQ-VAE (encode and decode, no forward): its encode is what the row runs.
    model, config = referee.transformers_model("chameleon_vqgan", "eager")
    assert referee.BUILT["forward"] == "encode"
    inputs = referee.transformers_inputs(model, config, 1)
    with torch.no_grad():
        output = model.eval()(**inputs)
    assert isinstance(referee.loss_of(output), torch.Tensor)


def test_a_hybrid_keeps_an_attention_layer_where_its_forward_asks_for_one():
    # Issue 53's rows that failed with "`get_seq_length` can only be called on Attention
    # layers" (helper i53inputs, 2026-11-30). MiniCPM-V 4.6's text config keeps its cache
    # (build() turns off only the model's own config's), so its inference forward, not only
    # the step's, asks its first two layers (linear attention) for a length: "layer kinds",
    # tried last and only on that message.
    assert referee.transformers_variant("minicpm_ocr", "eager", 1) == "layer kinds"
    # RecurrentGemma's kinds are a pattern its layers repeat (recurrent, recurrent, attention):
    # cut to two layers it had no attention layer; the pattern keeps one now.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = referee.shrink(CONFIG_MAPPING["recurrent_gemma"](), variant="layer kinds")
    assert config.block_types == ["recurrent", "attention"], config.block_types
    assert set(config.layers_block_type) == {"linear_attention", "sliding_attention"}
    assert referee.shrink(CONFIG_MAPPING["recurrent_gemma"]()).block_types == [
        "recurrent", "recurrent", "attention"]  # plain: as the rows that ran were taken
    assert referee.transformers_variant("recurrent_gemma", "eager", 2, train=True) == \
        "layer kinds"
    # Bailing's router names its groups and experts otherwise than DeepSeek-V3's: "expert
    # groups" makes them two experts each, a token's experts no more than the small top-k.
    config = referee.shrink(CONFIG_MAPPING["bailing_hybrid"](), variant="head, expert groups")
    assert (config.num_experts, config.num_expert_group, config.topk_group,
            config.num_experts_per_token) == (4, 2, 2, 2)


def test_an_input_the_referee_does_not_know_is_made_as_the_forward_documents_it():
    # Note [Inputs from the forward's docstring]: Idefics2's perceiver (main input
    # "input_ids", which its forward does not take) wants `context` of (batch, seq_len,
    # embed_dim) and an attention mask; MuseGlimmer's assistant `context_hidden_states` of
    # (batch_size, tokens, dim * len(config.target_layer_ids)); VideoPrism a video of
    # (batch_size, num_frames, num_channels, frame_size, frame_size), its frames the config's.
    import torch

    for model_type, wanted in (
            ("idefics2_perceiver", lambda config: {
                "context": (2, referee.SEQUENCE, config.hidden_size),
                "attention_mask": (2, referee.SEQUENCE)}),
            ("muse_glimmer_assistant", lambda config: {
                "noise_embeds": (2, referee.SEQUENCE, config.hidden_size),
                "context_hidden_states": (2, referee.SEQUENCE,
                                          config.hidden_size * len(config.target_layer_ids))}),
            ("videoprism_vision_model", lambda config: {
                "pixel_values_videos": (2, config.num_frames, config.num_channels, 64, 64)})):
        model, config = referee.transformers_model(model_type, "eager")
        inputs = referee.transformers_inputs(model, config, 2)
        assert {name: tuple(value.shape) for name, value in inputs.items()} == \
            wanted(config), model_type
        with torch.no_grad():
            model.eval()(**inputs)
    # VARIANTS' "documented inputs": MusicGen's decoder takes (batch_size * num_codebooks,
    # sequence_length) tokens, not the referee's (batch, tokens); tried last, where nothing
    # else runs.
    assert referee.transformers_variant("musicgen_decoder", "eager", 1) == "documented inputs"
    model, config = referee.transformers_model("musicgen_decoder", "eager")
    inputs = referee.transformers_inputs(model, config, 2, "documented inputs")
    assert inputs["input_ids"].shape == (2 * config.num_codebooks, referee.SEQUENCE)
    # A forward whose docstring gives no shape (Perceiver's "inputs: Can be anything") still
    # says the referee makes no such input.
    model, config = referee.transformers_model("perceiver", "eager")
    with pytest.raises(ValueError, match="main input 'inputs': the referee makes no such"):
        referee.transformers_inputs(model, config, 1)


def test_a_size_the_config_derives_from_a_width_follows_it():
    # VARIANTS' "derived sizes": SigLIP's text `projection_size` is its hidden size by
    # default (768), which the shrinker, by name, left at 768 beside a hidden size of 64 ("mat1
    # and mat2 shapes cannot be multiplied"); T5Gemma's decoder's cross-attention width is the
    # encoder's. Tried last: the plain config keeps them, and so do the rows that ran.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    plain = referee.shrink(CONFIG_MAPPING["siglip"]())
    assert plain.text_config.projection_size == 768 != plain.text_config.hidden_size
    derived = referee.shrink(CONFIG_MAPPING["siglip"](), variant="derived sizes")
    assert derived.text_config.projection_size == derived.text_config.hidden_size == 64
    derived = referee.shrink(CONFIG_MAPPING["t5gemma"](), variant="derived sizes")
    assert derived.decoder.cross_attention_hidden_size == derived.encoder.hidden_size == 64
    for model_type in ("siglip", "t5gemma"):
        assert referee.transformers_variant(model_type, "eager", 1) == "derived sizes"
