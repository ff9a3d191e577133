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
from .estimate import BatchPoint, Estimate, LineEntry, ModuleEntry, estimate
from .report import report_data, report_stats
from .tracing import (annotate, is_tracing, last_trace, max_memory_allocated, memory_allocated, phase,
                      reset_peak_memory_stats, start_tracing, stop_tracing, switch_allocator, trace)

__all__ = [
    "BatchPoint",
    "Estimate",
    "LineEntry",
    "MemTracerError",
    "ModuleEntry",
    "annotate",
    "estimate",
    "is_tracing",
    "last_trace",
    "max_memory_allocated",
    "memory_allocated",
    "phase",
    "report_data",
    "report_stats",
    "reset_peak_memory_stats",
    "start_tracing",
    "stop_tracing",
    "switch_allocator",
    "trace",
]
__version__ = "0.1.0"
