"""The simulated GPU: PyTorch's CUDA build (or any CUDA program) run on a card that exists only
in the process's memory (docs/simulated-gpu.md). What `memtrace run --gpu PROFILE` runs on.

    python -m mem_tracer.simulated_gpu PROFILE [--memory SIZE] [--devices N] -- command [args...]

runs a command on the simulated card without tracing it (what the tests compare a traced run
with). PROFILE is a profile's name (`profiles()`: h100-80gb, h200, a100-40gb, a100-80gb, l4,
rtx-4090, or an alias such as h100) or the path of a profile file."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import _native
from ..errors import MemTracerError

# The libraries that stand in for NVIDIA's, in the order they are preloaded: each under the
# file name (soname) the program's own CUDA libraries ask for, so that the dynamic linker takes
# the simulated one for every later request of that name (Note [Standing in for NVIDIA's
# libraries] in simulator/CMakeLists.txt).
LIBRARIES = ("libcuda.so.1", "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
             "libcudnn.so.9", "libnccl.so.2", "libnvrtc.so.13", "libcufft.so.12",
             "libcusolver.so.12", "libcusparse.so.12", "libnvidia-ml.so.1")

# How `memtrace run` treats values on the simulated card (mem_tracer.simulated_gpu.values, which
# imports torch; these are here for the callers that must not): "known", Note [Known values on
# the simulated card]; "cpu", every op's values computed on the host beside the card, in at
# most MEMTRACE_GPU_VALUES_MEMORY bytes (Note [Real values beside the card]); "zeros", every
# value a kernel computes reads as zero.
VALUES_VARIABLE = "MEMTRACE_GPU_VALUES"
VALUES_MEMORY_VARIABLE = "MEMTRACE_GPU_VALUES_MEMORY"
VALUES = ("known", "cpu", "zeros")

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$")
_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


@dataclass(frozen=True)
class Profile:
    """A card the simulated GPU can be (simulator/profiles/*.json)."""

    name: str
    path: Path
    device_name: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    estimator_profile: str
    aliases: tuple[str, ...]


def parse_size(text: str) -> int:
    """Bytes of "24GiB", "80GB", "1.5 TiB" or "1024"; MemTracerError otherwise."""
    match = _SIZE.match(text)
    if not match:
        raise MemTracerError(f"{text!r} is not a size (write 24GiB, 80GB or a number of bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _read(path: Path) -> Profile:
    try:
        data = json.loads(path.read_text())
        return Profile(name=data["name"], path=path, device_name=data["device_name"],
                       memory_bytes=int(data["memory_bytes"]),
                       compute_capability=(int(data["compute_capability"][0]),
                                           int(data["compute_capability"][1])),
                       estimator_profile=data.get("estimator_profile", ""),
                       aliases=tuple(data.get("aliases", ())))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
        raise MemTracerError(f"the GPU profile {path} cannot be read: {error}") from error


def profiles() -> list[Profile]:
    """Every profile that comes with memtrace, by name."""
    folder = _native.simulator_directory() / "profiles"
    return sorted((_read(path) for path in folder.glob("*.json")), key=lambda p: p.name)


def profile(name: str) -> Profile:
    """The profile of that name or alias (any case), or of that file; MemTracerError naming the
    ones there are otherwise."""
    candidate = Path(name)
    if candidate.suffix == ".json" and candidate.is_file():
        return _read(candidate)
    known = profiles()
    wanted = name.lower()
    for found in known:
        if wanted == found.name or wanted in found.aliases:
            return found
    names = ", ".join(p.name for p in known)
    raise MemTracerError(f"no GPU profile {name!r} (there are: {names}; or give a profile file)")


def environment(card: str | Profile, *, memory: int | None = None, devices: int = 1,
                max_reads: int | None = None, refuse_unknown_sizes: bool = False,
                values: str | None = None, values_memory: int | None = None,
                base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that runs a program on the simulated `card`: its libraries preloaded
    (after whatever LD_PRELOAD already holds, memtrace's library first), its profile, and
    `memory` bytes a device instead of the profile's when given, a limit on the reads of
    device values (Note [A run that waits on a value] in simulator/core/device.cpp), with
    `refuse_unknown_sizes` a refusal of every size a library cannot know instead of an estimate
    (Note [Sizes nobody measured] in simulator/core/sizes.cpp), and how `memtrace run` treats
    values (`values`: VALUES; `values_memory`: the host memory "cpu" may hold)."""
    chosen = card if isinstance(card, Profile) else profile(card)
    folder = _native.simulator_directory() / "lib"
    missing = [name for name in LIBRARIES if not (folder / name).is_file()]
    if missing:
        raise MemTracerError(f"the simulated GPU's libraries are not built ({folder} lacks "
                             f"{', '.join(missing)}): run `make build`")
    result = dict(os.environ if base is None else base)
    ours = [str(folder / name) for name in LIBRARIES]
    # Idempotent: an environment already on the simulated GPU keeps one copy of its libraries.
    preload = [entry for entry in result.get("LD_PRELOAD", "").replace(":", " ").split()
               if entry and entry not in ours]
    result["LD_PRELOAD"] = " ".join([*preload, *ours])
    result["MEMTRACE_GPU_PROFILE"] = str(chosen.path)
    result["MEMTRACE_GPU_COUNT"] = str(devices)
    if memory is not None:
        result["MEMTRACE_GPU_MEMORY"] = str(memory)
    else:
        result.pop("MEMTRACE_GPU_MEMORY", None)
    if max_reads:
        result["MEMTRACE_GPU_MAX_READS"] = str(max_reads)
    else:
        result.pop("MEMTRACE_GPU_MAX_READS", None)
    if refuse_unknown_sizes:
        result["MEMTRACE_GPU_UNKNOWN_SIZES"] = "refuse"
    else:
        result.pop("MEMTRACE_GPU_UNKNOWN_SIZES", None)
    for variable, value in ((VALUES_VARIABLE, values), (VALUES_MEMORY_VARIABLE, values_memory)):
        if value:
            result[variable] = str(value)
        else:
            result.pop(variable, None)
    # Triton links its launcher against the driver it finds here (the simulated libcuda.so).
    result["TRITON_LIBCUDA_PATH"] = str(folder)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mem_tracer.simulated_gpu",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a profile's name or alias, or a profile file")
    parser.add_argument("--memory", help="each device's memory instead of the profile's (24GiB)")
    parser.add_argument("--devices", type=int, default=1, help="devices (default: 1)")
    parser.add_argument("--max-reads", type=int, default=None,
                        help="fail reads of device values past N (default: no limit)")
    parser.add_argument("--refuse-unknown-sizes", action="store_true",
                        help="refuse the sizes a simulated library cannot know (cuFFT's plans, "
                             "cuSOLVER's buffers, cuDNN's RNN spaces) instead of estimating them")
    argv = sys.argv[1:] if argv is None else argv
    # Everything after "--" is the command, untouched (its options are its own).
    split = argv.index("--") if "--" in argv else len(argv)
    arguments = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("give a command to run")
    try:
        memory = parse_size(arguments.memory) if arguments.memory else None
        env = environment(arguments.profile, memory=memory, devices=arguments.devices,
                          max_reads=arguments.max_reads,
                          refuse_unknown_sizes=arguments.refuse_unknown_sizes)
    except MemTracerError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    return subprocess.call(command, env=env)

