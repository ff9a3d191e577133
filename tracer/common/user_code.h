// Which Python files are the user's own code. memtrace-report's `--frame user` and the
// estimator's `user_frame` both attribute an allocation to the innermost frame in user code,
// and a report joins the two on that frame, so both must apply this one rule.
#pragma once

#include <string_view>

namespace memtrace {

// Not user code: the Python standard library (.../lib/pythonX.Y/), installed packages
// (site-packages, dist-packages), PyTorch run from a source checkout (torch/nn, torch/jit,
// torch/_tensor.py, torch/functional.py), memtrace's own Python package (mem_tracer/), and
// pseudo-files (<string>, <frozen ...>).
inline bool isUserCode(std::string_view path) {
  if (path.empty() || path.front() == '<') return false;
  if (path.find("/site-packages/") != std::string_view::npos) return false;
  if (path.find("/dist-packages/") != std::string_view::npos) return false;
  // CPython installs its library as .../lib/pythonX.Y/<module>.py.
  size_t at = path.find("/lib/python");
  if (at != std::string_view::npos) {
    size_t rest = at + std::string_view("/lib/python").size();
    if (rest < path.size() && path[rest] >= '0' && path[rest] <= '9') return false;
  }
  for (std::string_view torch :
       {"/torch/nn/", "/torch/jit/", "/torch/_tensor.py", "/torch/functional.py"})
    if (path.find(torch) != std::string_view::npos) return false;
  // memtrace's own package run from a checkout (installed, it is in site-packages): the wrapper
  // mem_tracer.estimate() traces a keyword call through is never where the user's code is.
  if (path.find("/mem_tracer/") != std::string_view::npos) return false;
  return true;
}

}  // namespace memtrace
