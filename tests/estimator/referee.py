"""The referee run: the estimator held against the simulated card, model after model (issue 53).

For one model and its inputs, the same forward (torch.no_grad, batch 1 and 2) and the same
AdamW training step run on the simulated card of a profile (docs/simulated-gpu.md), untraced,
under PyTorch's default caching allocator, giving `requested_bytes.all.peak`,
`max_memory_allocated()`, `max_memory_reserved()` and the phase of the peak; beside it
`mem_tracer.estimate(..., device=<the profile's estimator profile>)` (with
`training=TrainingStep(...)` for the step), its figures, its front end (`Estimate.method`) and
whether it says approximate or a lower bound. One JSON line a row, appended to the data file
(docs/referee.jsonl), so that a run is resumable (`--resume` skips the rows already there) and
can be split (`--only REGEX`, `--limit N`, `--tasks`):

    python tests/estimator/referee.py [--families transformers,torchvision,zoo] [--only REGEX]
        [--limit N] [--tasks infer-b1,infer-b2,train-b2] [--resume [--only-tried]]
        [--retry-failed] [--data docs/referee.jsonl] [--profile h100] [--timeout 300]
    python tests/estimator/referee.py --re-estimate [--only REGEX] [--limit N] [--tasks ...]
        [--estimated-before COMMIT] [--estimated-at C1,C2]

`--re-estimate` takes again only the estimate of the rows whose estimate came through another
front end than estimate()'s default (TorchScript, before the recording became the default) or
failed, keeping the card's side (deterministic: the simulated card and PyTorch's allocator);
each row's `taken` says when and with which commit each side was taken, `error_before` what the
old estimate said. With `--estimated-before COMMIT` (the estimate taken with code that did not
hold COMMIT) or `--estimated-at C1,C2` (its stamp names one of them), exactly those rows instead
(whose card side ran), such as the rows estimated before a fix landed; a row whose card side
predates the simulated card's last change (CARD_CODE) is measured again too. `--only-tried`
(with `--resume`) runs a coverage pass (batch 2, sdpa, the training step) over the model types
that have rows before the types not tried yet.

The models (a loop over each library's own registry, never a hand list):
- transformers: every model type of `CONFIG_MAPPING_NAMES`, its default config made small by
  `shrink` (hidden sizes, layers, heads, intermediate sizes, vocabulary, image and audio sizes,
  experts: by attribute name, in every sub-config and per-layer config), the base model of the
  auto mapping (`AutoModel.from_config`), or where it has none the class another auto mapping
  names or the package's own model class (model_class), with attention "sdpa" and "eager"
  where the class has both; inputs from the model's `main_input_name`. Where the config so
  made does not run its forward on the CPU, a variant of the shrinker's rules or the inputs
  that does (VARIANTS: a head's parts, EfficientNet's top channels, an audio encoder's mel
  bins and layout, multimodal rotary sections, image tokens, transformers' own backbone for
  timm's, sizes the default config leaves unset, a codec's audio channels), said in the row's
  `built`. With sdpa, a part whose class has none (D-FINE's HGNetV2 backbone) takes eager
  (`built`: eager); a class without sdpa itself has no sdpa row. A class that leaves forward
  unimplemented and encodes (a VQ-VAE) runs its encode (`built`: forward).
- torchvision: every classification and segmentation model of `torchvision.models.list_models`,
  random weights, at the smallest of 64, 96, 128, 224, 299 pixels a forward takes (tried on
  the meta device; 64 for RegNet, whose init cannot run there).
- zoo: the repository's own (tests/estimator/zoo.py).
A model that cannot be built, run or estimated is still a row: its error, in a line.

Each measurement and each estimate runs in a forked child of a long-lived process (one on the
simulated card, one beside it), so that a fresh CUDA context and cuBLAS workspace start every
measurement (the estimate is for the first forward of a process), a crash, hang or OOM loses
one row only, and torch and transformers are imported twice per run, not per model.

Where a value no kernel computed decided a shape or the path (MoE routing, nonzero, a mask:
the card's values mode, Note [Values where they decide the path] in
python/mem_tracer/simulated_gpu/values.py, lists every such read), the row says so
(`judged: false`): the card cannot referee it, and the CPU truths of zoo_accuracy.py stand in.

The table of docs/accuracy.md is made from the data file by referee_table.py.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
DATA = REPOSITORY / "docs" / "referee.jsonl"
FAMILIES = ("transformers", "torchvision", "zoo")
TASKS = ("infer-b1", "infer-b2", "train-b2")
SEQUENCE = 32  # tokens a row for the transformers models
SIZES = (64, 96, 128, 224, 299)  # pixels tried for a torchvision model, smallest first
SEED = 0

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPOSITORY / "python"))


# ---- the models -------------------------------------------------------------------------------

# Attribute names a config spells its sizes with, and the small value each takes (shrink).
_SMALL = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim",
                     "word_embed_proj_dim", "embedding_size", "projection_dim", "n_embed",
                     "d_embed", "text_embed_dim", "vision_embed_dim"), 64),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers",
                     "decoder_layers", "num_encoder_layers", "num_decoder_layers",
                     "num_backbone_layers"), 2),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "num_heads"), 4),
    **dict.fromkeys(("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"),
                    2),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "n_inner", "encoder_ffn_dim",
                     "decoder_ffn_dim", "d_ff", "ffn_hidden_size", "moe_intermediate_size",
                     "shared_expert_intermediate_size", "mlp_dim", "d_inner"), 128),
    **dict.fromkeys(("head_dim", "d_kv", "kv_channels", "attention_head_size"), 16),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
                    4),
    **dict.fromkeys(("num_experts_per_tok", "moe_topk", "top_k"), 2),
    **dict.fromkeys(("image_size", "img_size"), 64),
    **dict.fromkeys(("max_source_positions",), 64),
    **dict.fromkeys(("num_mel_bins",), 16),
}
VOCABULARY = 512
# Sizes made small only where the config made small by _SMALL alone does not run its forward
# (transformers_model's probe): rows that ran keep their sizes. Each is a variant tried in turn.
# - "head": the sizes of a head's parts (rotary, MLA's rope/nope/value parts), which the head
#   size of _SMALL leaves larger than the head (GPT-J, CodeGen, DeepSeek-V2/V3's attention),
#   and as many key/value heads as query heads where the default config has as many;
# - "keep hidden_dim": `hidden_dim` as the default config has it, where a model derives the
#   layer it sizes from other numbers (EfficientNet's top convolution: round_filters(1280)).
_HEAD_PARTS = dict.fromkeys(("rotary_dim", "qk_rope_head_dim", "qk_nope_head_dim",
                             "v_head_dim", "rope_head_dim"), 16)
# - "mel bins": an audio model's input features with as many bins as its sub-config (its audio
#   encoder's) says, where the model's own config does not; "…, time first": (batch, time, bins),
#   the layout of Parakeet's and the other conformer encoders (Whisper's is (batch, bins, time));
#   "time first" alone: that layout where the model's own config says its bins;
# - "image tokens N": a model of text and images whose forward wants as many image tokens in
#   `input_ids` as its images have features (its message says how many: N a sample), the
#   image token made one of the small vocabulary's where the default is beyond it.
# - "mrope N": multimodal rotary sections (Qwen2-VL's, GLM-4V's) summing to N, the small
#   head's rotary half the model's message names.
# - "image grid": a Qwen-VL-style vision encoder's inputs, patches flattened with their grid
#   (`pixel_values` or `hidden_states` of (patches, channels × temporal patch × patch²) and
#   `image_grid_thw`/`grid_thw` of (1, 2·merge, 2·merge) an image: 4 merged tokens), as many
#   image tokens in `input_ids` as the grid merges to, and the vision encoder's output width
#   (`out_hidden_size`) the text's hidden size; with "mrope N" where the model then asks for
#   it ("image grid, mrope N"). Tried where the modeling modules name `grid_thw`.
# - "layer kinds": a hybrid's few layers with every kind of layer its default config has
#   (_keep_layer_kinds), where the first layers are all of one kind (linear attention, Mamba,
#   convolutions) and its training step's forward, with a cache, asks for an attention layer
#   ("`get_seq_length` can only be called on Attention layers": Jamba, Qwen3.5, LFM3); tried
#   first for the step, after "image grid" where that forward asks for it too, and for a
#   forward last of all and only on that message (MiniCPM-V 4.6, whose text config keeps its
#   cache); a pattern of kinds the layers repeat (RecurrentGemma's `block_types`) too; "head,
#   expert groups, layer kinds" where the kept MoE layer's router needs its groups (Bailing's).
# - "keep hidden_sizes": a backbone's `hidden_sizes` as the default config has them, where
#   the stages' channels are other lists (HGNetV2's stage_out_channels: D-FINE, DEIMv2) and
#   the detector reads its input channels from hidden_sizes; "…, queries": a detector's
#   `num_queries` no more than _QUERIES, where its top-k over a small image's anchors (84 at
#   64 pixels and strides 8, 16, 32) asks for more than there are.
# - "own backbone": the config made with `use_timm_backbone=False`, transformers' own backbone
#   (DETR's ResNet) in place of timm's, for a venv without timm (`make cuda-torch-venv` has
#   it since 2026-11-30); tried only where the default config's backbone is timm's (a
#   sub-config of model type timm_backbone);
# - "more sizes": a size _SMALL names, or the vocabulary, that the default config leaves unset
#   (None: Hunyuan's head_dim, ESM's vocabulary, dots1's and DiffusionGemma's experts) made
#   the small value, and a convolution's groups (`..._groups`, Mimi's upsample_groups 512) no
#   more than the small hidden size they divide; likewise a few sizes _SMALL does not name
#   (_UNSET), and the padding token (ESM's embedding needs one); tried last of all but one;
# - "audio channels": a waveform's `input_values` as (batch, channels, samples), the channels
#   the config's `audio_channels` or 1 (an audio codec's convolutions: DAC, Mimi, EnCodec),
#   tried last, where the modeling modules name `input_values` (with "more sizes" too where
#   that differs: "more sizes, audio channels").
# - "backbone layers": a backbone sub-config keeps as many layers as its largest `out_indices`
#   names (Depth Anything's DINOv2 stages 9-12: made 2 layers, the neck got no features), and
#   the neck's `reassemble_hidden_size` is the backbone's width; tried last.
# - "positions": as many tokens as the text's `max_position_embeddings` where that is fewer
#   than SEQUENCE (OWL-ViT's text: 16 positions); tried last.
# - "derived sizes": a size the default config derives from a width (`projection_size`,
#   `encoder_hidden_size`, `cross_attention_hidden_size`: SigLIP, BLIP-2, T5Gemma) follows
#   the width made small (_follow_widths); tried last of all.
# Inputs: where a forward's input is none the branches of transformers_inputs make, it is made
# as the forward's docstring shapes it (Note [Inputs from the forward's docstring]); and
# - "documented inputs": every input the docstring shapes made so, where the referee's own
#   make differ (MusicGen's decoder: `input_ids` of (batch_size * num_codebooks,
#   sequence_length)); tried last of all, its config the plain one.
_UNSET = {"top_k_experts": 2, "n_shared_experts": 1}


def _positions(config):
    """The text's positions where fewer than SEQUENCE (VARIANTS' "positions"), else None."""
    text = getattr(config, "text_config", None) or config
    positions = getattr(text, "max_position_embeddings", None)
    return positions if isinstance(positions, int) and 0 < positions < SEQUENCE else None


def _tokens(config, variant):
    """Tokens a sample: SEQUENCE, or the text's positions with "positions"."""
    return (_positions(config) or SEQUENCE) if _part(variant, "positions") else SEQUENCE
_QUERIES = 16
VARIANTS = ("", "head", "keep hidden_dim", "mel bins", "mel bins, time first",
            "keep hidden_sizes",  # tried last, so that no model that ran takes another one
            "derived sizes")  # after every older one (transformers_variant puts it last)
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers",
           "encoder_layers")  # the first a config has counts its layers (per-layer lists)
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
              "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id")


def _small(name, value):
    """A size made small by its attribute name, or the value as it is."""
    if name in _SMALL and isinstance(value, int) and not isinstance(value, bool):
        return min(value, _SMALL[name]) if name != "image_size" else _SMALL[name]
    return value


def shrink(config, depth=0, per_layer_lists=False, variant=""):
    """The config made small in place, by attribute name (not per model), sub-configs too.

    A heterogeneous config (transformers' per-layer configs: `per_layer_config`, whose
    attributes cannot be read globally) is made small consistently: its per-layer overrides
    are taken off, the global values made small, then the overrides of the layers left put back,
    each made small by the same names. With `per_layer_lists`, a list as long as the layers
    (`layer_types`, a per-layer `intermediate_size`) is cut to the layers left, its sizes made
    small (build() asks for it only where the config as shrunk before does not build, so that
    every model that built keeps its size). `variant` (one of VARIANTS) adds a rule that
    transformers_model takes only where the config without it does not run."""
    from transformers import PretrainedConfig

    default = copy_config(config) if depth == 0 and _part(variant, "derived sizes") else None
    spec = vars(config).get("_heterogeneity_spec")
    overrides = None
    if spec is not None:
        overrides = {int(index): dict(values)
                     for index, values in spec.per_layer_overrides.items()}
        config.per_layer_config = None  # homogeneous while it is made small
    heads_before = {name: vars(config)[name] for name in
                    ("num_attention_heads", "num_key_value_heads", "n_kv_heads", "num_kv_heads")
                    if isinstance(vars(config).get(name), int)} or None
    layers_before = next((vars(config)[name] for name in _LAYERS
                          if isinstance(vars(config).get(name), int)), None)
    parts_before = [vars(config).get(name) for name in ("head_dim", "qk_nope_head_dim",
                                                        "qk_rope_head_dim")]
    for name in list(vars(config)):
        value = getattr(config, name, None)
        if isinstance(value, PretrainedConfig) and depth < 3:
            shrink(value, depth + 1, per_layer_lists, variant)
        elif f"keep {name}" in variant.split(", "):
            continue  # a size the variant keeps as the default config has it
        elif _part(variant, "queries") and name == "num_queries" and isinstance(value, int):
            setattr(config, name, min(value, _QUERIES))
        elif _part(variant, "head") and name in _HEAD_PARTS and isinstance(value, int) \
                and not isinstance(value, bool):
            setattr(config, name, min(value, _HEAD_PARTS[name]))
        elif name in _SMALL and isinstance(value, int) and not isinstance(value, bool):
            small = _SMALL[name]
            setattr(config, name, min(value, small) if name != "image_size" else small)
        elif name == "vocab_size" and isinstance(value, int):
            setattr(config, name, min(value, VOCABULARY))
        elif _part(variant, "more sizes") and value is None and (
                name in _SMALL or name in _UNSET or name in ("vocab_size", "pad_token_id")):
            small = {**_UNSET, "vocab_size": VOCABULARY, "pad_token_id": 0}
            setattr(config, name, _SMALL.get(name, small.get(name)))  # unset by default
        elif name in ("depths", "depth") and isinstance(value, list):
            setattr(config, name, [1 for _ in value])
        elif name in ("hidden_sizes", "embed_dims", "hidden_dims") and isinstance(value, list):
            setattr(config, name, [16 * 2 ** i for i in range(len(value))])
        elif name in ("num_heads", "num_attention_heads") and isinstance(value, list):
            setattr(config, name, [1 for _ in value])
    if _part(variant, "head") and isinstance(vars(config).get("qk_head_dim"), int):
        # MLA's query/key head: its rope and nope parts (DeepSeek-V3's config derives it so).
        config.qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
    if _part(variant, "head") and all(isinstance(size, int) for size in parts_before):
        _mla_head(config, *parts_before, variant)
    if _part(variant, "head"):
        _ssm_heads(config)
    if _part(variant, "backbone layers"):
        _backbone_layers(config)
    width = vars(config).get("hidden_size")
    if _part(variant, "more sizes") and isinstance(width, int):
        for name, value in list(vars(config).items()):
            if name.endswith("_groups") and isinstance(value, int) and value > width:
                setattr(config, name, width)  # groups the small channels divide into
    mrope = _part(variant, "mrope ")
    if mrope and isinstance(vars(config).get("rope_parameters"), dict):
        # Multimodal rotary sections (Qwen2-VL's kind, [8, 12, 12] of a 64-wide rotary half
        # by default) made to sum to the small head's half, as the model's message says.
        total = int(mrope.split()[1])
        sections = config.rope_parameters.get("mrope_section") or [8, 12, 12]
        scaled = [max(1, value * total // sum(sections)) for value in sections[:-1]]
        config.rope_parameters["mrope_section"] = scaled + [total - sum(scaled)]
    if (_part(variant, "image tokens") or _part(variant, "image grid")) and depth == 0:
        text = getattr(config, "text_config", None) or config
        vocabulary = getattr(text, "vocab_size", None)
        for name in _IMAGE_TOKEN:
            value = vars(config).get(name)
            if isinstance(value, int) and isinstance(vocabulary, int) and value >= vocabulary:
                setattr(config, name, vocabulary - 2)  # a token the embedding has
        for offset, name in enumerate(_VISION_MARKS, start=3):
            value = vars(config).get(name)
            if isinstance(value, int) and isinstance(vocabulary, int) and value >= vocabulary:
                setattr(config, name, vocabulary - offset)  # one token each, not the image's
    if _part(variant, "image grid") and depth == 0:
        text = getattr(config, "text_config", None) or config
        width = getattr(text, "hidden_size", None)
        for sub in [config, *vars(config).values()]:
            if isinstance(sub, PretrainedConfig) and isinstance(width, int) and isinstance(
                    vars(sub).get("out_hidden_size"), int):
                sub.out_hidden_size = width  # the merger's output, as wide as the text
    if _part(variant, "head") and heads_before is not None:
        for name in ("num_key_value_heads", "n_kv_heads", "num_kv_heads"):
            if heads_before.get(name) == heads_before.get("num_attention_heads"):
                setattr(config, name, config.num_attention_heads)  # no grouped query heads
    layers = next((vars(config)[name] for name in _LAYERS
                   if isinstance(vars(config).get(name), int)), None)
    if _part(variant, "layer kinds") and layers_before and layers is not None:
        layers = _keep_layer_kinds(config, layers_before, layers)
    if per_layer_lists and layers_before and layers is not None and layers < layers_before:
        for name, value in list(vars(config).items()):
            if isinstance(value, list) and len(value) == layers_before:
                setattr(config, name, [_small(name, item) for item in value[:layers]])
    if overrides is not None:
        config.per_layer_config = {
            index: {name: _small(name, value) for name, value in values.items()}
            for index, values in overrides.items() if layers is None or index < layers}
    vocabulary = getattr(config, "vocab_size", None)
    if isinstance(vocabulary, int):
        for name in _TOKEN_IDS:
            value = getattr(config, name, None)
            if isinstance(value, int) and value >= vocabulary:
                setattr(config, name, vocabulary - 1)
    if default is not None:
        _follow_widths(default, config)
    return config


# The widths _SMALL makes small (VARIANTS' "derived sizes": the sizes derived from them follow).
_WIDTHS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim")


def _sub_configs(config, depth=0):
    """The config and its sub-configs, three deep, in one list (a config before its own)."""
    from transformers import PretrainedConfig

    subs = [sub for sub in vars(config).values() if isinstance(sub, PretrainedConfig)]
    found = [config]
    for sub in subs if depth < 3 else ():
        found += _sub_configs(sub, depth + 1)
    return found


def _follow_widths(default, config):
    """VARIANTS' "derived sizes": a size the default config derives from a width (a sub-config's
    `encoder_hidden_size` the vision config's `hidden_size`, as BLIP-2's config sets it; a text
    config's `projection_size` its own hidden size, SigLIP's; T5Gemma's decoder's
    `cross_attention_hidden_size` the encoder's), which the shrinker, going by name, left at
    its default, takes the small value of the width it equalled by default: one of the same
    config before another's. A size, here: an integer attribute named `..._size`, `..._dim` or
    `..._channels` that the shrinker did not change."""
    before, after = _sub_configs(default), _sub_configs(config)
    if len(before) != len(after):
        return
    widths = [(index, vars(old)[name], vars(new)[name])
              for index, (old, new) in enumerate(zip(before, after)) for name in _WIDTHS
              if isinstance(vars(old).get(name), int) and vars(new).get(name) != vars(old)[name]]
    for index, (old, new) in enumerate(zip(before, after)):
        for name, value in vars(old).items():
            if not (name.endswith(("_size", "_dim", "_channels")) and isinstance(value, int)
                    and not isinstance(value, bool) and vars(new).get(name) == value):
                continue
            followed = sorted((other != index, small) for other, large, small in widths
                              if large == value)
            if followed:
                setattr(new, name, followed[0][1])


def _mla_head(config, head, nope, rope, variant):
    """VARIANTS' "head" on an MLA config whose default sizes (head, nope, rope) another size
    derives from, kept so derived: `head_dim` the nope and rope parts together where it was
    (Mistral 4's), the rotary fraction of `rope_parameters` (each layer type's) the rope part of
    the head where it was (dots.3's 0.25 of 256); and a router's experts a token where the
    default config leaves it unset but has routed experts (DeepSeek-V2's None: top-k of None),
    and with "head, expert groups" (where "head" alone fails on the router's groups)
    its expert groups of two experts at least."""
    if head == nope + rope:
        config.head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
    parameters = vars(config).get("rope_parameters")
    nested = list(parameters.values()) if isinstance(parameters, dict) else []
    for each in [parameters, *nested]:
        if isinstance(each, dict) and isinstance(each.get("partial_rotary_factor"), float) \
                and each["partial_rotary_factor"] * head == rope:
            each["partial_rotary_factor"] = config.qk_rope_head_dim / config.head_dim
    experts = vars(config).get("n_routed_experts")
    if vars(config).get("num_experts_per_tok", 0) is None and isinstance(experts, int):
        config.num_experts_per_tok = _SMALL["num_experts_per_tok"]
    if _part(variant, "expert groups"):
        _expert_groups(config)


# A router's (experts, expert groups, experts a token takes) by their attribute names: DeepSeek-V3's
# kind, then Bailing's (whose `num_experts_per_token` _SMALL does not name).
_EXPERT_GROUPS = (("n_routed_experts", "n_group", None),
                  ("num_experts", "num_expert_group", "num_experts_per_token"))


def _expert_groups(config):
    """VARIANTS' "expert groups": the router's expert groups (A.X K1's 8 of 192, Bailing's 8 of
    512) of two experts each at least (it scores a group by its top two), the groups it keeps
    no more than those, and the experts a token takes no more than _SMALL's top-k."""
    for experts, groups, per_token in _EXPERT_GROUPS:
        count, group = vars(config).get(experts), vars(config).get(groups)
        if not (isinstance(count, int) and isinstance(group, int) and 2 * group > count):
            continue
        setattr(config, groups, max(1, count // 2))
        if isinstance(vars(config).get("topk_group"), int):
            config.topk_group = min(config.topk_group, getattr(config, groups))
        if per_token and isinstance(vars(config).get(per_token), int):
            setattr(config, per_token, min(getattr(config, per_token),
                                           _SMALL["num_experts_per_tok"]))
        return


# A state-space mixer's (heads, head size, expansion, groups) by their attribute names (Mamba-2's;
# Bamba's and GraniteMoeHybrid's mamba_ ones).
_SSM_HEADS = (("num_heads", "head_dim", "expand", "n_groups"),
              ("mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups"))


def _ssm_heads(config):
    """VARIANTS' "head" on a state-space mixer: heads × head size = expansion × hidden size,
    as its forward views them (Mamba-2's 128 × 64 = 2 × 4096 by default), the heads at most
    _SMALL's, the groups at most the heads."""
    width = vars(config).get("hidden_size")
    for heads, head, expand, groups in _SSM_HEADS:
        values = [vars(config).get(name) for name in (heads, head, expand, groups)]
        if not isinstance(width, int) or not all(isinstance(value, int) for value in values):
            continue
        count = min(values[0], _SMALL["num_heads"])
        if (values[2] * width) % count == 0:
            setattr(config, heads, count)
            setattr(config, head, values[2] * width // count)
            setattr(config, groups, min(values[3], count))


def _backbone_layers(config):
    """VARIANTS' "backbone layers" (see there)."""
    from transformers import PretrainedConfig

    for sub in vars(config).values():
        indices = getattr(sub, "out_indices", None) if isinstance(sub, PretrainedConfig) \
            else None
        layers = vars(sub).get("num_hidden_layers") if indices else None
        if isinstance(layers, int) and all(isinstance(index, int) for index in indices):
            sub.num_hidden_layers = max(layers, *indices)
            if isinstance(vars(config).get("reassemble_hidden_size"), int) and isinstance(
                    vars(sub).get("hidden_size"), int):
                config.reassemble_hidden_size = sub.hidden_size


def _keep_layer_kinds(config, layers_before, layers):
    """VARIANTS' "layer kinds": the few layers left take every kind of layer the default
    config has (a hybrid's attention beside its linear-attention, Mamba or convolution layers),
    where cutting its per-layer kinds to the first layers leaves a kind out: each kind list
    (`layer_types`, `mlp_layer_types`: one name a layer) keeps its first layers, the last of a
    kind already there giving way to each kind they lack, as many layers as the list with the
    most kinds needs (the layer count raised to it); a kind placed by period and offset (Jamba's `attn_layer_period` 8, offset 4)
    falls on the last layer; a pattern of kinds that the layers repeat (_kind_pattern:
    RecurrentGemma's `block_types`, recurrent, recurrent, attention) is cut the same way, so
    that the layers left repeat every kind. The layer count, as it now is."""
    lists = {name: value for name, value in vars(config).items() if isinstance(value, list)
             and value and all(isinstance(item, str) for item in value)
             and (len(value) == layers_before or _kind_pattern(name, value, layers_before))}
    needed = max([layers] + [len(dict.fromkeys(value)) for value in lists.values()])
    for name, value in lists.items():
        kept = value[:needed]
        for kind in dict.fromkeys(value):
            if kind not in kept:  # in place of the last layer whose kind another one has too
                last = max(index for index, item in enumerate(kept) if kept.count(item) > 1)
                kept[last] = kind
        setattr(config, name, kept)
    if needed > layers:
        name = next(name for name in _LAYERS if isinstance(vars(config).get(name), int))
        setattr(config, name, needed)
    for name, value in list(vars(config).items()):
        period = name.replace("_offset", "_period")
        if name.endswith("_layer_offset") and isinstance(value, int) and value >= needed \
                and isinstance(vars(config).get(period), int):
            setattr(config, name, needed - 1)
            setattr(config, period, needed)
    return needed


def _image_size(config):
    for holder in (config, getattr(config, "vision_config", None)):
        size = getattr(holder, "image_size", None) if holder is not None else None
        if size is not None:
            return tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    return (64, 64)


def transformers_inputs(model, config, batch, variant=""):
    """The forward's keyword inputs, from the model's main input name; ValueError otherwise."""
    import torch

    name = model.main_input_name
    parameters = inspect.signature(model.forward).parameters
    first = next(iter(parameters.values()), None)
    if name not in parameters and first is not None and first.default is first.empty and \
            first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
        # The class's main input (PreTrainedModel's "input_ids" by default) is not what its
        # forward takes first and cannot go without (a vision or audio encoder alone): that.
        name = first.name
    text = getattr(config, "text_config", None) or config
    vocabulary = getattr(text, "vocab_size", None) or _sub_config_vocabulary(config)
    tokens = _tokens(config, variant)
    if name == "input_ids":
        inputs = {"input_ids": torch.randint(0, vocabulary, (batch, tokens))}
    elif name in ("pixel_values", "image"):  # "image": BridgeTower's vision encoder's
        channels = getattr(config, "num_channels", None) or getattr(
            getattr(config, "vision_config", None), "num_channels", 3)
        inputs = {name: torch.randn(batch, channels, *_image_size(config))}
    elif name == "input_values" and _part(variant, "audio channels"):
        channels = getattr(config, "audio_channels", None) or 1
        inputs = {"input_values": torch.randn(batch, channels, 4000)}
    elif name == "input_values":
        inputs = {"input_values": torch.randn(batch, 4000)}
    elif name == "input_features":
        bins = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        if variant.startswith("mel bins"):  # an audio encoder's sub-config says them
            bins = _sub_config_mel_bins(config) or bins
        length = 2 * getattr(config, "max_source_positions", 64)
        shape = (batch, length, bins) if _part(variant, "time first") else (batch, bins, length)
        inputs = {"input_features": torch.randn(*shape)}
    elif name in _EMBEDDINGS and isinstance(getattr(text, "hidden_size", None), int):
        # Embeddings in place of tokens (an encoder fed another's output): SEQUENCE of them.
        inputs = {name: torch.randn(batch, SEQUENCE, text.hidden_size)}
    elif name == "past_values" and isinstance(getattr(config, "context_length", None), int):
        # A time series (PatchTST's kind): its context, as many channels as the config says.
        inputs = {name: torch.randn(batch, config.context_length,
                                    getattr(config, "num_input_channels", 1))}
    elif name == "spectrogram" and isinstance(getattr(config, "model_in_dim", None), int):
        inputs = {name: torch.randn(batch, SEQUENCE, config.model_in_dim)}  # a vocoder's input
    else:
        made = _documented_input(model, config, name, batch)
        if made is None:
            raise ValueError(f"main input {name!r}: the referee makes no such input")
        inputs = {name: made}
    # A model of text and images (CLIP and its kind) takes both, whichever is its main input.
    if "pixel_values" in parameters and "pixel_values" not in inputs and \
            getattr(config, "vision_config", None) is not None:
        vision = config.vision_config
        inputs["pixel_values"] = torch.randn(batch, getattr(vision, "num_channels", 3),
                                             *_image_size(config))
    if "input_ids" in parameters and "input_ids" not in inputs and \
            getattr(config, "text_config", None) is not None:
        inputs["input_ids"] = torch.randint(0, vocabulary, (batch, tokens))
    sizes = parameters.get("image_sizes")
    if sizes is not None and sizes.default is sizes.empty and "pixel_values" in inputs:
        # Each image's (height, width), where the forward cannot go without (Emu3's VQ-VAE).
        inputs["image_sizes"] = torch.tensor([list(inputs["pixel_values"].shape[-2:])] * batch)
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = torch.randint(0, vocabulary, (batch, SEQUENCE // 2))
    for parameter in parameters.values():
        if parameter.name not in inputs and parameter.default is parameter.empty and \
                parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            # An input the forward cannot go without and none of the above made: as its
            # docstring shapes it (a forward missing it raised before, so no row that ran moves).
            made = _documented_input(model, config, parameter.name, batch)
            if made is not None:
                inputs[parameter.name] = made
    if _part(variant, "documented inputs"):
        for name in list(inputs):  # every input its docstring shapes, as it shapes it
            made = _documented_input(model, config, name, batch)
            if made is not None:
                inputs[name] = made
    tokens = _part(variant, "image tokens")
    count = int(tokens.rsplit(" ", 1)[1]) if tokens else None
    if _part(variant, "image grid"):
        inputs.pop("pixel_values", None)
        grid, count = _grid_inputs(model, config, batch, variant)
        inputs.update(grid)
        if "input_ids" not in parameters:
            inputs.pop("input_ids", None)  # a vision encoder alone
    if count is not None and "input_ids" in inputs:
        # A sample's image tokens, as many as its image has features (the model's message, or
        # the grid's), between the vision start and end tokens where the config has them.
        token = _image_token(config)
        ids = torch.randint(0, vocabulary, (batch, max(SEQUENCE, count + 8)))
        marks = [vars(config).get(name) if _part(variant, "image grid") else None
                 for name in _VISION_MARKS]  # the rows "image tokens N" took keep their ids
        for special in [token, *marks]:
            if isinstance(special, int):
                ids[ids == special] = 0
        ids[:, 1:1 + count] = token
        if isinstance(marks[0], int) and isinstance(marks[1], int):
            ids[:, 0], ids[:, 1 + count] = marks[0], marks[1]
        inputs["input_ids"] = ids
        if _part(variant, "image grid") and "mm_token_type_ids" in parameters:
            inputs["mm_token_type_ids"] = (ids == token).int()  # 1 an image's token, 0 text's
    return inputs


# Note [Inputs from the forward's docstring]
# A forward whose input the branches of transformers_inputs do not know (a main input such as
# Gemma 3n's `audio_mel` or VideoPrism's `pixel_values_videos`, or an input it cannot go
# without beside its main one: Idefics2's perceiver's `context` and `attention_mask`) gets
# one as transformers documents it: the shape its forward's docstring gives after the name
# ("audio_mel: a torch.Tensor of shape [batch, num_frames, num_channels, mel_bins]"), each
# dimension sized by its name (_DIMENSION: the batch, SEQUENCE tokens, the image's pixels, a
# grid of patches), else by the config's attribute of that name ("state_dim",
# "config.block_size"), a product of such names ("num_channels x patch_height x
# patch_width") multiplied out; token ids (a name ending in "_ids") drawn from the smallest
# vocabulary the config names, a mask (a name holding "mask") all ones (every position given:
# the card and the estimate see the same values, and a forward's memory does not follow
# them), anything else random. A shape the docstring does not give, or a dimension no rule
# sizes, makes no input (the row says the forward's own error, as before). Only inputs that
# were never made before are made so: no row that ran changes.
_DIMENSION = {
    **dict.fromkeys(("batch", "batch_size", "num_audios", "num_images", "num_crops"), "batch"),
    **dict.fromkeys(("seq_len", "sequence_length", "seq_length", "episode_length",
                     "num_frames", "max_num_frames", "num_tokens", "num_patches", "prompt_len",
                     "number_of_previous_accepted_tokens", "target_sequence_length",
                     "num_queries"), "tokens"),
    **dict.fromkeys(("height", "width", "frame_size", "image_size"), "pixels"),
    **dict.fromkeys(("grid_height", "grid_width"), "patches"),
    **dict.fromkeys(("patch_height", "patch_width"), "patch"),
    **dict.fromkeys(("embed_dim", "dim", "d_model", "hidden_size"), "width"),
}
_DOCUMENTED_SHAPE = r"^\s*{name}\b[^\n]*?\bshape\W*?([(\[])"  # up to the shape's bracket


def _documented_input(model, config, name, batch):
    """The input `name` of the model's forward as its docstring shapes it, or None (Note
    [Inputs from the forward's docstring])."""
    import torch

    doc = model.forward.__doc__ or ""
    found = re.search(_DOCUMENTED_SHAPE.format(name=re.escape(name)), doc, re.MULTILINE)
    if not found:
        return None
    depth, end = 0, None  # the shape's closing bracket: "(a, b * len(c))" holds brackets
    for end in range(found.start(1), min(len(doc), found.start(1) + 200)):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(doc[end], 0)
        if depth == 0:
            break
    if depth != 0:
        return None
    sizes = [_dimension(config, batch, part) for part in
             re.split(r",(?![^(]*\))", doc[found.start(1) + 1:end])]
    if not sizes or any(size is None for size in sizes):
        return None
    if name.endswith("_ids"):
        return torch.randint(0, _smallest_vocabulary(config), tuple(sizes))
    if "mask" in name:
        return torch.ones(*sizes, dtype=torch.long)
    return torch.randn(*sizes)


def _dimension(config, batch, text):
    """One dimension of a documented shape, sized by its name(s) (see the Note), or None."""
    size = 1
    for factor in re.split(r"\s+[x*]\s+", text.strip()):
        factor = factor.strip().removeprefix("config.")
        counted = re.fullmatch(r"len\((?:config\.)?(\w+)\)", factor)
        if counted:  # as many as a list of the config has
            value = _config_value(config, counted.group(1))
            value = len(value) if isinstance(value, (list, tuple)) else None
        elif _DIMENSION.get(factor) != "batch" and isinstance(
                _config_value(config, factor), int):  # the config's own size of that name
            value = _config_value(config, factor)
        elif _DIMENSION.get(factor) == "batch":
            value = batch
        elif _DIMENSION.get(factor) == "tokens":
            value = SEQUENCE
        elif _DIMENSION.get(factor) == "pixels":
            value = _image_size(config)[0]
        elif _DIMENSION.get(factor) == "patches":
            patch = _config_value(config, "patch_size")
            value = _image_size(config)[0] // patch if isinstance(patch, int) else None
        elif _DIMENSION.get(factor) == "patch":
            value = _config_value(config, "patch_size")
        else:
            value = _config_value(config, "hidden_size") \
                if _DIMENSION.get(factor) == "width" else None
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return None
        size *= value
    return size


def _config_value(config, name):
    """The config's attribute `name`, or its first sub-config's that has one (a model of text
    and images: the vision config's `num_channels`), or None."""
    from transformers import PretrainedConfig

    for holder in [config, *(sub for sub in vars(config).values()
                             if isinstance(sub, PretrainedConfig))]:
        value = vars(holder).get(name)
        if value is not None and not isinstance(value, bool):
            return value
    return None


def _smallest_vocabulary(config):
    """The fewest tokens any `...vocab_size` of the config names (VOCABULARY at most)."""
    return min([VOCABULARY] + [value for name, value in vars(config).items()
                               if name.endswith("vocab_size") and isinstance(value, int)
                               and not isinstance(value, bool) and value > 0])


def _sub_config_vocabulary(config):
    """The tokens a config without `vocab_size` takes: VOCABULARY, or fewer where a sub-config
    (not named text_config: FastSpeech2 with HiFi-GAN's `model_config`, 78) has fewer."""
    from transformers import PretrainedConfig

    return min([VOCABULARY] + [sub.vocab_size for sub in vars(config).values()
                               if isinstance(sub, PretrainedConfig)
                               and isinstance(getattr(sub, "vocab_size", None), int)])


_IMAGE_TOKEN = ("image_token_id", "image_token_index")
_EMBEDDINGS = ("inputs_embeds", "hidden_states", "noise_embeds", "query_embeds")  # (batch, tokens, hidden size)
# The tokens around an image's (Qwen2-VL's rope index finds an image by its start token).
_VISION_MARKS = ("vision_start_token_id", "vision_end_token_id")


def _part(variant, prefix):
    """The part of a variant ("image grid, mrope 8": two) that begins with `prefix`, or None."""
    return next((part for part in variant.split(", ") if part.startswith(prefix)), None)


def _grid_inputs(model, config, batch, variant):
    """A Qwen-VL-style vision encoder's inputs (VARIANTS' "image grid"): {pixels' name: the
    patches flattened, grid's name: (batch, 3) of t, h, w}, and the image tokens a sample
    merges to."""
    import torch

    parameters = inspect.signature(model.forward).parameters
    vision = getattr(config, "vision_config", None) or config
    patch = getattr(vision, "patch_size", 14)
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    temporal = getattr(vision, "temporal_patch_size", None) or 1
    channels = next((getattr(vision, name) for name in ("in_channels", "num_channels", "in_chans")
                     if isinstance(getattr(vision, name, None), int)), 3)
    merge = getattr(vision, "spatial_merge_size", None) or getattr(
        vision, "merge_kernel_size", None) or 1
    merge = merge[0] if isinstance(merge, (list, tuple)) else merge
    side = 2 * merge  # patches a side: 2 merged tokens a side, 4 an image
    pixels = "hidden_states" if "hidden_states" in parameters and \
        "pixel_values" not in parameters else "pixel_values"
    grid = "grid_thw" if "grid_thw" in parameters else "image_grid_thw"
    shape = (channels, patch, patch) if _part(variant, "patches") else (
        channels * temporal * patch * patch,)  # "patches": each patch an image (Kimi, Paddle)
    return ({pixels: torch.randn(batch * side * side, *shape),
             grid: torch.tensor([[1, side, side]] * batch)}, side * side // (merge * merge))


def _image_token(config):
    return next((vars(config)[name] for name in _IMAGE_TOKEN
                 if isinstance(vars(config).get(name), int)), None)


# Where a model type has no base model in MODEL_MAPPING_NAMES, the first of these auto mappings
# that names a class for it (then the others, by name), else its package's own model class.
_OTHER_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                   "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                   "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                   "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                   "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
                   "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
                   "MODEL_FOR_BACKBONE_MAPPING_NAMES")
BUILT = {}  # how the last transformers model was built, where not by AutoModel (the row says)


def model_class(model_type, config):
    """(class, how) for a model type without a base model in MODEL_MAPPING_NAMES: the class
    another auto mapping names for it, else the model class its package's modeling modules
    define for its config class (a `...Model` before others, no task head, not the
    PreTrainedModel base); ValueError when neither has one."""
    import importlib
    import inspect as inspection
    import pkgutil

    import transformers
    from transformers.models.auto import modeling_auto

    mappings = list(_OTHER_MAPPINGS) + sorted(
        name for name in dir(modeling_auto) if name.endswith("_MAPPING_NAMES")
        and name.startswith("MODEL_FOR_") and name not in _OTHER_MAPPINGS)
    for mapping in mappings:
        name = getattr(modeling_auto, mapping, {}).get(model_type)
        if isinstance(name, str) and hasattr(transformers, name):
            return getattr(transformers, name), f"{name} ({mapping})"
    package = importlib.import_module(type(config).__module__.rsplit(".", 1)[0])
    classes, failed = [], []
    for found in sorted(pkgutil.iter_modules(package.__path__), key=lambda found: found.name):
        if not found.name.startswith("modeling_"):  # PyTorch modules (no tf_ or flax_ here)
            continue
        try:
            module = importlib.import_module(f"{package.__name__}.{found.name}")
        except ImportError as error:
            failed.append(f"{found.name}: {last_line(error)}")
            continue
        classes += [value for value in vars(module).values()
                    if inspection.isclass(value) and value.__module__ == module.__name__
                    and getattr(value, "config_class", None) is type(config)
                    and not value.__name__.endswith("PreTrainedModel")
                    and "For" not in value.__name__]
    classes.sort(key=lambda value: (not value.__name__.endswith("Model"), len(value.__name__),
                                    value.__name__))
    if not classes:
        raise ValueError(f"no model class for {type(config).__name__} in transformers' auto "
                         f"mappings or in {package.__name__}'s modeling modules"
                         + (f" ({'; '.join(failed)})" if failed else ""))
    return classes[0], f"{classes[0].__name__} ({classes[0].__module__.rsplit('.', 1)[-1]})"


def transformers_model(model_type, attention, variant=""):
    """The model type's model, from its default config made small (shrink, with `variant`'s
    rule); where the config so made does not build a model, made small again with its
    per-layer lists cut (shrink's per_layer_lists), which only a config that did not build
    takes."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    def made(config):
        try:
            return built(config, attention)
        except ValueError as error:
            eager = _without_sdpa(config, error) if attention == "sdpa" else []
            if not eager:
                raise
        # A part whose class has no sdpa (D-FINE's HGNetV2 backbone) takes eager, the model's
        # own attention sdpa, as transformers lets a user ask: the row says which.
        BUILT["eager"] = eager
        return built(config, {"": "sdpa", **dict.fromkeys(eager, "eager")})

    def built(config, attention):
        if model_type in MODEL_MAPPING_NAMES:
            return _forward_of(transformers.AutoModel.from_config(
                config, attn_implementation=attention))
        cls, how = model_class(model_type, config)
        BUILT["class"] = how
        return _forward_of(cls._from_config(config, attn_implementation=attention))

    BUILT.clear()
    config = _default_config(model_type, variant)
    try:
        shrink(config, variant=variant)
        return made(config), config
    except Exception as first:  # noqa: BLE001 - the per-layer lists may be why
        config = _default_config(model_type, variant)
        try:
            shrink(config, per_layer_lists=True, variant=variant)
            model = made(config)
        except Exception:  # noqa: BLE001 - not why: the first error says what failed
            raise first from None
        BUILT["per_layer_lists"] = True
        return model, config


def _forward_of(model):
    """The model, its `encode` its forward where its class leaves forward unimplemented (a
    VQ-VAE of Chameleon, Emu3, GLM-Image: encode and decode only, the encoder what a forward of
    its images runs); the row says so (built: forward)."""
    import torch

    if type(model).forward is torch.nn.Module.forward and callable(
            getattr(model, "encode", None)):
        model.forward = model.encode
        BUILT["forward"] = "encode"
    return model


def _default_config(model_type, variant=""):
    """The model type's default config, with transformers' own backbone for "own backbone"."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if _part(variant, "own backbone"):
        return CONFIG_MAPPING[model_type](use_timm_backbone=False)
    return CONFIG_MAPPING[model_type]()


def _timm_backbone(config):
    """Whether the config's backbone is timm's (a sub-config of model type timm_backbone)."""
    from transformers import PretrainedConfig

    return any(isinstance(sub, PretrainedConfig) and sub.model_type == "timm_backbone"
               for sub in vars(config).values())


def _without_sdpa(config, error):
    """The sub-configs (their attribute names) whose model class transformers' message says has
    no sdpa ("HGNetV2Backbone does not support an attention implementation through ..."): []
    where the message is another's or names the model's own class (the row is absent then)."""
    import transformers
    from transformers import PretrainedConfig

    found = re.match(r"(\w+) does not support an attention implementation", str(error))
    cls = getattr(transformers, found.group(1), None) if found else None
    wanted = getattr(cls, "config_class", None)
    return [name for name, sub in vars(config).items()
            if isinstance(sub, PretrainedConfig) and wanted is not None
            and isinstance(sub, wanted)]


def _sub_config_mel_bins(config):
    """The mel bins a sub-config says where the config itself does not (None otherwise)."""
    from transformers import PretrainedConfig

    if isinstance(getattr(config, "num_mel_bins", None), int):
        return None
    return next((sub.num_mel_bins for sub in vars(config).values()
                 if isinstance(sub, PretrainedConfig)
                 and isinstance(getattr(sub, "num_mel_bins", None), int)), None)


def _mentions(config, word, depth=0):
    """Whether the modeling modules of the config's package, or of its sub-configs' packages
    (ColQwen2's Qwen2-VL), name `word`."""
    import sys as system

    from transformers import PretrainedConfig

    folder = Path(system.modules[type(config).__module__].__file__).parent
    return any(word in path.read_text(errors="replace")
               for path in folder.glob("modeling_*.py")) or depth < 2 and any(
        _mentions(sub, word, depth + 1) for sub in vars(config).values()
        if isinstance(sub, PretrainedConfig) and type(sub) is not type(config))


def _config_text(model_type, variant):
    try:
        return repr(shrink(_default_config(model_type, variant), variant=variant).to_dict())
    except Exception as error:  # noqa: BLE001 - a config that cannot be made: not a variant
        return f"failed: {error}"


def _as_the_row_runs(model, train):
    """A forward's model as the row runs it (build() and the variant probe alike): without a
    cache where it is not the training step."""
    if not train and hasattr(model.config, "use_cache"):
        model.config.use_cache = False


def _fails(model, config, batch, variant, train=False):
    """Why the model's forward fails on the CPU on the referee's inputs (no_grad, eval; with
    `train`, in train mode as the step runs it), in a line; None where it runs."""
    import torch

    _as_the_row_runs(model, train)
    try:
        with torch.set_grad_enabled(train):
            model.train(train)(**transformers_inputs(model, config, batch, variant))
        return None
    except Exception as error:  # noqa: BLE001 - any failure: the next variant is tried
        return f"{type(error).__name__}: {error}"


def _try_variant(model_type, attention, variant, batch, train=False):
    """(config, the CPU forward's error or None) of a variant, seeded as every try is; None when
    the variant does not build."""
    import torch

    torch.manual_seed(SEED)
    try:
        model, config = transformers_model(model_type, attention, variant)
    except Exception:  # noqa: BLE001 - does not build
        return None
    torch.manual_seed(SEED + 1)
    return config, _fails(model, config, batch, variant, train)


def transformers_variant(model_type, attention, batch, train=False):
    """The first of VARIANTS whose model runs its forward on the CPU, tried only where a
    variant's config differs from the plain one and the plain one does not run (so that every
    model that ran keeps its sizes); "" where none runs (the row says the plain one's error).
    With `train`, the forward runs in train mode, as the step's does (a hybrid's cache there
    asks for an attention layer: "layer kinds")."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    plain = _config_text(model_type, "")
    if plain.startswith("failed: "):
        return ""
    mel = _sub_config_mel_bins(shrink(CONFIG_MAPPING[model_type]()))
    others = [variant for variant in VARIANTS[1:] if (
        mel is not None if variant.startswith("mel bins") else
        _config_text(model_type, variant) not in (plain,)
        and not _config_text(model_type, variant).startswith("failed: "))]
    if isinstance(getattr(CONFIG_MAPPING[model_type](), "num_mel_bins", None), int):
        others.append("time first")  # its own mel bins, the features (batch, time, bins)
    if _mentions(CONFIG_MAPPING[model_type](), "mrope_section"):
        others.append("mrope")  # tried only where the plain forward's message asks for it
    if _image_token(CONFIG_MAPPING[model_type]()) is not None:
        others.append("image tokens")
    if _mentions(CONFIG_MAPPING[model_type](), "grid_thw"):
        others.append("image grid")  # and "image grid, mrope N" where it then asks for that
    if _timm_backbone(CONFIG_MAPPING[model_type]()):
        others.append("own backbone")  # transformers' own backbone, not timm's
    if train and _loses_layer_kinds(CONFIG_MAPPING[model_type]()):
        # Only for the step: the forward without a cache (build's use_cache=False) ran with
        # the first layers' kinds, and its rows keep them. First: before "head" (which a
        # hybrid's state-space mixer also takes), so that a step needing only its layer kinds
        # keeps the sizes of its forward's rows; "head, layer kinds" where "head" is needed too.
        others.insert(0, "layer kinds")
    if "keep hidden_sizes" in others:  # after the variants older than it (see VARIANTS)
        others.append(others.pop(others.index("keep hidden_sizes")))
    if _config_text(model_type, "more sizes") not in (plain,):
        others.append("more sizes")  # last: every type that ran keeps its variant
    if _config_text(model_type, "backbone layers") not in (plain,):
        others.append("backbone layers")  # last but the audio channels
    if _positions(shrink(CONFIG_MAPPING[model_type]())) is not None:
        others.append("positions")  # fewer tokens than SEQUENCE
    if _mentions(CONFIG_MAPPING[model_type](), "input_values"):
        others.append("audio channels")
        if "more sizes" in others:
            others.append("more sizes, audio channels")  # Mimi's: both
    if not train and _loses_layer_kinds(CONFIG_MAPPING[model_type]()):
        # A forward with a cache of its own (a multimodal model whose text config keeps
        # use_cache, which build() turns off only on the model's own config: MiniCPM-V 4.6):
        # its layer kinds, tried last and only where the plain forward's message asks for an
        # attention layer, so that every forward that ran keeps its variant.
        others.append("layer kinds")
    if "derived sizes" in others:  # the newest: last of all, every type that ran keeps its own
        others.append(others.pop(others.index("derived sizes")))
    others.append("documented inputs")  # the inputs' variant, the config as plain: after all
    plain_error = None
    for variant in ("", *others):
        if variant == "layer kinds" and not train and not re.search(
                _NO_ATTENTION_LAYER, plain_error or ""):
            continue
        if variant == "mrope":  # sections summing to what the plain forward's message says
            found = re.search(r"split_sizes to sum exactly to (\d+) .*split_sizes=\[\d+, \d+, "
                              r"\d+\]", plain_error or "")
            if not found:
                continue
            variant = f"mrope {found.group(1)}"
        if variant == "image tokens":  # as many as the plain forward's message says
            found = re.search(r"image tokens do not match, tokens: \d+, features: (\d+)",
                              plain_error or "")
            if not found:
                continue
            variant = f"image tokens {int(found.group(1)) // batch}"
        tried = _try_variant(model_type, attention, variant, batch, train)
        if tried is None:  # does not build: the next one
            continue
        config, error = tried
        if error is None:
            return variant
        plain_error = plain_error or error
        found = re.search(r"image tokens do not match, tokens: (\d+), features: \1\b", error)
        width = getattr(getattr(config, "text_config", None) or config, "hidden_size", None)
        if variant.startswith("image tokens") and "," not in variant and found and \
                isinstance(width, int):
            # As many tokens as the message's features and still no match: the message counted
            # the features' numbers (LLaVA's kind: shape[0] * shape[1] of features flattened to
            # (features, width)), so a sample has 1/width of them.
            variant = f"image tokens {int(variant.rsplit(' ', 1)[1]) // width}"
            tried = _try_variant(model_type, attention, variant, batch, train)
            if tried is None:  # does not build: the next one
                continue
            config, error = tried
            if error is None:
                return variant
        # What the forward of a variant added since 2026-11-30 asks for once it goes further
        # (only these: a type that ran through an older variant keeps it).
        while variant.startswith(("image grid", "keep hidden_sizes", "head")):
            found = re.search(r"split_sizes to sum exactly to (\d+) .*split_sizes=\[\d+, \d+, "
                              r"\d+\]", error)
            if found and "mrope" not in variant and not variant.startswith("head"):
                # it reached the rotary sections
                variant += f", mrope {found.group(1)}"
            elif variant.startswith("image grid") and re.search(
                    r"conv2d, but got input of size: \[\d+, \d+\]|expected 5, got",
                    error) and "patches" not in variant:  # each patch an image
                variant += ", patches"
            elif "selected index k out of range" in error and "queries" not in variant \
                    and not variant.startswith("head"):
                variant += ", queries"  # more queries than a small image has anchors
            elif variant.startswith("head") and "expert groups" not in variant and re.search(
                    r"selected index k out of range|shape '\[-1, \d+, 0\]' is invalid", error):
                # a router's groups of no expert or one (beside the layer kinds: Bailing's step)
                variant = variant.replace("head", "head, expert groups", 1)
            elif re.search(_NO_ATTENTION_LAYER, error) and \
                    "layer kinds" not in variant:
                variant += ", layer kinds"  # a hybrid left with no attention layer
            else:
                break
            tried = _try_variant(model_type, attention, variant, batch, train)
            if tried is None:  # does not build: the next one
                break
            config, error = tried
            if error is None:
                return variant
    return ""


# What a hybrid's cache says when the layers left have no attention layer to ask its length.
_NO_ATTENTION_LAYER = r"can only be called on Attention layers"


def _loses_layer_kinds(config, depth=0):
    """Whether shrink's cut to the first layers leaves out a kind of layer the config (or a
    sub-config) has: VARIANTS' "layer kinds" is then worth a try."""
    from transformers import PretrainedConfig

    small = shrink(copy_config(config))
    for before, after in [(config, small)] + [
            (sub, getattr(small, name)) for name, sub in vars(config).items()
            if isinstance(sub, PretrainedConfig) and depth < 2]:
        layers = next((vars(after)[name] for name in _LAYERS
                       if isinstance(vars(after).get(name), int)), None)
        if layers is None:
            continue
        layers_before = next((vars(before)[name] for name in _LAYERS
                              if isinstance(vars(before).get(name), int)), None)
        for name, value in vars(before).items():
            if isinstance(value, list) and value and all(isinstance(item, str) for item in value) \
                    and (name.endswith("layer_types") or _kind_pattern(name, value, layers_before)) \
                    and set((value * layers)[:layers]) != set(value):
                return True
            if name.endswith("_layer_offset") and isinstance(value, int) and value >= layers:
                return True
    return False


def _kind_pattern(name, value, layers):
    """Whether a config's list is a pattern of layer kinds that its layers repeat (a list of
    kinds named `..._types`, shorter than the layers: RecurrentGemma's `block_types`, which its
    config repeats to `num_hidden_layers`), not one kind a layer."""
    return name.endswith("_types") and isinstance(layers, int) and 1 < len(value) < layers \
        and len(set(value)) > 1


def copy_config(config):
    import copy

    return copy.deepcopy(config)


def transformers_models():
    """[(model type, attention, None)] for every model type of the registry, sdpa and eager
    (a class without sdpa refuses it: that row is left out of the table)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return [(model_type, attention, None) for model_type in sorted(CONFIG_MAPPING_NAMES)
            for attention in ("sdpa", "eager")]


def torchvision_models():
    import torchvision.models as tv

    names = tv.list_models(module=tv) + tv.list_models(module=tv.segmentation)
    return [(name, "-", None) for name in sorted(names)]


def torchvision_model(name):
    import torchvision.models as tv

    options = {"weights": None}
    if name in tv.list_models(module=tv.segmentation):
        options.update(weights_backbone=None, num_classes=21)
    return tv.get_model(name, **options)


def zoo_models():
    import zoo

    return [(name, "-", None) for name in zoo.ZOO]


def build(family, name, attention, batch, train, size=None):
    """(model, args, kwargs, described input) on the CPU, seeded."""
    import torch

    torch.manual_seed(SEED)
    if family == "transformers":
        variant = transformers_variant(name, attention, batch, train)
        torch.manual_seed(SEED)
        model, config = transformers_model(name, attention, variant)
        if variant:
            BUILT["variant"] = variant  # not the plain config made small: the row says which
        _as_the_row_runs(model, train)
        torch.manual_seed(SEED + 1)
        kwargs = transformers_inputs(model, config, batch, variant)
        args = ()
    elif family == "torchvision":
        model = torchvision_model(name)
        torch.manual_seed(SEED + 1)
        args, kwargs = (torch.randn(batch, 3, size or SIZES[0], size or SIZES[0]),), {}
    elif family == "zoo":
        import zoo

        entry = zoo.ZOO[name]
        model = entry.build()
        args, kwargs = entry.example(batch)
        train = train or entry.train  # the zoo's train-mode models run in train mode
    else:
        raise ValueError(f"no family {family!r}")
    return model.train(train), args, kwargs


def torchvision_size(name):
    """The smallest of SIZES a forward of the model takes, tried on the meta device."""
    import torch

    try:
        with torch.device("meta"):
            model = torchvision_model(name).eval()
    except NotImplementedError:  # an init that reads values (RegNet's): no probe, the smallest
        return SIZES[0]
    for size in SIZES:
        try:
            with torch.no_grad():
                model(torch.empty(1, 3, size, size, device="meta"))
        except Exception:  # noqa: BLE001, S112 - the next size
            continue
        return size
    raise ValueError(f"no forward at {', '.join(map(str, SIZES))} pixels")


def loss_of(output):
    """The step's loss: the sum of the output's first floating-point tensor (a tensor, a
    ModelOutput, a dict or a tuple), as the measured step and the estimate both take it."""
    import torch

    if isinstance(output, torch.Tensor):
        return output.sum()
    values = output.values() if hasattr(output, "values") else output
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.sum()
        if isinstance(value, (tuple, list, dict)) and value:
            try:
                return loss_of(value)
            except ValueError:
                continue
    raise ValueError("the output holds no floating-point tensor to take a loss of")


def _on(device, value):
    return value.to(device) if hasattr(value, "to") else value


# ---- one measurement, one estimate (each in a child of its own) ---------------------------------

def measure(family, name, attention, task, size, values_mode="known"):
    """On the simulated card (this process's): the peaks of the forward or the training step.
    `values_mode`: the card's values mode, "known" (Note [Known values on the simulated card])
    or "cpu", every op's values computed on the host beside the card (Note [Real values beside
    the card]), which run() asks for only where the card's run in "known" failed."""
    import torch
    from mem_tracer.simulated_gpu import values

    train = task.startswith("train")
    batch = int(task.rsplit("b", 1)[1])
    model, args, kwargs = build(family, name, attention, batch, train, size)
    # After build: its draws (the weights, the inputs), seeded, are the estimate's too; what
    # the program's generator draws from here on is not (Note [Values drawn on the host]).
    if not values.install(values_mode):
        raise RuntimeError("not on the simulated card (run through referee.py, not alone)")
    model = model.cuda()
    args = tuple(_on("cuda", value) for value in args)
    kwargs = {key: _on("cuda", value) for key, value in kwargs.items()}
    torch.cuda.synchronize()
    phases = {}  # phase: (allocated, requested, reserved), each its peak within the phase

    def mark(phase):
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        phases[phase] = (torch.cuda.max_memory_allocated(), stats["requested_bytes.all.peak"],
                         torch.cuda.max_memory_reserved())
        torch.cuda.reset_peak_memory_stats()

    if not train:
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            output = model(*args, **kwargs)
        mark("forward")
        del output
    else:
        optimizer = torch.optim.AdamW(model.parameters())

        def step(measured=False):
            output = model(*args, **kwargs)
            loss = loss_of(output)
            if measured:
                mark("forward")
            loss.backward()
            if measured:
                mark("backward")
            optimizer.step()
            if measured:
                mark("optimizer")
            optimizer.zero_grad(set_to_none=True)

        step()
        step()  # the optimizer's state exists: the steady state the estimate is of
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step(measured=True)
    assumed = values.installed().assumed
    peak = max(phases, key=lambda phase: phases[phase][0])
    return {
        "allocated": phases[peak][0],
        "requested": max(figures[1] for figures in phases.values()),
        "reserved": max(figures[2] for figures in phases.values()),
        "phase": peak,
        "assumed": sorted(f"{a.file.rsplit('/', 1)[-1]}:{a.line}: {a.said}"
                          for a in assumed)[:5] if assumed else [],
        "built": dict(BUILT),
        "values": values_mode,
        "random_draws": values.installed().host.random_draws
        if values_mode == "cpu" and values.installed().host is not None else 0,
        # Reads of values drawn at random, on the host's stream or by the program's generator
        # within the forward or step (Note [Values drawn on the host]): what make_row judges on.
        "random_reads": values.installed().host.random_reads
        + values.installed().host.program_random_reads
        if values_mode == "cpu" and values.installed().host is not None else 0,
    }


def predict(family, name, attention, task, size, profile):
    """Beside the card: mem_tracer.estimate of the same forward or step, and what it says."""
    import mem_tracer
    import torch

    train = task.startswith("train")
    batch = int(task.rsplit("b", 1)[1])
    model, args, kwargs = build(family, name, attention, batch, train, size)
    inputs = args if args else kwargs
    if train:
        step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(model.parameters()),
                                       loss_fn=loss_of, loop="until-step-end")
        estimate = mem_tracer.estimate(model, inputs, device=profile, training=step)
    else:
        estimate = mem_tracer.estimate(model, inputs, device=profile)
    return {
        "requested": estimate.peak_requested_bytes,
        "allocated": estimate.peak_allocated_bytes,
        "reserved": estimate.peak_reserved_bytes,
        "phase": estimate.training_peak_phase if train else "forward",
        "method": estimate.method,
        "method_note": estimate.method_note,
        "lower_bound": bool(estimate.lower_bound),
        "approximate": bool(estimate.raw.get("eager_approximate")
                            or estimate.raw.get("approximate")),
        "cublas_workspace": (estimate.raw.get("summary") or {}).get("cublas_workspace_bytes"),
        "unknown_ops": sorted(str(op)[:80] for op in estimate.raw.get("unknown_ops") or ())[:5],
        # Ops whose output size the example's values decided (nonzero, masks, routing): there
        # the card, where no kernel computes a value, cannot referee the estimate.
        "data_dependent": sorted({str(assumption.get("op")) for assumption in
                                  estimate.raw.get("assumptions") or ()
                                  if assumption.get("kind") == "data_dependent_size"}),
        "built": dict(BUILT),
    }


def last_line(text):
    """A message's last line; for a package missing, the line that names it (transformers'
    message ends with advice that does not: "... restart your runtime after installation.")."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()] or [
        "no message"]
    names = re.compile(r"pip install \S|requires the \S+ librar|No module named")
    naming = [line for line in lines if names.search(line)]
    return (lines[-1] if names.search(lines[-1]) or not naming else naming[0])[:300]


def in_child(function, arguments, timeout):
    """function(*arguments) in a forked child: its result, or {"error": one line}."""
    import pickle

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        try:
            result = {"result": function(*arguments)}
        except BaseException as error:  # noqa: BLE001 - the row says why, in a line
            where = traceback.extract_tb(error.__traceback__)[-1:]
            place = f" ({Path(where[0].filename).name}:{where[0].lineno})" if where else ""
            result = {"error": f"{type(error).__name__}: {last_line(error)}{place}"}
        with os.fdopen(write, "wb") as pipe:
            pipe.write(pickle.dumps(result))
        os._exit(0)
    os.close(write)
    started = time.monotonic()
    chunks = []
    with os.fdopen(read, "rb") as pipe:
        import select

        while True:
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"error": f"timed out after {timeout} s"}
            ready, _, _ = select.select([pipe], [], [], min(left, 5.0))
            if ready:
                chunk = os.read(pipe.fileno(), 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if chunks:
        return pickle.loads(b"".join(chunks))
    if os.WIFSIGNALED(status):
        return {"error": f"the child died of signal {os.WTERMSIG(status)}"}
    return {"error": f"the child exited {os.WEXITSTATUS(status)} without a result"}


def serve(role, profile, timeout):
    """A long-lived process: one JSON request a line on stdin, one JSON answer a line on stdout,
    each computed in a forked child."""
    import torch

    torch.set_num_threads(1)
    # Imported once, before the children fork.
    import torchvision  # noqa: F401
    import transformers
    import zoo  # noqa: F401

    transformers.logging.set_verbosity_error()
    out = sys.stdout
    sys.stdout = sys.stderr  # what the models print stays off the answers
    for line in sys.stdin:
        request = json.loads(line)
        started = time.monotonic()
        arguments = (request["family"], request["model"], request["attention"], request["task"],
                     request.get("size"))
        if role == "measure":
            answer = in_child(measure, arguments + (request.get("values", "known"),), timeout)
        elif request.get("probe"):
            answer = in_child(torchvision_size, (request["model"],), timeout)
        else:
            answer = in_child(predict, arguments + (profile,), timeout)
        answer["seconds"] = round(time.monotonic() - started, 2)
        out.write(json.dumps(answer) + "\n")
        out.flush()


class Server:
    """A serve() process, started again when it dies."""

    def __init__(self, role, environment, profile, timeout):
        self.command = [sys.executable, __file__, "--serve", role, "--profile-name", profile,
                        "--timeout", str(timeout)]
        self.environment = environment
        self.process = None

    def ask(self, request):
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True,
                                            env=self.environment, stderr=subprocess.DEVNULL)
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process = None
            return {"error": "the referee's server died", "seconds": 0}
        return json.loads(line)

    def close(self):
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


# ---- the run ------------------------------------------------------------------------------------

def key(row):
    return (row["family"], row["model"], row["attention"], row["task"])


def read_rows(path):
    """The data file's rows, the last of each (family, model, attention, task) where a row was
    run again, in the order they were first written."""
    path = Path(path)
    if not path.exists():
        return []
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[key(row)] = row
    # A model type once listed without a task (no base model then) and tried since at a task:
    # the old row is superseded.
    tried = {(row["family"], row["model"]) for row in rows.values() if row["task"] != "-"}
    return [row for row in rows.values()
            if row["task"] != "-" or (row["family"], row["model"]) not in tried]


# A class without sdpa refuses attn_implementation="sdpa": not a failure, the row does not exist.
_NO_SDPA = re.compile(r"does not support .*(sdpa|scaled_dot_product)|sdpa.*not supported",
                      re.IGNORECASE)


def no_sdpa(row):
    """Whether the row is an sdpa row of a class without sdpa (no row: the table leaves it out)."""
    return row["attention"] == "sdpa" and bool(_NO_SDPA.search(row.get("error", "")))


MEASURED = ("requested", "allocated", "reserved", "phase")  # the card's side of a row
DEFAULT_FRONT_END = "record"  # Estimate.method of estimate()'s default for an nn.Module


_COMMIT = []  # the checkout's commit, looked up once a run


def stamp():
    """When and with which commit a side is taken: {"at": UTC time, "commit": short hash, with
    "+changes" when the referee or the package differed from it as the run started}."""
    if not _COMMIT:
        _COMMIT.append(_commit())
    return {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": _COMMIT[0]}


def _commit():
    def git(*command):
        try:
            return subprocess.run(["git", "-C", str(REPOSITORY), *command], capture_output=True,
                                  text=True, timeout=30, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--", "python", "tests/estimator"):
        commit += "+changes"
    return commit


def stale_estimate(row):
    """Whether the row's estimate is to be taken again by --re-estimate: its card side is kept
    and its estimate came through a front end that is not estimate()'s default, before the
    default changed (a row estimated again keeps its stamp, and is not taken again even where
    the recording failed and TorchScript stood in)."""
    if "measured" not in row or {"estimated", "estimate_failed"} & set(row.get("taken", {})):
        return False
    if "error" in row:  # the card ran it, the estimate failed: the old front end's failure?
        return row["error"].startswith("estimate:")
    return row.get("method") != DEFAULT_FRONT_END


# What the card's side of a row runs on: a row measured before the last change here is measured
# again when its estimate is taken again by commit (--estimated-before, --estimated-at).
CARD_CODE = ("simulator", "python/mem_tracer/simulated_gpu")
_ANCESTRY = {}  # (repository, ancestor, commit) -> bool, looked up once a run


def _git(repository, *command):
    return subprocess.run(["git", "-C", str(repository), *command], capture_output=True,
                          text=True, timeout=60, check=False)


def descends(commit, ancestor, repository=REPOSITORY):
    """Whether the code of `commit` holds `ancestor` (it is the commit or one of its parents').
    A commit git does not know (a shallow clone, a rewritten branch) is an error, not a guess."""
    found = (str(repository), ancestor, commit)
    if found not in _ANCESTRY:
        answer = _git(repository, "merge-base", "--is-ancestor", ancestor, commit)
        if answer.returncode not in (0, 1):
            raise SystemExit(f"referee.py: git cannot tell whether {commit} holds {ancestor}: "
                             f"{last_line(answer.stderr) or answer.returncode}")
        _ANCESTRY[found] = answer.returncode == 0
    return _ANCESTRY[found]


def side_commit(row, side, legacy):
    """The commit whose code took a side ("measured" or "estimated") of a row: its stamp's
    ("+changes" dropped: the stamp's commit is what was committed of the code), or for a row
    written before sides were stamped, the parent of the commit that first recorded it
    (`legacy`, recorded_in). None where the side was never taken."""
    taken = row.get("taken", {})
    mark = taken.get(side) or (taken.get("estimate_failed") if side == "estimated" else None)
    if mark:
        return mark["commit"].split("+")[0]
    recorded = legacy.get(key(row))
    return f"{recorded['commit']}^" if recorded else None


def estimated_by(row, legacy, before=None, at=(), repository=REPOSITORY):
    """Whether a row whose card side ran is selected by --estimated-before BEFORE (its estimate
    was taken with code that did not hold BEFORE) or --estimated-at AT (its estimate's stamp
    names one of these commits, "+changes" or not; abbreviations match as prefixes)."""
    if "measured" not in row:
        return False  # the card's side failed: a whole row to run again (--retry-failed)
    commit = side_commit(row, "estimated", legacy)
    if commit is None:
        return False
    if at and any(commit.startswith(wanted) or wanted.startswith(commit) for wanted in at):
        return True
    return before is not None and not descends(commit, before, repository)


def card_changed_since(row, legacy, repository=REPOSITORY):
    """Whether the simulated card changed (CARD_CODE) after the row's card side was taken: the
    last commit that touched it is not in the code that measured the row."""
    last = _git(repository, "log", "-1", "--format=%h", "--", *CARD_CODE).stdout.strip()
    commit = side_commit(row, "measured", legacy)
    return bool(last) and (commit is None or not descends(commit, last, repository))


def error_percent(predicted, measured):
    if not measured:
        return None
    return round(100.0 * (predicted - measured) / measured, 4)


def card_failed_alone(measured, predicted):
    """Whether the card's run failed where the estimate's did not fail the same way: the estimate
    ran, or it failed with another message. fastspeech2_conformer_with_hifigan: on the card its
    length regulator's repeat_interleave read durations no kernel computed ("repeats can not be
    negative"), while the forward the estimate runs on the CPU stops later, on the shrinker's
    sizes (the vocoder's 80 mel bins against 16); run() then measures again with the host's
    values, and a row that fails on both sides gives the model's own error."""
    if "error" not in measured:
        return False
    if "error" not in predicted:
        return True
    # The message without its "(file.py:N)", and its start only: each side cuts a long message
    # at its own length (the estimate's after its own words).
    said = re.sub(r" \([^()]*:\d+\)$", "", measured["error"])[:100]
    return said not in predicted["error"]


def make_row(case, task, measured, predicted, seconds, reason=None, taken=None):
    """One row of the data file. `taken`: {"measured": stamp, "estimated": stamp} (stamp()),
    when and with which commit each side was taken; a side that failed keeps no stamp."""
    family, model, attention = case
    row = {"family": family, "model": model, "task": task, "attention": attention}
    if reason is None:
        failed = [f"{what}: {answer['error']}" for what, answer in
                  (("estimate", predicted), ("measurement", measured)) if "error" in answer]
        if len(failed) == 2:  # neither side built or ran it: the model's own error says why
            reason = f"builds or runs nowhere: {measured['error']}"
        else:
            reason = "; ".join(failed) or None
    if reason is not None:
        row.update(error=reason, seconds=seconds)
        if measured is not None and set(MEASURED) <= set(measured.get("result") or ()):
            # The card's side ran: kept, so that a later estimate need not measure again.
            row["measured"] = {k: measured["result"][k] for k in MEASURED}
            if measured["result"].get("assumed"):
                row["assumed"] = measured["result"]["assumed"]
            if taken and "measured" in taken:
                row["taken"] = {"measured": taken["measured"]}
        return row
    truth, guess = measured["result"], predicted["result"]
    row.update(
        measured={k: truth[k] for k in MEASURED},
        predicted={k: guess[k] for k in ("requested", "allocated", "reserved", "phase")},
        error_allocated=error_percent(guess["allocated"], truth["allocated"]),
        error_requested=error_percent(guess["requested"], truth["requested"]),
        method=guess["method"],
        cublas_workspace=guess.get("cublas_workspace"),
        flags=[flag for flag in ("approximate", "lower_bound") if guess[flag]],
        # With the values computed on the host the card follows the example's values, as the
        # recording did: a shape they decided is the same on both sides, and judged. Not where
        # the program read a value the host drew at random (its own stream, not the example
        # run's: VITS's stochastic durations set its output's length, -20 % on its step): then
        # a shape the estimate says values decided is not judged (Note [Values drawn on the
        # host]). A row measured before reads were counted has only its draws.
        judged=not truth["assumed"] and (
            (truth.get("values") == "cpu"
             and not truth.get("random_reads", truth.get("random_draws")))
            or not guess.get("data_dependent")),
        seconds=seconds)
    if truth.get("values") == "cpu":
        row["values"] = "cpu"
        if truth.get("random_draws"):
            row["random_draws"] = truth["random_draws"]
        if "random_reads" in truth:
            row["random_reads"] = truth["random_reads"]
    if taken:
        row["taken"] = taken
    if guess["method"] != DEFAULT_FRONT_END and guess.get("method_note"):
        row["method_note"] = last_line(guess["method_note"])  # why not the default
    if guess.get("built"):  # not AutoModel's base model, or per-layer lists cut: said
        row["built"] = guess["built"]
    for side, answer in (("measure", measured), ("estimate", predicted)):
        if answer.get("seconds") is not None:
            row[f"seconds_{side}"] = answer["seconds"]
    if truth["assumed"]:
        row["assumed"] = truth["assumed"]
    if guess.get("data_dependent"):
        row["data_dependent"] = guess["data_dependent"]
    if guess.get("unknown_ops"):
        row["unknown_ops"] = guess["unknown_ops"]
    return row


def recorded_in(path):
    """{row key: stamp} for rows written before sides were stamped: the commit that first held
    the row as it is, and that commit's time (the side was taken with the code before it)."""
    path = Path(path).resolve()
    # A copy outside the checkout holds the committed file's rows: its history stands in.
    relative = (path if path.is_relative_to(REPOSITORY) else DATA).relative_to(REPOSITORY)
    commits = subprocess.run(["git", "-C", str(REPOSITORY), "log", "--reverse",
                              "--format=%h %cI", "--", str(relative)],
                             capture_output=True, text=True, check=False).stdout.split("\n")
    first, seen = {}, {}
    for line in filter(None, commits):
        commit, when = line.split(" ", 1)
        text = subprocess.run(["git", "-C", str(REPOSITORY), "show", f"{commit}:{relative}"],
                              capture_output=True, text=True, check=False).stdout
        for row_line in text.splitlines():
            if row_line.strip():
                row = json.loads(row_line)
                if seen.get(key(row)) != row:
                    seen[key(row)] = row
                    first[key(row)] = {"at": when, "commit": commit,
                                       "note": "recorded in this commit, taken before it"}
    return first


def re_estimate(arguments, estimator, referee):
    """--re-estimate: the rows whose estimate is stale (stale_estimate) estimated again, their
    card side kept; rows whose estimate failed before the card's side was kept run again whole."""
    import zoo  # noqa: F401 - the server imports it; here only for the row's cases

    rows = read_rows(arguments.data)
    only = re.compile(arguments.only) if arguments.only else None
    tasks = set(arguments.tasks.split(","))
    rows = [row for row in rows if row["task"] in tasks and (
        not only or only.search(f"{row['family']}/{row['model']}/{row['attention']}"))]
    by_commit = arguments.estimated_before is not None or arguments.estimated_at
    if by_commit:
        # Exactly the rows whose estimate predates a commit or names given ones; a stamp-less
        # row's commit is the one that recorded it (its history read once).
        legacy = recorded_in(arguments.data) \
            if any("measured" in row and "taken" not in row for row in rows) else {}
        at = tuple(filter(None, (arguments.estimated_at or "").split(",")))
        wanted = [row for row in rows
                  if estimated_by(row, legacy, arguments.estimated_before, at)]
    else:
        wanted = [row for row in rows if stale_estimate(row) or (
            "error" in row and "measured" not in row and row["error"].startswith("estimate:")
            and "measurement:" not in row["error"]
            and "estimate_failed" not in row.get("taken", {}))]
        legacy = recorded_in(arguments.data) if wanted else {}
    print(f"{len(wanted)} rows to estimate again", flush=True)
    written = 0
    with open(arguments.data, "a") as data:
        for old in wanted:
            if arguments.limit is not None and written >= arguments.limit:
                break
            started = time.monotonic()
            request = {"family": old["family"], "model": old["model"],
                       "attention": old["attention"], "task": old["task"],
                       "size": old.get("pixels")}
            predicted = estimator.ask(request)
            taken = {"estimated": stamp()}
            if "measured" in old and not (by_commit and card_changed_since(old, legacy)):
                measured = {"result": {**old["measured"], "assumed": old.get("assumed", []),
                                       "values": old.get("values", "known"),
                                       "random_draws": old.get("random_draws", 0),
                                       **({"random_reads": old["random_reads"]}
                                          if "random_reads" in old else {})}}
                taken["measured"] = old.get("taken", {}).get("measured") or legacy.get(key(old))
            else:  # the card's side failed, or the card changed since it was taken
                measured = referee.ask({**request, "values": old.get("values", "known")})
                taken["measured"] = stamp()
            if "error" in predicted:
                taken.pop("estimated")
                taken["estimate_failed"] = stamp()
            row = make_row((old["family"], old["model"], old["attention"]), old["task"],
                           measured, predicted, round(time.monotonic() - started, 1),
                           taken=taken)
            if "error" in predicted and "measured" in row:
                row["taken"] = taken  # the estimate's failure stamped: not taken again
            if old.get("pixels") is not None:
                row["pixels"] = old["pixels"]
            before = old.get("error_allocated")
            row["error_before"] = {"method": old.get("method"), "error_allocated": before} \
                if before is not None else {"error": old.get("error", "")[:200]}
            data.write(json.dumps(row, sort_keys=True) + "\n")
            data.flush()
            written += 1
            shown = row.get("error") or f"{row['error_allocated']:+.3f} % ({row['method']})"
            print(f"{old['family']}/{old['model']}/{old['attention']}/{old['task']}: "
                  f"{before if before is None else f'{before:+.3f} %'} ({old.get('method')}) "
                  f"-> {shown} ({row['seconds']} s)", flush=True)
    return written


def all_cases(families):
    listed = {"transformers": transformers_models, "torchvision": torchvision_models,
              "zoo": zoo_models}
    return [(family, *entry) for family in families for entry in listed[family]()]


def run(arguments):
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    from mem_tracer import simulated_gpu

    card = simulated_gpu.profile(arguments.profile)
    profile = card.estimator_profile
    beside = dict(os.environ)
    beside["PYTHONPATH"] = os.pathsep.join([str(REPOSITORY / "python"),
                                            beside.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    on_card = simulated_gpu.environment(card, base=beside)
    estimator = Server("predict", beside, profile, arguments.timeout)
    referee = Server("measure", on_card, profile, arguments.timeout)
    stamp()  # the commit looked up as the run starts: the code its servers load
    if arguments.re_estimate:
        try:
            return re_estimate(arguments, estimator, referee)
        finally:
            estimator.close()
            referee.close()
    existing = read_rows(arguments.data) if arguments.resume else []
    done = {key(row) for row in existing if not (arguments.retry_failed and "error" in row)}
    # A case that builds or runs nowhere (neither side ran a task of it, or its class has no
    # sdpa) is not tried again at another task: it would fail the same way (--retry-failed does).
    # --only-tried: the model types that ran at a task already, on the card at least (a
    # coverage pass, such as batch 2 or sdpa, over what batch 1 ran, before types not tried
    # yet; a type that ran nowhere is for --retry-failed, once the shrinker or inputs change).
    tried = {(row["family"], row["model"]) for row in existing
             if row["task"] not in ("-", "registry") and ("measured" in row or "error" not in row)}
    nowhere = {key(row)[:3] for row in existing if not arguments.retry_failed
               and (row.get("error", "").startswith("builds or runs nowhere")
                    or no_sdpa(row))}
    if not arguments.resume and Path(arguments.data).exists() and not arguments.append:
        Path(arguments.data).unlink()
    tasks = arguments.tasks.split(",")
    only = re.compile(arguments.only) if arguments.only else None
    wanted = {tuple(case.split("/")) for case in arguments.case or ()}
    written = 0
    cases = all_cases(arguments.families.split(","))
    try:
        with open(arguments.data, "a") as data:
            for family in arguments.families.split(","):
                # What the registry lists, and the versions, for the table's coverage.
                import torchvision

                names = {case[1] for case in cases if case[0] == family}
                data.write(json.dumps({
                    "family": family, "model": "*", "attention": "-", "task": "registry",
                    "model_types": len(names), "profile": arguments.profile,
                    "versions": {"torch": torch.__version__,
                                 "transformers": transformers.__version__,
                                 "torchvision": torchvision.__version__}},
                    sort_keys=True) + "\n")
            for family, model, attention, reason in cases:
                if only and not only.search(f"{family}/{model}/{attention}"):
                    continue
                if wanted and not any(case[:3] == (family, model, attention) for case in wanted):
                    continue
                if (family, model, attention) in nowhere and not wanted:
                    continue
                if arguments.only_tried and (family, model) not in tried:
                    continue
                size = None
                for task in tasks if reason is None else ["-"]:
                    if (family, model, attention, task) in done:
                        continue
                    if wanted and (family, model, attention, task) not in wanted:
                        continue
                    if arguments.limit is not None and written >= arguments.limit:
                        return written
                    started = time.monotonic()
                    row_reason = reason
                    if family == "torchvision" and size is None and row_reason is None:
                        probe = estimator.ask({"family": family, "model": model, "probe": True,
                                               "attention": attention, "task": task})
                        size = probe.get("result")
                        if size is None:
                            row_reason = f"no input size: {probe['error']}"
                    if row_reason is None:
                        request = {"family": family, "model": model, "attention": attention,
                                   "task": task, "size": size}
                        predicted = estimator.ask(request)
                        measured = referee.ask(request)
                        if card_failed_alone(measured, predicted):
                            # The card failed where the estimate ran, or otherwise than it
                            # failed: most often a value no kernel computed (Note [Values where
                            # they decide the path]; a Qwen-VL grid's products read as zero).
                            # Once more, the values computed on the host beside the card; the
                            # row says so. Where both sides fail, the host's values give the
                            # model's own error, which the CPU's run of the estimate met too.
                            again = referee.ask({**request, "values": "cpu"})
                            if "error" not in again or "error" in predicted:
                                measured = again
                        taken = {"measured": stamp(), "estimated": stamp()}
                        if "error" in predicted:
                            taken["estimate_failed"] = taken.pop("estimated")
                        row = make_row((family, model, attention), task, measured, predicted,
                                       round(time.monotonic() - started, 1), taken=taken)
                        if "error" in predicted and "measured" in row:
                            row["taken"] = taken
                    else:
                        row = make_row((family, model, attention), task, None, None, 0.0,
                                       row_reason)
                    if size is not None:
                        row["pixels"] = size
                    data.write(json.dumps(row, sort_keys=True) + "\n")
                    data.flush()
                    written += 1
                    shown = row.get("error") or (f"{row['error_allocated']:+.3f} %"
                                                 + ("" if row["judged"] else " (not judged)"))
                    print(f"{family}/{model}/{attention}/{task}: {shown} "
                          f"({row['seconds']} s)", flush=True)
                    if row.get("error", "").startswith("builds or runs nowhere") and \
                            reason is None:
                        # Neither side built or ran it (make_row says so: a class without sdpa
                        # too): the other tasks say the same, unrun.
                        reason = f"as {task}: {row['error']}"
    finally:
        estimator.close()
        referee.close()
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--only", help="a regular expression over FAMILY/MODEL/ATTENTION")
    parser.add_argument("--case", action="append",
                        help="FAMILY/MODEL/ATTENTION/TASK: this row only (repeatable)")
    parser.add_argument("--limit", type=int, help="at most this many rows, then stop")
    parser.add_argument("--resume", action="store_true", help="skip the rows the data file has")
    parser.add_argument("--retry-failed", action="store_true",
                        help="with --resume, run again the rows that failed")
    parser.add_argument("--re-estimate", action="store_true",
                        help="estimate again the rows estimated through another front end than "
                             "estimate()'s default (the card's side kept), and the rows whose "
                             "estimate failed; nothing else")
    parser.add_argument("--estimated-before", metavar="COMMIT",
                        help="with --re-estimate: instead, the rows whose estimate was taken with "
                             "code that did not hold COMMIT (the card's side kept, or measured "
                             "again where the simulated card changed since)")
    parser.add_argument("--estimated-at", metavar="C1,C2",
                        help="with --re-estimate: instead, the rows whose estimate names one of "
                             "these commits (with --estimated-before: either)")
    parser.add_argument("--only-tried", action="store_true",
                        help="with --resume, only model types that ran at a task already")
    parser.add_argument("--append", action="store_true",
                        help="append to the data file without skipping (else it starts anew)")
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--profile", default="h100", help="the simulated card's profile")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a child may take")
    parser.add_argument("--serve", choices=("measure", "predict"), help=argparse.SUPPRESS)
    parser.add_argument("--profile-name", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.serve:
        serve(arguments.serve, arguments.profile_name, arguments.timeout)
        return 0
    if (arguments.estimated_before or arguments.estimated_at) and not arguments.re_estimate:
        parser.error("--estimated-before and --estimated-at select rows for --re-estimate")
    if arguments.estimated_before is not None:
        found = _git(REPOSITORY, "rev-parse", "--verify", "--quiet",
                     f"{arguments.estimated_before}^{{commit}}")
        if found.returncode:
            parser.error(f"--estimated-before {arguments.estimated_before!r}: no such commit")
    for family in arguments.families.split(","):
        if family not in FAMILIES:
            parser.error(f"no family {family!r} (there are: {', '.join(FAMILIES)})")
    for case in arguments.case or ():
        if len(case.split("/")) != 4 or case.split("/")[3] not in TASKS:
            parser.error(f"--case {case!r}: write FAMILY/MODEL/ATTENTION/TASK (ATTENTION '-' "
                         f"where the model has no choice; TASK one of {', '.join(TASKS)})")
    for task in arguments.tasks.split(","):
        if task not in TASKS:
            parser.error(f"no task {task!r} (there are: {', '.join(TASKS)})")
    started = time.monotonic()
    written = run(arguments)
    print(f"{written} rows written to {arguments.data} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
