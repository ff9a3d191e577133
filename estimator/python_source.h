// Reading Python source locations and statements, for front ends whose IR carries them as text.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "estimator/graph.h"

namespace memtrace::estimator {

// Python source read as Python's tokenizer reads it, one character of code at a time, past
// strings and comments, with the depth of brackets. Every quote form is a string: '...',
// "...", '''...''', """...""", with the prefixes r, b, f, u, t in either case and their
// combinations (rb, Rb, fr, ...); a backslash escapes the character after it, in raw strings
// too (r"\"" is one string: only the escape's meaning differs there); in f-strings `{{` and
// `}}` are text and `{...}` a replacement field, read as code, whose strings may use the
// f-string's own quote (Python 3.12, PEP 701). A string that is not triple-quoted ends with its
// line unless a backslash escapes the line's end (an unterminated one, which Python rejects,
// is read as closed there). Every reader of Python text in the estimator goes through it.
//
// A statement read line by line keeps its state from one line to the next: brackets open, a
// triple-quoted string, an f-string's field.
class PythonCursor {
 public:
  PythonCursor() = default;
  explicit PythonCursor(std::string_view text) { read(text); }

  // Goes on into `text` (the statement's next line, or a whole text), where the last left off.
  void read(std::string_view text);
  // read(text), then to its end.
  void readAll(std::string_view text);
  // Moves to the next character of code; false at the end of the text.
  bool next();
  // The character of code next() moved to, and where it is in the text.
  char character() const { return text_[position_]; }
  size_t position() const { return position_; }

  // Brackets open, the character just read included. A closing bracket with none open closes
  // one opened before the text began: the depth stays 0, and closedUnopened() says so.
  int depth() const { return depth_; }
  bool closedUnopened() const { return closed_unopened_; }
  // Whether a string or a comment was passed over.
  bool passedStringOrComment() const { return passed_string_or_comment_; }
  // Whether the text read so far ends inside a string (or one of its fields).
  bool inString() const { return !open_.empty(); }
  // Whether the text read ends a statement: no bracket or string open, and its line does not
  // end in a backslash. Meaningful once next() has returned false.
  bool endsStatement() const { return depth_ == 0 && open_.empty() && !continues_; }

 private:
  // A string, or a replacement field of an f-string: what the cursor is inside of.
  struct Open {
    char quote = 0;  // the string's quote; 0: a replacement field
    bool triple = false;
    bool raw = false;
    bool formatted = false;    // an f-string (or a t-string): `{` opens a field
    int depth = 0;             // a field's own brackets
    bool format_spec = false;  // a field past its `:`: text, and `{...}` nested fields
  };

  void openStringAt(size_t prefix_length);
  void readInString();
  void readInField(char character);
  void readInFormatSpec();
  void endLine();

  std::string_view text_;
  size_t next_ = 0;
  size_t position_ = 0;
  std::vector<Open> open_;  // outermost first
  int depth_ = 0;
  bool closed_unopened_ = false;
  bool passed_string_or_comment_ = false;
  bool continues_ = false;    // the text ends in a backslash outside strings
  bool escaped_end_ = false;  // the text ends in a backslash inside a string
  bool last_was_backslash_ = false;
};

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

// What an assignment to one name takes of the result of the call it ends with: the first of
// the attribute accesses and subscripts after that call's parentheses, `x = a.max(dim=1).values`
// -> ".values", `out = layer(x)[0]` -> "[0]"; nothing when the call ends the statement or an
// operator follows it. Python binds that part; the rest of what the call returned (a named
// tuple's `indices`) dies with the temporary tuple.
std::optional<std::string> partTakenFromACall(std::string_view statement);

// The names a statement passes whole as positional arguments of a call: `h = torch.cat(output,
// dim=1)` -> {output}; `f(x.t(), [a, b], w=y)` -> {} (an expression, a display, a keyword).
std::vector<std::string> bareNameArguments(std::string_view statement);

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
