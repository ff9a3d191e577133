"""`python -m mem_tracer.simulated_gpu PROFILE -- command`: runs a command on the simulated card
without tracing it (the package's docstring says how)."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
