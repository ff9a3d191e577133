// Reading Python source locations and statements, for front ends whose IR carries them as text.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "estimator/graph.h"

namespace memtrace::estimator {

// The names a Python statement binds: `out = ...` -> {out}; `q, k, v = ...` -> {q, k, v};
// `(a, b) = ...`, `x: Tensor = ...`, `out += ...` likewise. Attribute and subscript targets
// (`self.x = ...`, `d[k] = ...`) bind no local name and give nothing, as does anything that
// is not an assignment (`return f(x)`, `if x == y:`).
std::vector<std::string> assignmentTargets(std::string_view line);

// Whether an assignment (the whole statement, over its lines) binds one name to a container
// it builds: `masks = {"full": f(x), "sliding": g(x)}`, `outs = [f(x), g(x)]` (or a
// comprehension), `pair = f(x), g(x)`. Python's name then holds every element the statement
// made, not only what its last op returned.
bool bindsAContainerDisplay(std::string_view statement);

// The target of a statement that stores into an object rather than binding a name:
// `self.keys = torch.cat(...)` -> "self.keys", `cache[i] = x` -> "cache[i]". Nothing for any
// other statement. The value lives as long as the object, which the IR does not show.
std::optional<std::string> storedTarget(std::string_view line);

// What a `return` statement returns, one entry per element of the returned tuple: the name
// when the element is a bare name or a dotted one (`self.keys`, which a statement of the
// function may have stored), empty when it is an expression: `return self.proj(out),
// weights` -> {"", "weights"}. Nothing when the line is not a whole return statement.
std::optional<std::vector<std::string>> returnedNames(std::string_view line);

// Whether a line (its indentation stripped) begins a definition: `def`, `async def`, `class`
// or a decorator. Scanning down from a statement, such a line is past the end of its function.
bool beginsADefinition(std::string_view code);

// A traced TorchScript node's source text is the Python stack at trace time, innermost first,
// one frame a line: "/path/model.py(42): forward". Returns the frames, or nothing when the
// text is not such a stack (a scripted node's text is the source expression itself). Frames
// from torch/jit/_trace.py outward (the tracing machinery and the script that called it) are
// dropped: they are not part of the model.
std::optional<std::vector<SourceFrame>> parsePythonStack(std::string_view text);

// Splits a traced stack (innermost first) at its module calls: every nn.Module call while
// tracing goes through Module._slow_forward (torch/nn/modules/module.py), so the frames between
// two of those belong to one module's forward and the Python functions it called. Returns one
// segment per call, outermost first (segment 0 is what ran outside the traced module, segment
// d + 1 the module at call depth d), each innermost first, without module.py's wrapper frames.
std::vector<std::vector<SourceFrame>> splitByModuleCalls(const std::vector<SourceFrame>& stack);

// Lines of source files read from disk, each file once. For IRs that name the file and line
// but carry no source text (traced TorchScript).
class SourceFileCache {
 public:
  // The line (1-based), without its newline, or nothing when the file cannot be read.
  std::optional<std::string> line(const std::string& file, int64_t line_number);

  // The statement that begins at `first_line`, its lines joined by '\n' up to where its
  // brackets close; nothing when the file cannot be read.
  std::optional<std::string> statement(const std::string& file, int64_t first_line);

  // The first line of the statement that `line_number` belongs to. Python 3.11 reports the
  // line of the sub-expression running (`    2, 0, 3, 1, 4).unbind(0)`), not of the statement
  // (`q, k, v = qkv(x).reshape(...).permute(`); the statement starts where the brackets
  // open before that line close, or at `line_number` when the file cannot be read.
  int64_t statementStart(const std::string& file, int64_t line_number);

 private:
  std::map<std::string, std::optional<std::vector<std::string>>> files_;
  std::map<std::pair<std::string, int64_t>, int64_t> statement_starts_;
};

}  // namespace memtrace::estimator
