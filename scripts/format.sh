#!/usr/bin/env bash
# Formats every C and C++ source of the repository with the committed .clang-format (Google
# style, 100 columns), or with --check says which files are not formatted and exits non-zero (a
# ctest entry runs this). Every tracked file with a C or C++ extension: what the build generates
# lives in build/, which git does not track, so no list of folders can miss a new file.
# clang-format 14 is the version scripts/setup.sh installs (Debian 12's): other versions format
# a few constructs differently, so the check uses that one.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.cxx' '*.hpp' '*.hh' '*.cu' '*.cuh')
if [[ ${1:-} == --check ]]; then
  clang-format --dry-run -Werror "${files[@]}"
  echo "format: ${#files[@]} files formatted as .clang-format says"
else
  clang-format -i "${files[@]}"
fi
