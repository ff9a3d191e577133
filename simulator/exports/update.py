"""Writes simulator/exports/*.exports: the functions each library of the simulated GPU exports.

    python3 simulator/exports/update.py VENV_SITE_PACKAGES [CUDA_INCLUDE]

Run by a developer when the CUDA release the simulated device stands for changes (not by the
build). It reads what NVIDIA's libraries export (`readelf --dyn-syms` on the CUDA build of
torch's wheels) and, for the driver, which no wheel carries, what the toolkit's cuda.h declares.
Each function gets a policy for when memtrace does not implement it (docs/simulated-gpu.md, "What it is"):
  noop    success and nothing done: a call that only launches work on the device
  refuse  a one-line error naming the function, and the library's "not supported" status
A function memtrace implements overrides either (the generated stubs are weak); `own` marks a
function of the simulator's own that the library exports. Names that
answer something to the host (Get, Create, Query, sizes, heuristics) are refused, so that a
question the simulated device cannot answer never gets a silent made-up answer."""
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (list name, soname, library file under nvidia/, symbol version, status when refused, default)
LIBRARIES = [
    ("cudart", "libcudart.so.13", "cu13/lib/libcudart.so.13", "libcudart.so.13", 801, "refuse"),
    ("cublas", "libcublas.so.13", "cu13/lib/libcublas.so.13", "libcublas.so.13", 15, "noop"),
    ("cublasLt", "libcublasLt.so.13", "cu13/lib/libcublasLt.so.13", "libcublasLt.so.13", 15,
     "noop"),
    ("cudnn", "libcudnn.so.9", "cudnn/lib/libcudnn.so.9", "libcudnn.so.9", 3000, "noop"),
    ("nccl", "libnccl.so.2", "nccl/lib/libnccl.so.2", None, 5, "noop"),
    ("nvrtc", "libnvrtc.so.13", "cu13/lib/libnvrtc.so.13", "libnvrtc.so.13", 11, "refuse"),
    ("cufft", "libcufft.so.12", "cu13/lib/libcufft.so.12", "libcufft.so.12", 16, "noop"),
    ("cusolver", "libcusolver.so.12", "cu13/lib/libcusolver.so.12", "libcusolver.so.12", 9,
     "noop"),
    ("cusparse", "libcusparse.so.12", "cu13/lib/libcusparse.so.12", "libcusparse.so.12", 10,
     "noop"),
]

# A function whose name says it answers the host is refused unless implemented.
ANSWERS = re.compile(r"Get|Create|Query|[Bb]ufferSize|WorkspaceSize|Find|Heuristic|Init|Plan|"
                     r"Version|Property|Attribute|Info|Size|Estimate|Count|Rank|Alloc|Register")


def exported_functions(path):
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], capture_output=True,
                         text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[3] == "FUNC" and fields[6] != "UND":
            name = fields[7].split("@")[0]
            if not name.startswith("_") or name.startswith("__cuda"):
                names.add(name)
    return sorted(names)


def driver_functions(include):
    """(symbol, lookup name, version) for every function cuda.h declares, legacy and per-thread
    default stream forms, with the CUDA version cudaTypedefs.h gives its newest form."""
    def declared(defines):
        source = defines + "#include <cuda.h>\n"
        text = subprocess.run(["g++", "-E", "-P", "-x", "c++", "-", f"-I{include}"],
                              input=source, capture_output=True, text=True, check=True).stdout
        return set(re.findall(r"CUresult\s+(cu\w+)\s*\(", text))
    legacy = declared("")
    per_thread = declared("#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1\n") - legacy
    typedefs = (Path(include) / "cudaTypedefs.h").read_text()
    since = {}
    for name, version in re.findall(r"PFN_(cu\w+?)_v(\d+)(?:_ptsz|_ptds)?\)", typedefs):
        since[name] = max(since.get(name, 0), int(version))
    rows = []
    for symbol in sorted(legacy | per_thread):
        base = re.sub(r"_(ptsz|ptds)$", "", symbol)
        lookup = re.sub(r"_v\d+$", "", base)
        rows.append((symbol, lookup, since.get(lookup, 0)))
    return rows


def write(name, soname, version, status, default, rows, source):
    lines = [f"# {soname}: the functions memtrace's simulated GPU exports in its place.",
             f"# Written by simulator/exports/update.py from {source}; the policies may be edited.",
             f"soname {soname}"]
    if version:
        lines.append(f"version {version}")
    lines.append(f"refused-status {status}")
    lines.extend(rows)
    (HERE / f"{name}.exports").write_text("\n".join(lines) + "\n")


def main():
    site = Path(sys.argv[1])
    include = sys.argv[2] if len(sys.argv) > 2 else "/usr/local/cuda/include"
    for name, soname, path, version, status, default in LIBRARIES:
        rows = []
        for function in exported_functions(site / "nvidia" / path):
            policy = default
            if name != "cudart" and ANSWERS.search(function[len(name):]):
                policy = "refuse"
            rows.append(f"{function} {policy}")
        write(name, soname, version, status, default, rows, f"NVIDIA's {Path(path).name}")
    rows = [f"{symbol} refuse {lookup} {since}" for symbol, lookup, since in
            driver_functions(include)]
    # The simulated runtime's way to the driver (simulator/driver/driver.h).
    rows.append("simgpu_driver_proc_address own")
    # cuMemAlloc of a CUDA newer than any, for memtrace's tests (simulator/driver/driver.cpp).
    rows.append("simgpu_testing_cuMemAlloc_future own")
    # CUDA 11.3's cuGetProcAddress, which cuda.h names no longer (simulator/driver/driver.cpp).
    rows.append("cuGetProcAddress own")
    write("cuda", "libcuda.so.1", None, 801, "refuse", rows, "the toolkit's cuda.h")


if __name__ == "__main__":
    main()
