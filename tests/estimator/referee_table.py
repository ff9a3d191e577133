"""The table of docs/accuracy.md made from the referee run's data file (referee.py).

    python tests/estimator/referee_table.py [--data docs/referee.jsonl] [--write] [--check]

prints the table; `--write` puts it into docs/accuracy.md between its markers (the rest of the
page is left as it is); `--check` exits 1 when the page's table is not the one the data file
makes (the sample in `make test` checks the same).

What it says, from the rows alone: per family, how many model types the registry lists and how
many ran (at least one row measured and estimated), the rows, and over the rows the card could
judge and the estimate did not flag, the distribution of |error| of max_memory_allocated()
(exact, within 0.1 %, 1 %, 3 %, over), its median and its worst; the rows flagged approximate
or a lower bound counted apart, with their errors; the rows the card cannot judge (a value no
kernel computed decided a shape: MoE routing, nonzero) counted apart, with what was assumed
(the CPU truths of zoo_accuracy.py stand in there); every row over 1 % with its cause (CAUSES,
or "not yet explained"); and the failures, grouped by their one-line reason.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
sys.path.insert(0, str(HERE))  # referee.py, imported after the path
from referee import DATA, DEFAULT_FRONT_END, FAMILIES, no_sdpa, read_rows

PAGE = REPOSITORY / "docs" / "accuracy.md"
BEGIN = "<!-- referee-table: made by tests/estimator/referee_table.py --write; do not edit -->"
END = "<!-- referee-table end -->"
BUDGET = 3.0  # % of max_memory_allocated(): the budget

# What was found of a row over 1 %: (a regular expression over FAMILY/MODEL/ATTENTION/TASK,
# the cause); the others read "not yet explained". Only what someone looked at goes here, with
# how it was found.
CAUSES = (
    (r"^transformers/convnext",
     ("torchvision's ConvNeXt cause below (a channels-last input to a convolution whose weight "
      "is not: PyTorch's cuDNN path copies the weight for the call); counted by the recorded "
      "forward on CUDA profiles since this session (device_kernels.py), rows taken again exact")),
    (r"^torchvision/convnext_",
     ("the downsampling convolutions get a channels-last input (LayerNorm2d permutes back a "
      "view) and PyTorch's cuDNN path copies the weight to channels-last for the call: on "
      "convnext_tiny the peak is at the 384→768 2×2 convolution, 4,718,592 bytes (its weight) "
      "above what is live after it; counted by the recorded forward on CUDA profiles since this "
      "session (device_kernels.py), rows taken again exact")),
    (r"^transformers/inkling_text/sdpa/infer-b2$",
     ("not yet explained; what is known: a mixture of experts whose loop over the experts hit "
      "takes `nonzero` (the card assumed no value, the recording flagged nothing); batch 1 is "
      "−0.46 %; the eager rows, recorded on fake tensors since 2026-11-29, are exact at both "
      "batches, so the sdpa path is the suspect")),
)

# Whose a failure is, read from its one-line message (the first pattern that matches): what a
# reader of the table needs to know of a row the referee could not judge. A reading of the
# message, not a diagnosis: each row's own reason is beside it.
FAILURE_KINDS = (
    ("the estimate (the card ran it)", r"^estimate: (?!.*measurement:)"),
    ("the card (the estimate ran it)", r"^measurement: "),
    ("a package the venv lacks", r"ImportError|ModuleNotFoundError|pip install"),
    ("no model class", r"no model class|no base model"),
    ("the referee's inputs (the forward wants others)",
     (r"main input|missing \d+ required|required positional|image tokens|must be provided|"
      r"cannot be `None`|have to specify|should be specified at the same time|Input must be a "
      r"5D|_forward_unimplemented|unexpected keyword argument")),
    ("the shrinker's sizes (two sizes made small disagree)",
     (r"cannot be multiplied|must match the size|is invalid for input of size|channels, but "
      r"got|divisible by|split_with_sizes|not a multiple|normalized_shape|running_mean|too "
      r"small|out of range|stride should not be zero|repeats can not be negative|Padding_idx|"
      r"expanded size|broadcast|same reduction dim|per-layer attribute|different than the set")),
    ("other (the model's own code on its default config made small)", r"."),
)


# What was found of a failure by looking (a regular expression over its message, the cause);
# the table puts it beside the message. Only what someone looked at goes here, with how.
FAILURE_CAUSES = (
    (r"repeats can not be negative",
     ("found (glm4v_vision on the card, 2026-11-30): `repeat_interleave` with a tensor of "
      "repeats (the vision grid's patches per frame) checks `(repeats >= 0).all()` and sums them "
      "in kernels the simulated card does not compute, then reads the result; the values mode "
      "knows the grid's products but not the op's own internals, so the check reads a value no "
      "kernel computed (cohere_compass_vision: the same with `--values cpu`, the internals run "
      "below the mode); where the estimate fails with it too (\"builds or runs nowhere\"), its "
      "recording's side was not looked at")),
    (r"get_seq_length` can only be called on Attention layers",
     ("found (2026-11-30): a forward with the cache on asks the cache for a length only "
      "attention layers know; where the 2 layers the shrinker keeps are all linear attention or "
      "convolution, the variant 'layer kinds' keeps one attention layer (jamba, lfm3, "
      "bailing_hybrid, olmo_hybrid, minicpm_ocr and others run so); what still fails has none to "
      "keep: bamba's and granitemoehybrid's default configs have no attention layer "
      "(`attn_layer_indices` None, `layer_types` all linear), and qwen4_exp_text's indexed "
      "attention does not build from its default config (`indexer_budget` None)")),
)


def failure_cause(error):
    return next((cause for pattern, cause in FAILURE_CAUSES if re.search(pattern, error)), None)


def failure_kind(error):
    return next(what for what, pattern in FAILURE_KINDS if re.search(pattern, error))


def kind(row):
    """"failed", "absent" (no sdpa in that class), "unjudged", "flagged" or "judged"."""
    if "error" in row:
        if no_sdpa(row):
            return "absent"
        return "failed"
    if not row.get("judged", True):
        return "unjudged"
    return "flagged" if row.get("flags") else "judged"


def cause_of(row):
    name = f"{row['family']}/{row['model']}/{row['attention']}/{row['task']}"
    return next((cause for pattern, cause in CAUSES if re.search(pattern, name)),
                "not yet explained")


def _unjudged_why(row):
    said = []
    if row.get("data_dependent"):
        said.append("the example's values sized " + ", ".join(
            f"`{op}`" for op in row["data_dependent"]) + " in the estimate")
    if row.get("assumed"):
        said.append(f"the card assumed {row['assumed'][0]}" +
                    (f" (and {len(row['assumed']) - 1} more)" if len(row["assumed"]) > 1 else ""))
    return "; ".join(said).replace("|", "/")


def _reason(text):
    """A failure's reason without what differs from model to model (names, sizes)."""
    text = re.sub(r"^as [a-z0-9-]+: ", "", text)
    # The recording's failure, of a training step or (estimate()'s default front end) of a
    # forward: one prefix, so that one cause groups its step and forward rows.
    text = re.sub(r"MemTracerError: estimate\(\): recording the (step|forward) on fake tensors "
                  r"failed: ", "recording on fake tensors: ", text)
    text = re.sub(r"\b\d[\d,.x]*\b", "N", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return text[:160]


def _section(title, header, alignment, body):
    """One section of the table: its title, then its rows under the header, or "None."."""
    return ["", title, ""] + ([header, alignment, *body] if body else ["None."])


def _percent(value):
    return f"{value:+.2f} %"


def _mib(size):
    return f"{size / 2**20:,.2f}"


def _row_name(row):
    attention = "" if row["attention"] == "-" else f" ({row['attention']})"
    return f"{row['family']}/{row['model']}{attention} {row['task']}"


def _moved(row):
    before = row["error_before"].get("error_allocated")
    now = row.get("error_allocated")
    if before is None or now is None:
        return (before is None) != (now is None)
    return abs(abs(now) - abs(before)) > 0.1


def _provenance(rows):
    """When and with which commit the rows' sides were taken (each row's `taken`)."""
    said = []
    for side, name in (("measured", "card"), ("estimated", "estimate")):
        groups = defaultdict(list)
        for row in rows:
            stamp = (row.get("taken") or {}).get(side)
            if stamp is None and side == "estimated" and "error" not in row:
                stamp = {"commit": "unstamped"}
            if stamp is None and side == "measured" and "measured" in row:
                stamp = {"commit": "unstamped"}
            if stamp is not None:
                recorded = " recorded" if stamp.get("note") else ""
                groups[stamp["commit"] + recorded].append(stamp.get("at", ""))
        parts = []
        for commit, times in sorted(groups.items(), key=lambda item: min(item[1])):
            if commit == "unstamped":
                parts.append(f"{len(times)} before sides were stamped (recorded by d8a6fc4, "
                             "b99857c or f7db5fc, taken with the code before them)")
            else:
                days = sorted(t[:16].replace("T", " ") for t in times)
                span = days[0] if days[0] == days[-1] else f"{days[0]} to {days[-1][11:]}"
                if commit.endswith(" recorded"):
                    parts.append(f"{len(times)} recorded by {commit.split()[0]} ({span} UTC), "
                                 "taken with the code before it")
                else:
                    parts.append(f"{len(times)} at {commit} ({span} UTC)")
        said.append(f"{name} side: " + "; ".join(parts))
    return ("Sides taken (each row's `taken`: when, and with which commit of this "
            "repository): " + "; ".join(said) + ".")


def _times(rows):
    """The rows' wall time (each row's `seconds`: both sides, or the estimate alone where the
    card's side was kept), from the data."""
    whole = sorted(row["seconds"] for row in rows
                   if "error" not in row and "error_before" not in row and "seconds" in row)
    again = sorted(row["seconds"] for row in rows if "error_before" in row and "seconds" in row)
    failed = [row["seconds"] for row in rows if "error" in row and "seconds" in row]
    total = sum(row.get("seconds", 0.0) for row in rows)
    said = (f"Wall time (each row's `seconds`, on the machine and load its run says): a row "
            f"measured and estimated {statistics.median(whole):.1f} s (median of {len(whole)}; "
            f"mean {statistics.fmean(whole):.1f} s)" if whole else "Wall time: ")
    if again:
        said += (f"; an estimate taken again {statistics.median(again):.1f} s (median of "
                 f"{len(again)})")
    if failed:
        said += f"; a failed row {statistics.median(failed):.1f} s (median of {len(failed)})"
    return said + f"; the rows' sum {total / 3600:.2f} h."


def render(rows):
    """The Markdown between the markers."""
    registry = {row["family"]: row for row in rows if row["task"] == "registry"}
    rows = [row for row in rows if row["task"] != "registry"]
    by_family = defaultdict(list)
    for row in rows:
        by_family[row["family"]].append(row)
    versions = next(iter(registry.values()), {}).get("versions", {})
    profile = next(iter(registry.values()), {}).get("profile", "?")
    lines = [BEGIN, "",
             "Made by `python tests/estimator/referee_table.py --write` from "
             "[referee.jsonl](referee.jsonl), the rows `tests/estimator/referee.py` wrote "
             "(`make bench-referee` runs the whole). Error: (predicted − measured) / measured "
             "of `max_memory_allocated()`. Judged: rows the card referees (no value a kernel "
             "computed decided a shape) whose estimate is not flagged approximate or a lower "
             "bound; the others are counted apart below. Simulated card: profile "
             f"{profile}; " + ", ".join(f"{name} {version}" for name, version in
                                        sorted(versions.items())) + ".", "",
             ("| family | model types | tried | ran | rows | judged | exact | ≤ 0.1 % | ≤ 1 % | ≤ 3 % "
              "| > 3 % | median \\|error\\| | worst \\|error\\| | flagged | not judged | failed |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    totals = defaultdict(int)
    for family in [f for f in FAMILIES if f in by_family]:
        family_rows = by_family[family]
        kinds = defaultdict(list)
        for row in family_rows:
            kinds[kind(row)].append(row)
        types = {row["model"] for row in family_rows}
        ran = {row["model"] for row in family_rows if kind(row) in ("judged", "flagged",
                                                                    "unjudged")}
        errors = [abs(row["error_allocated"]) for row in kinds["judged"]]
        bins = [sum(1 for e in errors if e == 0.0),
                sum(1 for e in errors if 0.0 < e <= 0.1),
                sum(1 for e in errors if 0.1 < e <= 1.0),
                sum(1 for e in errors if 1.0 < e <= BUDGET),
                sum(1 for e in errors if e > BUDGET)]
        worst = max(kinds["judged"], key=lambda row: abs(row["error_allocated"]), default=None)
        rows_count = len(family_rows) - len(kinds["absent"])
        listed = registry.get(family, {}).get("model_types", len(types))
        cells = [family, str(listed), str(len(types)), str(len(ran)), str(rows_count),
                 str(len(kinds["judged"])), *map(str, bins),
                 f"{statistics.median(errors):.3f} %" if errors else "–",
                 f"{worst['error_allocated']:+.3f} % ({worst['model']} {worst['task']})"
                 if worst else "–",
                 str(len(kinds["flagged"])), str(len(kinds["unjudged"])), str(len(kinds["failed"]))]
        lines.append("| " + " | ".join(cells) + " |")
        for name, count in (("types", listed), ("tried", len(types)), ("ran", len(ran)),
                            ("rows", rows_count),
                            ("judged", len(errors)), ("over", bins[4]),
                            ("flagged", len(kinds["flagged"])),
                            ("unjudged", len(kinds["unjudged"])),
                            ("failed", len(kinds["failed"]))):
            totals[name] += count
    lines += ["", (f"In all: {totals['ran']} of the {totals['types']} model types the "
               f"registries list ran ({totals['tried']} tried so far); "
               f"{totals['rows']} rows, {totals['judged']} judged ({totals['over']} over "
               f"{BUDGET:g} %), {totals['flagged']} flagged, {totals['unjudged']} not judged, "
               f"{totals['failed']} failed. A model type tried that did not run is among the "
               "failures below, with its reason; one not tried has no row yet (the run is "
               "resumable: `make bench-referee` goes on).")]
    host = sorted(_row_name(row) for row in rows if row.get("values") == "cpu")
    if host:
        lines += ["", (f"Measured with the values computed on the host beside the card "
                       f"(`values: cpu`; the card's own run, which computes no values, failed "
                       f"on one: referee.py asks again so), judged as the example's values "
                       f"sized both sides: {len(host)} rows ({', '.join(host)}).")]

    methods = defaultdict(lambda: defaultdict(int))
    for row in rows:
        if "method" in row:
            methods[row["family"]][row["method"]] += 1
    lines += ["", "Front ends the estimates took (`Estimate.method`), rows: " + "; ".join(
        f"{family} " + ", ".join(f"{method} {count}" for method, count in
                                 sorted(methods[family].items()))
        for family in FAMILIES if family in methods) + "."]
    lines += ["", _provenance(rows), "", _times(rows)]
    built = [row for row in rows if row.get("built") and "error" not in row]
    if built:
        classes = sum(1 for row in built if "class" in row["built"])
        lists = sum(1 for row in built if row["built"].get("per_layer_lists"))
        variants = Counter(re.sub(r" \d+$", " N", row["built"]["variant"])
                           for row in built if row["built"].get("variant"))
        lines += ["", f"Built otherwise than by `AutoModel.from_config`: {classes} rows whose "
                  "model type has no base model in `MODEL_MAPPING_NAMES` (the class another "
                  "auto mapping names, else its package's own model class; each row's "
                  f"`built` says which), {lists} rows whose config built only with its "
                  "per-layer lists cut to the layers left" + (
                      f"; {sum(variants.values())} rows of models that ran only with a variant "
                      "of the shrinker's rules or inputs (VARIANTS in referee.py): " + ", ".join(
                          f"{name} {count}" for name, count in sorted(variants.items()))
                      if variants else "") + "."]

    # An estimate taken again whose old one came through the default front end was taken again
    # by commit (referee.py --estimated-before/--estimated-at: code changed since); the others
    # came through TorchScript or had failed (--re-estimate's own selection).
    by_commit = [row for row in rows
                 if row.get("error_before", {}).get("method") == DEFAULT_FRONT_END]
    for again, title, what in (
            ([row for row in rows if "error_before" in row
              and row.get("error_before", {}).get("method") != DEFAULT_FRONT_END],
             "Estimated again with the default front end",
             ("estimated through TorchScript before the default became the recording on fake "
              "tensors, or whose estimate had failed; the card's side kept")),
            (by_commit, "Estimated again after the estimator changed",
             ("estimated before a commit or at given ones, `referee.py --re-estimate "
              "--estimated-before/--estimated-at`; the card's side kept unless the simulated "
              "card changed since"))):
        if not again:
            continue
        moved = [row for row in again if _moved(row)]
        lines += ["", f"**{title}** ({len(again)} rows {what}): "
                  f"{sum(1 for row in again if 'error' not in row)} ran, "
                  f"{sum(1 for row in again if 'error' in row)} failed; "
                  f"{len(moved)} moved by more than 0.1 point of |error| or between failing "
                  "and running" + (":" if moved else ".")]
        if moved:
            lines += ["", "| row | before | now |", "|---|---|---|"]
            for row in sorted(moved, key=_row_name):
                before = row["error_before"]
                was = (f"{_percent(before['error_allocated'])} ({before['method']})"
                       if "error_allocated" in before else "failed")
                now = (f"{_percent(row['error_allocated'])} ({row['method']})"
                       if "error" not in row else "failed: " + _reason(row["error"])[:80])
                lines.append(f"| {_row_name(row)} | {was} | {now.replace('|', '/')} |")

    over = sorted((row for row in rows if kind(row) == "judged"
                   and abs(row["error_allocated"]) > 1.0),
                  key=lambda row: -abs(row["error_allocated"]))
    lines += _section(
        f"**Judged rows over 1 %** ({len(over)}; over {BUDGET:g} %: "
        f"{sum(1 for row in over if abs(row['error_allocated']) > BUDGET)}), MiB:",
        "| row | measured | predicted | error | peak phase (measured, predicted) | front end "
        "| cause |", "|---|---:|---:|---:|---|---|---|",
        [f"| {_row_name(row)} | {_mib(row['measured']['allocated'])} "
         f"| {_mib(row['predicted']['allocated'])} | {_percent(row['error_allocated'])} "
         f"| {row['measured']['phase']}, {row['predicted']['phase']} "
         f"| {row['method']} | {cause_of(row)} |" for row in over])

    flagged = [row for row in rows if kind(row) == "flagged"]
    lines += _section(
        f"**Flagged by the estimate** ({len(flagged)}: approximate or a lower bound; "
        "not in the distribution above):",
        "| row | flags | error |", "|---|---|---:|",
        [f"| {_row_name(row)} | {', '.join(row['flags'])} "
         f"| {_percent(row['error_allocated'])} |" for row in flagged])

    unjudged = [row for row in rows if kind(row) == "unjudged"]
    lines += _section(
        f"**Not judged by the card** ({len(unjudged)}: a value no kernel computed "
        "decided a shape or the path; the CPU truths of the zoo's table below stand in):",
        "| row | why | error against the card |", "|---|---|---:|",
        [f"| {_row_name(row)} | {_unjudged_why(row)} "
         f"| {_percent(row['error_allocated'])} |" for row in unjudged])

    failed = defaultdict(list)
    for row in rows:
        if kind(row) == "failed":
            failed[_reason(row["error"])].append(row)
    absent = sum(1 for row in rows if kind(row) == "absent")
    whose = defaultdict(int)
    for group in failed.values():
        for row in group:
            whose[failure_kind(row["error"])] += 1
    lines += ["", f"**Failures** ({sum(map(len, failed.values()))} rows, by reason; "
              f"{absent} sdpa rows of classes without sdpa are not rows). Whose, as the "
              "message reads (FAILURE_KINDS in referee_table.py): " + "; ".join(
                  f"{what} {count}" for what, count in
                  sorted(whose.items(), key=lambda item: (-item[1], item[0]))) + ".", ""]
    if failed:
        lines += ["| rows | whose | reason (numbers and names as N and '…') | models |",
                  "|---:|---|---|---|"]
        for reason, group in sorted(failed.items(), key=lambda item: (-len(item[1]), item[0])):
            names = sorted({f"{row['family']}/{row['model']}" for row in group})
            shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12
                                             else "")
            found = failure_cause(group[0]["error"])
            lines.append(f"| {len(group)} | {failure_kind(group[0]['error'])} "
                         f"| {reason.replace('|', '/')}{f'; **{found}**' if found else ''} "
                         f"| {shown} |")
    else:
        lines.append("None.")
    lines += _packages(group for group in failed.values())
    lines += ["", END]
    return "\n".join(lines) + "\n"


_PACKAGE = re.compile(r"pip install `?([A-Za-z][\w-]*)|No module named '([\w]+)|requires the "
                      r"(\S+) librar")


def _packages(groups):
    """A line per package the venv lacks: the model types whose failure names it. The shared
    venv is not changed by the referee run, so what each would bring stays untried."""
    types = defaultdict(set)
    for group in groups:
        for row in group:
            found = _PACKAGE.search(row["error"])
            if found:
                types[next(name for name in found.groups() if name)].add(row["model"])
    if not types:
        return []
    return ["", "Packages the venv lacks (not installed: the venv is shared; each would take "
            "its model types past the import, whether they then run is not tried): " + "; ".join(
                f"`{package}` {len(names)} model type{'s' if len(names) > 1 else ''} ("
                + ", ".join(sorted(names)) + ")"
                for package, names in sorted(types.items(), key=lambda item: (-len(item[1]),
                                                                              item[0]))) + "."]


def page_with(table, page_text):
    """The page with its table replaced (or put at its top, under the title, if it has none)."""
    if BEGIN in page_text:
        before, rest = page_text.split(BEGIN, 1)
        if END not in rest:
            raise ValueError(f"{PAGE.name} has the table's first marker and not its last")
        after = rest.split(END, 1)[1].lstrip("\n")
        return before + table + "\n" + after
    title, _, rest = page_text.partition("\n")
    return f"{title}\n\n{table}\n{rest.lstrip()}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--write", action="store_true", help="put the table into the page")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the page's table is not the data file's")
    arguments = parser.parse_args(argv)
    if not Path(arguments.data).is_file():
        print(f"referee_table.py: error: no data file {arguments.data} (run referee.py)",
              file=sys.stderr)
        return 2
    table = render(read_rows(arguments.data))
    page = PAGE.read_text()
    if arguments.check:
        if page_with(table, page) != page:
            print(f"referee_table.py: {PAGE} does not hold the table {arguments.data} makes: "
                  "run tests/estimator/referee_table.py --write", file=sys.stderr)
            return 1
        return 0
    if arguments.write:
        PAGE.write_text(page_with(table, page))
        return 0
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
