"""`python -m mem_tracer.calibrate PROFILE -- COMMAND`, the documented name of
mem_tracer.simulated_gpu.calibrate (whose docstring says what it does): kept so that the command
docs/simulated-gpu.md gives keeps working where the module now lives with the simulated card."""
import sys

from .simulated_gpu.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
