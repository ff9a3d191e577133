"""mem_tracer: where does my GPU memory go?

The Python door onto memtrace. In three lines::

    import mem_tracer
    mem_tracer.switch_allocator()          # before the first CUDA allocation
    mem_tracer.start_tracing()
    model(x)
    mem_tracer.stop_tracing()
    mem_tracer.report_stats()              # the per-line table at the peak

or, with no code change: ``python -m mem_tracer run script.py``.
"""
from .errors import MemTracerError
from .estimator.estimate import (
    BatchPoint,
    Device,
    Estimate,
    LineEntry,
    Method,
    ModuleEntry,
    Semantics,
    estimate,
)
from .estimator.parallel import DDP, FSDP, ParallelEstimate, Strategy
from .estimator.plan import Plan, checkpoint_modules, plan
from .estimator.training_step import Loop, TrainingStep
from .parameters import ParameterStats, parameter_stats
from .report import At, Frame, GroupBy, report_data, report_stats
from .tracing import (
    Stacks,
    annotate,
    is_tracing,
    last_trace,
    max_memory_allocated,
    memory_allocated,
    phase,
    reset_peak_memory_stats,
    start_tracing,
    stop_tracing,
    switch_allocator,
    trace,
)

__all__ = [
    "DDP",
    "FSDP",
    "At",
    "BatchPoint",
    "Device",
    "Estimate",
    "Frame",
    "GroupBy",
    "LineEntry",
    "Loop",
    "MemTracerError",
    "Method",
    "ModuleEntry",
    "ParallelEstimate",
    "ParameterStats",
    "Plan",
    "Semantics",
    "Stacks",
    "Strategy",
    "TrainingStep",
    "annotate",
    "checkpoint_modules",
    "estimate",
    "is_tracing",
    "last_trace",
    "max_memory_allocated",
    "memory_allocated",
    "parameter_stats",
    "phase",
    "plan",
    "report_data",
    "report_stats",
    "reset_peak_memory_stats",
    "start_tracing",
    "stop_tracing",
    "switch_allocator",
    "trace",
]


def _version() -> str:
    """The file VERSION when run from the source tree (python/mem_tracer beside it), else the
    installed distribution's version (pyproject.toml read the same file when it was built)."""
    import importlib.metadata
    from pathlib import Path

    source = Path(__file__).resolve().parent.parent.parent / "VERSION"
    if Path(__file__).resolve().parent.parent.name == "python" and source.is_file():
        return source.read_text().strip()
    try:
        return importlib.metadata.version("mem_tracer")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__version__ = _version()
