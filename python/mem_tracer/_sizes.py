"""Byte counts for people, as the package's own text says them: one rule for every line it
writes (the pytest plugin's limits and summaries, the parameter statistics)."""


def size_text(size: int) -> str:
    """``size`` bytes in the largest binary unit that keeps the value at least 1, two decimals:
    "512 B", "6.25 KiB", "250.00 MiB", "24.00 GiB" (negative sizes keep their sign). The
    pytest plugin's output has been written so since it was first documented
    (docs/pytest-plugin.md); memtrace-report's views write four significant digits instead
    (tracer/common/byte_format.h), where columns of sizes are compared."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(size) >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"
