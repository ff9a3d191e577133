#include "estimator/python_source.h"

#include <algorithm>
#include <cctype>
#include <fstream>

namespace memtrace::estimator {

namespace {

bool isIdentifierStart(char character) {
  return std::isalpha(static_cast<unsigned char>(character)) || character == '_';
}

bool isIdentifierPart(char character) {
  return std::isalnum(static_cast<unsigned char>(character)) || character == '_';
}

void skipSpaces(std::string_view text, size_t& position) {
  while (position < text.size() && (text[position] == ' ' || text[position] == '\t')) ++position;
}

bool isAssignmentOperator(std::string_view text, size_t position, size_t& length) {
  // `=` but not `==`; augmented assignments bind their target too.
  static const char* const kAugmented[] = {
      "+=", "-=", "*=", "/=", "//=", "%=", "@=", "&=", "|=", "^=", "**=", ">>=", "<<="};
  std::string_view rest = text.substr(position);
  if (rest.starts_with("=") && !rest.starts_with("==")) {
    length = 1;
    return true;
  }
  for (const char* candidate : kAugmented) {
    if (rest.starts_with(candidate)) {
      length = std::string_view(candidate).size();
      return true;
    }
  }
  return false;
}

}  // namespace

namespace {

// The names an assignment binds, and where its right-hand side begins.
std::optional<std::pair<std::vector<std::string>, size_t>> parseAssignment(std::string_view line) {
  std::vector<std::string> names;
  size_t position = 0;
  skipSpaces(line, position);
  bool parenthesized = position < line.size() && line[position] == '(';
  if (parenthesized) ++position;
  while (true) {
    skipSpaces(line, position);
    if (position >= line.size() || !isIdentifierStart(line[position])) return std::nullopt;
    size_t start = position;
    while (position < line.size() && isIdentifierPart(line[position])) ++position;
    names.emplace_back(line.substr(start, position - start));
    skipSpaces(line, position);
    if (position < line.size() && line[position] == ',') {
      ++position;
      continue;
    }
    break;
  }
  if (parenthesized) {
    if (position >= line.size() || line[position] != ')') return std::nullopt;
    ++position;
    skipSpaces(line, position);
  }
  if (position < line.size() && line[position] == ':' && names.size() == 1) {
    // An annotation: `x: Tensor = ...`. Skip to the `=`.
    size_t equals = line.find('=', position);
    if (equals == std::string_view::npos) return std::nullopt;
    position = equals;
  }
  size_t length = 0;
  if (!isAssignmentOperator(line, position, length)) return std::nullopt;
  if (names.size() == 1 && (names.front() == "return" || names.front() == "yield")) {
    return std::nullopt;
  }
  return std::make_pair(std::move(names), position + length);
}

// Where the bracket opening at `open` closes, skipping strings and comments; npos when the
// text ends first.
size_t matchingBracket(std::string_view text, size_t open) {
  int depth = 0;
  char quote = 0;
  for (size_t position = open; position < text.size(); ++position) {
    char character = text[position];
    if (quote) {
      if (character == '\\') {
        ++position;
      } else if (character == quote) {
        quote = 0;
      }
      continue;
    }
    if (character == '"' || character == '\'') {
      quote = character;
    } else if (character == '#') {
      position = text.find('\n', position);
      if (position == std::string_view::npos) return position;
    } else if (character == '(' || character == '[' || character == '{') {
      ++depth;
    } else if ((character == ')' || character == ']' || character == '}') && --depth == 0) {
      return position;
    }
  }
  return std::string_view::npos;
}

// Whether `text` holds nothing but spaces, line breaks and a comment.
bool onlyLayout(std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n\\");
  return first == std::string_view::npos || text[first] == '#';
}

// Whether `text` has a comma outside every bracket and string.
bool hasTopLevelComma(std::string_view text) {
  for (size_t position = 0; position < text.size(); ++position) {
    char character = text[position];
    if (character == '(' || character == '[' || character == '{' || character == '"' ||
        character == '\'') {
      if (character == '"' || character == '\'') {
        size_t close = text.find(character, position + 1);
        if (close == std::string_view::npos) return false;
        position = close;
        continue;
      }
      position = matchingBracket(text, position);
      if (position == std::string_view::npos) return false;
    } else if (character == '#') {
      position = text.find('\n', position);
      if (position == std::string_view::npos) return false;
    } else if (character == ',') {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> assignmentTargets(std::string_view line) {
  auto assignment = parseAssignment(line);
  return assignment ? std::move(assignment->first) : std::vector<std::string>();
}

bool bindsAContainerDisplay(std::string_view statement) {
  auto assignment = parseAssignment(statement);
  if (!assignment || assignment->first.size() != 1) return false;
  size_t position = assignment->second;
  skipSpaces(statement, position);
  if (position >= statement.size()) return false;
  std::string_view value = statement.substr(position);
  char open = value.front();
  if (open == '{' || open == '[' || open == '(') {
    size_t close = matchingBracket(value, 0);
    if (close == std::string_view::npos) return false;
    // Something after the brackets (`[x, y][0]`, `(a, b)[0] + c`): a tuple only with a comma.
    if (!onlyLayout(value.substr(close + 1))) return hasTopLevelComma(value);
    // A dict or list display (or comprehension) holds its elements; a parenthesized
    // expression is a tuple only with a comma inside.
    return open != '(' || hasTopLevelComma(value.substr(1, close - 1));
  }
  return hasTopLevelComma(value);  // `pair = f(x), g(x)`
}

bool beginsADefinition(std::string_view code) {
  return code.starts_with("def ") || code.starts_with("async def ") || code.starts_with("class ") ||
         code.starts_with("@");
}

std::optional<std::string> storedTarget(std::string_view line) {
  size_t position = 0;
  skipSpaces(line, position);
  size_t start = position;
  if (position >= line.size() || !isIdentifierStart(line[position])) return std::nullopt;
  // A dotted name with subscripts: self.cache.keys[i]; a comma (unpacking) or a call is not
  // a plain store.
  bool stores = false;
  while (position < line.size()) {
    char character = line[position];
    if (isIdentifierPart(character)) {
      ++position;
    } else if (character == '.' && position + 1 < line.size() &&
               isIdentifierStart(line[position + 1])) {
      stores = true;
      ++position;
    } else if (character == '[') {
      // To the matching bracket: a subscript may hold one (`x[a.shape[0]] = v`).
      int depth = 0;
      size_t close = position;
      for (; close < line.size(); ++close) {
        if (line[close] == '[') ++depth;
        if (line[close] == ']' && --depth == 0) break;
      }
      if (close >= line.size()) return std::nullopt;
      stores = true;
      position = close + 1;
    } else {
      break;
    }
  }
  size_t end = position;
  skipSpaces(line, position);
  size_t length = 0;
  if (!stores || !isAssignmentOperator(line, position, length)) return std::nullopt;
  return std::string(line.substr(start, end - start));
}

std::optional<std::vector<std::string>> returnedNames(std::string_view line) {
  size_t position = 0;
  skipSpaces(line, position);
  if (line.substr(position, 6) != "return" || position + 6 >= line.size() ||
      isIdentifierPart(line[position + 6])) {
    return std::nullopt;
  }
  position += 6;
  // Split at the commas outside brackets; a line whose brackets do not close (the statement
  // goes on) or that holds a string or comment is left alone.
  std::vector<std::string_view> elements;
  int depth = 0;
  size_t start = position;
  for (; position < line.size(); ++position) {
    char character = line[position];
    if (character == '#' || character == '"' || character == '\'' || character == '\\') {
      return std::nullopt;
    }
    if (character == '(' || character == '[' || character == '{') ++depth;
    if (character == ')' || character == ']' || character == '}') --depth;
    if (depth < 0) return std::nullopt;
    if (character == ',' && depth == 0) {
      elements.push_back(line.substr(start, position - start));
      start = position + 1;
    }
  }
  if (depth != 0) return std::nullopt;
  elements.push_back(line.substr(start));
  if (elements.size() > 1 && elements.back().find_first_not_of(" \t") == std::string_view::npos) {
    elements.pop_back();  // `return a, b,`
  }
  std::vector<std::string> names;
  for (std::string_view element : elements) {
    size_t first = element.find_first_not_of(" \t");
    size_t last = element.find_last_not_of(" \t");
    std::string_view text = first == std::string_view::npos
                                ? std::string_view()
                                : element.substr(first, last - first + 1);
    // A name, or an attribute a statement stored (`return self.keys, self.values`).
    bool bare = !text.empty() && isIdentifierStart(text.front()) && text.back() != '.' &&
                text.find("..") == std::string_view::npos &&
                std::all_of(text.begin(), text.end(), [](char character) {
                  return isIdentifierPart(character) || character == '.';
                });
    names.emplace_back(bare ? text : std::string_view());
  }
  return names;
}

std::optional<std::vector<SourceFrame>> parsePythonStack(std::string_view text) {
  std::vector<SourceFrame> frames;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    // "<file>(<line>): <function>"; the file may itself contain parentheses, so look for the
    // last "(<digits>): ".
    size_t marker = line.rfind("): ");
    size_t open = marker == std::string_view::npos ? marker : line.rfind('(', marker);
    if (open == std::string_view::npos || open == 0) return std::nullopt;
    std::string_view digits = line.substr(open + 1, marker - open - 1);
    if (digits.empty()) return std::nullopt;
    for (char character : digits) {
      if (!std::isdigit(static_cast<unsigned char>(character))) return std::nullopt;
    }
    SourceFrame frame{std::string(line.substr(0, open)), std::stoll(std::string(digits)),
                      std::string(line.substr(marker + 3))};
    if (frame.file.ends_with("/torch/jit/_trace.py")) break;
    frames.push_back(std::move(frame));
  }
  if (frames.empty()) return std::nullopt;
  return frames;
}

namespace {

bool isModuleCallWrapper(const SourceFrame& frame) {
  return frame.file.ends_with("torch/nn/modules/module.py") &&
         (frame.function == "_slow_forward" || frame.function == "_call_impl" ||
          frame.function == "_wrapped_call_impl");
}

}  // namespace

std::vector<std::vector<SourceFrame>> splitByModuleCalls(const std::vector<SourceFrame>& stack) {
  std::vector<std::vector<SourceFrame>> segments(1);
  for (auto frame = stack.rbegin(); frame != stack.rend(); ++frame) {
    if (isModuleCallWrapper(*frame)) {
      if (frame->function == "_slow_forward") segments.emplace_back();
      continue;
    }
    segments.back().push_back(*frame);
  }
  for (std::vector<SourceFrame>& segment : segments) {
    std::reverse(segment.begin(), segment.end());
  }
  return segments;
}

std::optional<std::string> SourceFileCache::line(const std::string& file, int64_t line_number) {
  auto [entry, inserted] = files_.try_emplace(file);
  if (inserted) {
    std::ifstream stream(file);
    if (stream) {
      std::vector<std::string> lines;
      std::string text;
      while (std::getline(stream, text)) lines.push_back(std::move(text));
      entry->second = std::move(lines);
    }
  }
  const auto& lines = entry->second;
  if (!lines || line_number < 1 || static_cast<size_t>(line_number) > lines->size()) {
    return std::nullopt;
  }
  return (*lines)[line_number - 1];
}

namespace {

// Where a line leaves Python's tokenizer: the bracket depth, whether a triple-quoted string is
// still open (and with which quote), whether the line ends in a backslash.
struct LineState {
  int depth = 0;
  char triple = 0;
  bool backslash = false;
};

void scanLine(std::string_view text, LineState& state) {
  state.backslash = false;
  char quote = 0;
  for (size_t position = 0; position < text.size(); ++position) {
    char character = text[position];
    bool triple_here = position + 2 < text.size() && text[position + 1] == character &&
                       text[position + 2] == character;
    if (state.triple) {
      if (character == '\\') {
        ++position;
      } else if (character == state.triple && triple_here) {
        state.triple = 0;
        position += 2;
      }
      continue;
    }
    if (quote) {
      if (character == '\\') {
        ++position;
      } else if (character == quote) {
        quote = 0;
      }
      continue;
    }
    if (character == '#') return;
    if (character == '"' || character == '\'') {
      if (triple_here) {
        state.triple = character;
        position += 2;
      } else {
        quote = character;
      }
      continue;
    }
    if (character == '(' || character == '[' || character == '{') ++state.depth;
    if (character == ')' || character == ']' || character == '}') {
      // Below zero: the scan began inside a statement's brackets; they close here.
      state.depth = std::max(state.depth - 1, 0);
    }
  }
  size_t last = text.find_last_not_of(" \t");
  state.backslash = last != std::string_view::npos && text[last] == '\\';
}

}  // namespace

std::optional<std::string> SourceFileCache::statement(const std::string& file, int64_t first_line) {
  constexpr int64_t kMostLines = 200;
  std::string text;
  LineState state;
  for (int64_t number = first_line; number < first_line + kMostLines; ++number) {
    std::optional<std::string> next = line(file, number);
    if (!next) return number == first_line ? std::nullopt : std::optional<std::string>(text);
    if (number > first_line) text += '\n';
    text += *next;
    scanLine(*next, state);
    if (state.depth == 0 && !state.triple && !state.backslash) break;
  }
  return text;
}

int64_t SourceFileCache::statementStart(const std::string& file, int64_t line_number) {
  auto [cached, inserted] = statement_starts_.try_emplace({file, line_number}, line_number);
  if (!inserted) return cached->second;
  int64_t& start = cached->second;
  // Tokenize forward from the `def` the line is in, where no bracket or string is open (from
  // an arbitrary line above, a docstring's closing quotes would read as opening ones): a line
  // that begins at depth zero, outside a string and after no backslash, starts a statement.
  constexpr int64_t kMostLinesAbove = 2000;
  int64_t first = 0;
  for (int64_t number = line_number; number >= 1 && number > line_number - kMostLinesAbove;
       --number) {
    std::optional<std::string> text = line(file, number);
    if (!text) return start;
    size_t indentation = text->find_first_not_of(" \t");
    std::string_view code = indentation == std::string::npos
                                ? std::string_view()
                                : std::string_view(*text).substr(indentation);
    if (code.starts_with("def ") || code.starts_with("async def ")) {
      first = number;
      break;
    }
  }
  if (first == 0) return start;  // no function found: the line itself
  LineState state;
  for (int64_t number = first; number <= line_number; ++number) {
    std::optional<std::string> text = line(file, number);
    if (!text) return start = line_number;
    if (state.depth == 0 && !state.triple && !state.backslash) start = number;
    scanLine(*text, state);
  }
  return start;
}

}  // namespace memtrace::estimator
