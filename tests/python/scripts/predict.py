"""report_stats(predict=...) end to end: a model runs eagerly on the CPU while fakecuda
stands in for the CUDA allocator; the estimator predicts the same model from its IR.

    python predict.py LIBCUDART TRACE REPORT_TXT"""
import ctypes
import json
import os
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))

import fakecuda  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import mem_tracer  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 256)
        self.l2 = nn.Linear(256, 10)

    def forward(self, x):
        h = fakecuda.track(self.l1(x))  # LINE:l1
        a = fakecuda.track(torch.relu(h))  # LINE:relu
        return fakecuda.track(self.l2(a))  # LINE:l2


model, x = Net(), torch.randn(32, 64)
mem_tracer.start_tracing(sys.argv[2])
with torch.no_grad():
    y = model(x)
mem_tracer.stop_tracing()
with open(sys.argv[3], "w") as report:
    mem_tracer.report_stats(frame="user", predict=(model, (x,)), file=report)
estimate = mem_tracer.estimate(model, (x,))
print(json.dumps({"method": estimate.method, "note": estimate.method_note,
                  "by_user_line": [[e.line, e.bytes] for e in estimate.by_user_line]}))
