"""The line the user acts on, by default (Note [The line the user acts on] in
tracer/report/locations.h): a training step run as a user runs it, `memtrace run train.py`, on
the simulated GPU with PyTorch's CUDA build. Its model is a package being developed (found on
the path, as an editable install finds its checkout) and one step is a notebook cell (IPython
names a cell's code <ipython-input-N-HASH>). Every view names the script's, the package's and
the cell's lines; torch's frames are one option away (--frame innermost); memtrace's own frames
(its runner, its training hooks) and runpy's are in none of them.

What this assumes of the real platform: nothing beyond what the other tests of the simulated
device do; which Python frames are on the stack does not depend on the device."""
import json
import re
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, Build, report_json, run

CELL = "<ipython-input-7-0a1b2c3d4e5f>"

MODEL = '''import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(512, 2048)
        self.down = nn.Linear(2048, 512)

    def forward(self, x):
        hidden = torch.relu(self.up(x))  # model.py:12
        return self.down(hidden)  # model.py:13
'''

TRAIN = f'''import torch
from mypkg.model import Net

model = Net().to("cuda")  # train.py:4
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(256, 512, device="cuda")  # train.py:6
for step in range(2):
    loss = model(x).square().mean()  # train.py:8
    loss.backward()  # train.py:9
    opt.step()  # train.py:10
    opt.zero_grad(set_to_none=False)
cell = compile("kept = [model(x) for _ in range(32)]\\nscores = torch.cat(kept)\\n", "{CELL}", "exec")
namespace = {{"model": model, "x": x, "torch": torch}}
exec(cell, namespace)  # a notebook cell, train.py:14
'''


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    work = tmp_path_factory.mktemp("user-line")
    (work / "src" / "mypkg").mkdir(parents=True)
    (work / "src" / "mypkg" / "__init__.py").write_text("")
    (work / "src" / "mypkg" / "model.py").write_text(MODEL)
    script = work / "train.py"
    script.write_text(TRAIN)
    trace = work / "train.bin"
    result = run([sys.executable, "-m", "mem_tracer", "run", "-o", trace, script],
                 {"PYTHONPATH": f"{ROOT / 'python'}:{work / 'src'}"}, timeout=600)
    return work, trace, result.stdout + result.stderr


def users_file(location, work):
    return (location.startswith(str(work / "train.py")) or location.startswith(str(work / "src" / "mypkg"))
            or location.startswith(CELL))


def test_every_view_names_the_users_lines_by_default(traced):
    work, trace, said = traced
    rows = report_json(trace, "--top", "0")["live"]["rows"]
    python = [row for row in rows if row["kind"] == "python"]
    assert python and sum(row["bytes"] for row in python) >= 0.9 * sum(row["bytes"] for row in rows)
    for row in python:
        assert users_file(row["location"], work), row["location"]
    lines = {re.sub(r".*/", "", row["location"]) for row in python}
    # Weights (.to), the optimizer's state (opt.step), gradients (loss.backward) and the
    # forward's activations, named in the package being developed:
    assert {"train.py:4 (<module>)", "train.py:9 (<module>)", "train.py:10 (<module>)",
            "model.py:12 (forward)"} <= lines, lines
    assert any(row["location"].startswith(CELL) for row in python), lines
    # The text report memtrace run printed says the same, without memtrace's frames.
    table = said.split("by line in user code")[1]
    assert "train.py:4 (<module>)" in table
    for own in ("mem_tracer", "runpy"):
        assert own not in table


def test_the_allocating_frame_is_one_option_away(traced):
    _, trace, _ = traced
    rows = report_json(trace, "--top", "0", "--frame", "innermost")["live"]["rows"]
    assert any("/torch/" in row["location"] for row in rows)
    assert not any("mem_tracer/" in row["location"] or "runpy" in row["location"] for row in rows)


def test_full_stacks_start_at_the_program(traced):
    work, trace, _ = traced
    folded = run([Build.report, "flamegraph", trace, "--format", "folded"]).stdout.splitlines()
    assert folded
    for line in folded:
        stack = line.rsplit(" ", 1)[0]
        assert "mem_tracer/" not in stack and "runpy" not in stack, stack
        root = stack.split(";")[0]
        assert root.startswith(str(work / "train.py")) or not root.endswith(")"), root
    by_stack = report_json(trace, "--group-by", "stack", "--top", "0")["live"]["rows"]
    assert all("mem_tracer/" not in row["location"] for row in by_stack)


def test_the_page_leads_with_the_users_line(traced, tmp_path):
    work, trace, _ = traced
    page = tmp_path / "train.html"
    run([Build.report, "html", trace, "-o", page])
    text = page.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="memtrace-data">(.*?)</script>',
                                text, re.S).group(1))
    rows = data["table"]["rows"]
    assert rows and users_file(rows[0]["location"], work), rows[0]["location"]
    assert "mem_tracer/_run.py" not in text and "frozen runpy" not in text
