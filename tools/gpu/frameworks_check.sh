#!/usr/bin/env bash
# The GPU check of issue 24's entry points, for the lead's GPU run (see frameworks_check.py):
#   tools/gpu/frameworks_check.sh BUILD OUT [--dry-run] [--jobs a,b] [--python PYTHON]
# --dry-run works without a GPU (the C++ jobs against the simulated GPU's runtime).
set -euo pipefail
exec python3 "$(dirname "$0")/frameworks_check.py" "$@"
