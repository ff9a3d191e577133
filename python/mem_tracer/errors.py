"""The one exception mem_tracer raises for everything a user can fix."""


class MemTracerError(RuntimeError):
    """Something mem_tracer cannot do, with what to do about it in the message."""
