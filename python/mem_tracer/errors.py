"""The one exception mem_tracer raises for everything a user can fix, and how a caught one is
said in one line."""


class MemTracerError(RuntimeError):
    """Something mem_tracer cannot do, with what to do about it in the message."""


def first_line(error: BaseException) -> str:
    """An exception's message in one line (its first), or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
