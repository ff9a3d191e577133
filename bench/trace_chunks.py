"""What the benchmarks read of a trace file: its bytes up to the open chunk."""


def chunk_bytes(path):
    """A closed or flushed trace's bytes up to its open chunk (as bench/record_bench.cpp's
    fileBytes reads it): a mapped trace's file is longer than its records."""
    end = 16
    with open(path, "rb") as file:
        while True:
            file.seek(end)
            header = file.read(12)
            size = int.from_bytes(header[:4], "little") if len(header) == 12 else 0
            if size == 0:
                return end
            end += 12 + size
