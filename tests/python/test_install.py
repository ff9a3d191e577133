"""`pip install` from the repository: the package finds its native library and tools inside
itself, with no environment variable and no checkout on its path."""
import json
import subprocess
import sys
from pathlib import Path

from memtrace_testing import ROOT, run

SCRIPTS = Path(__file__).parent / "scripts"


def test_pip_install_then_trace(build, tmp_path):
    venv = tmp_path / "venv"
    # --system-site-packages: torch and scikit-build-core come from this interpreter; no build
    # isolation, so that nothing is downloaded.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", ROOT], timeout=1800)
    where = run([python, "-c", "import mem_tracer._native as n; print(n.library_path()); "
                 "print(n.tool_path('memtrace-report'))"], cwd=tmp_path).stdout.split()
    site = Path(run([python, "-c", "import mem_tracer, os; print(os.path.dirname(mem_tracer.__file__))"],
                    cwd=tmp_path).stdout.strip())
    assert site.is_relative_to(venv)
    assert where == [str(site / "lib" / "libmemtrace.so"), str(site / "bin" / "memtrace-report")]
    result = run([python, SCRIPTS / "flow.py", build.cudart, tmp_path / "t.bin", tmp_path / "r.txt"],
                 cwd=tmp_path)
    assert json.loads(result.stdout.splitlines()[-1])["data"]["summary"]["peak_bytes"] == 80 << 20
