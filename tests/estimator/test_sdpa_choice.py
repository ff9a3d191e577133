"""sdpa's kernel choice in Python (mem_tracer.estimator.device_kernels) answers every case of
sdpa_cases.json as the file says, kernel and reason word for word; the estimator's C++ is held
to the same file by tests/estimator/unit/sdpa_choice_test.cpp (Note [sdpa's kernel choice]).
Also: the two readers of a profile agree on what they refuse."""
import dataclasses
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from mem_tracer._torch_internals import torch_release  # noqa: E402
from mem_tracer.estimator import device_kernels  # noqa: E402

CASES = json.loads((Path(__file__).with_name("sdpa_cases.json")).read_text())["cases"]
PROFILES = ROOT / "estimator" / "profiles"


def _tensor(spec):
    return device_kernels.SdpaTensor(tuple(spec["sizes"]), spec.get("last_stride", 1),
                                     spec.get("nested", False))


def _call(case):
    return device_kernels.SdpaCall(
        _tensor(case["query"]), _tensor(case["key"]), _tensor(case["value"]), case["dtype"],
        case["element_size"], case.get("mask", False), case.get("dropout", 0.0),
        case.get("is_causal", False), case.get("enable_gqa", False))


def _shared_rules(path):
    """The profile's rules as both readers take them: `gqa` as stated (gqa_from_torch, which
    makes it true from a torch release on, is the recording's alone)."""
    rules = device_kernels.kernel_rules(path)
    stated = json.loads(path.read_text())["kernels"]["sdpa"]
    return dataclasses.replace(rules, sdpa=tuple(
        dataclasses.replace(kernel, gqa=stated[kernel.name].get("gqa", True))
        for kernel in rules.sdpa))


@pytest.mark.parametrize("case", CASES, ids=[f"{c['profile']}: {c['name']}" for c in CASES])
def test_python_answers_the_shared_case(case):
    rules = _shared_rules(PROFILES / f"{case['profile']}.json")
    assert device_kernels.sdpa_choice(rules, _call(case)) == (case["kernel"], case["why"])


def test_every_profile_and_kernel_is_covered():
    profiles = {path.stem for path in PROFILES.glob("*.json")} - {"cuda-no-cublas-workspace"}
    assert {case["profile"] for case in CASES} == profiles
    kernels = {kernel.name for profile in profiles
               for kernel in device_kernels.kernel_rules(PROFILES / f"{profile}.json").sdpa}
    assert {case["kernel"] for case in CASES} == kernels | {"math"}


def test_the_python_reader_keeps_every_field_the_profile_states():
    for path in PROFILES.glob("*.json"):
        document = json.loads(path.read_text())
        sdpa = document.get("kernels", {}).get("sdpa", {})
        for kernel in device_kernels.kernel_rules(path).sdpa:
            stated = sdpa[kernel.name]
            for key, value in stated.items():
                if key in ("gqa", "gqa_from_torch"):
                    # gqa_from_torch: `gqa` true from that torch release on (the recording's).
                    since = stated.get("gqa_from_torch")
                    newer = since is not None and torch_release() >= torch_release(since)
                    assert kernel.gqa == (stated.get("gqa", True) or newer), (path.name, key)
                    continue
                read = getattr(kernel, key)
                assert (list(read) if key == "dtypes" else read) == value, (path.name, key)


@pytest.mark.parametrize(("change", "message"), [
    ({"order": ["flash", "turbo", "math"]}, "unknown sdpa kernel 'turbo'"),
    ({"flash": {"dtypes": "float16"}}, "'dtypes' must be a list of dtype names"),
    ({"flash": {"dtypes": ["float16"], "mask": 1}}, "'mask' must be true or false"),
    ({"flash": {"dtypes": ["float16"], "max_head_dim": -1}},
     "'max_head_dim' must be a non-negative integer"),
    ({"flash": {"dtypes": ["float16"], "gqa_from_torch": 2.14}},
     "'gqa_from_torch' must be a release"),
])
def test_the_python_reader_refuses_what_the_estimator_refuses(tmp_path, change, message):
    document = json.loads((PROFILES / "cuda.json").read_text())
    document["kernels"]["sdpa"].update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(device_kernels.KernelRulesError, match=message):
        device_kernels.kernel_rules(path)
