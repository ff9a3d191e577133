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

// ---- PythonCursor ----------------------------------------------------------------------

namespace {

bool isOpening(char character) {
  return character == '(' || character == '[' || character == '{';
}

bool isClosing(char character) {
  return character == ')' || character == ']' || character == '}';
}

bool isQuote(char character) {
  return character == '"' || character == '\'';
}

// The length of the string prefix at `position` (r, b, f, u, t in either case, one or two of
// them, right before a quote), 0 when none begins there.
size_t stringPrefixLength(std::string_view text, size_t position) {
  if (position > 0 && isIdentifierPart(text[position - 1])) return 0;  // inside a longer name
  size_t length = 0;
  while (length < 2 && position + length < text.size() &&
         std::string_view("rRbBfFuUtT").find(text[position + length]) != std::string_view::npos) {
    ++length;
  }
  // The first letter alone (`r"`), or both (`rb"`).
  for (size_t tried = length; tried >= 1; --tried) {
    if (position + tried < text.size() && isQuote(text[position + tried])) return tried;
  }
  return 0;
}

}  // namespace

void PythonCursor::read(std::string_view text) {
  text_ = text;
  next_ = 0;
  continues_ = false;
  escaped_end_ = false;
  last_was_backslash_ = false;
}

void PythonCursor::readAll(std::string_view text) {
  read(text);
  while (next()) {
  }
}

bool PythonCursor::next() {
  while (next_ < text_.size()) {
    if (!open_.empty() && open_.back().quote) {
      readInString();
      continue;
    }
    if (!open_.empty() && open_.back().format_spec) {
      readInFormatSpec();
      continue;
    }
    // Code: outside every string, or in a replacement field.
    char character = text_[next_];
    if (character == '#') {
      next_ = std::min(text_.find('\n', next_), text_.size());
      passed_string_or_comment_ = true;
      last_was_backslash_ = false;
      continue;
    }
    size_t prefix = isQuote(character) ? 0 : stringPrefixLength(text_, next_);
    if (isQuote(character) || prefix > 0) {
      openStringAt(prefix);
      continue;
    }
    size_t position = next_++;
    if (!open_.empty()) {
      readInField(character);
      continue;
    }
    if (isOpening(character)) {
      ++depth_;
    } else if (isClosing(character)) {
      if (depth_ > 0) {
        --depth_;
      } else {
        closed_unopened_ = true;
      }
    }
    if (character != ' ' && character != '\t' && character != '\r') {
      last_was_backslash_ = character == '\\';
    }
    position_ = position;
    return true;
  }
  if (!escaped_end_) endLine();
  continues_ = open_.empty() && last_was_backslash_;
  return false;
}

void PythonCursor::openStringAt(size_t prefix_length) {
  std::string_view prefix = text_.substr(next_, prefix_length);
  size_t quote_at = next_ + prefix_length;
  Open string;
  string.quote = text_[quote_at];
  string.triple = text_.substr(quote_at, 3) == std::string(3, string.quote);
  string.raw = prefix.find_first_of("rR") != std::string_view::npos;
  string.formatted = prefix.find_first_of("fFtT") != std::string_view::npos;
  open_.push_back(string);
  next_ = quote_at + (string.triple ? 3 : 1);
  passed_string_or_comment_ = true;
  last_was_backslash_ = false;
}

void PythonCursor::readInString() {
  const Open& string = open_.back();
  size_t at = next_;
  char character = text_[at];
  char following = at + 1 < text_.size() ? text_[at + 1] : 0;
  if (character == '\\') {
    if (string.formatted && following == '{') {
      next_ = at + 1;  // `\{`: the backslash is text, the field opens all the same
    } else if (string.formatted && !string.raw && following == 'N' &&
               text_.substr(at + 2, 1) == "{") {
      // `\N{BULLET}`: a character's name, not a field.
      next_ = std::min(text_.find('}', at), text_.size() - 1) + 1;
    } else {
      next_ = at + 2;  // the quote, backslash or line end after it is the string's
      escaped_end_ = next_ > text_.size();
    }
    return;
  }
  ++next_;
  if (character == '\n') {
    endLine();
  } else if (character == string.quote) {
    if (!string.triple) {
      open_.pop_back();
    } else if (text_.substr(at, 3) == std::string(3, string.quote)) {
      next_ = at + 3;
      open_.pop_back();
    }
  } else if (string.formatted && (character == '{' || character == '}')) {
    if (following == character) {
      ++next_;  // `{{` or `}}`: the brace itself
    } else if (character == '{') {
      open_.push_back(Open{});  // a replacement field
    }
  }
}

void PythonCursor::readInField(char character) {
  Open& field = open_.back();
  if (isOpening(character)) {
    ++field.depth;
  } else if (isClosing(character)) {
    if (field.depth > 0) {
      --field.depth;
    } else if (character == '}') {
      open_.pop_back();  // back in the f-string's text
    }
  } else if (character == ':' && field.depth == 0) {
    field.format_spec = true;  // `{x:>{width}}`: lambdas and slices need brackets in a field
  }
}

void PythonCursor::readInFormatSpec() {
  char character = text_[next_++];
  if (character == '{') {
    open_.push_back(Open{});  // a nested field: `{x:{width}}`
  } else if (character == '}') {
    open_.pop_back();
  } else if (character == '\n') {
    endLine();
  }
}

void PythonCursor::endLine() {
  // A line may end inside a triple-quoted string or a field (Python 3.12), not in the text of
  // any other string.
  if (!open_.empty() && open_.back().quote && !open_.back().triple) open_.pop_back();
}

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

// Where the bracket opening at `open` closes, past strings and comments; npos when the text
// ends first.
size_t matchingBracket(std::string_view text, size_t open) {
  PythonCursor cursor(text.substr(open));
  while (cursor.next()) {
    if (isClosing(cursor.character()) && cursor.depth() == 0) return open + cursor.position();
  }
  return std::string_view::npos;
}

// Whether `text` holds nothing but spaces, line breaks and a comment.
bool onlyLayout(std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n\\");
  return first == std::string_view::npos || text[first] == '#';
}

// Whether `text` has a comma outside every bracket, string and comment.
bool hasTopLevelComma(std::string_view text) {
  PythonCursor cursor(text);
  while (cursor.next()) {
    if (cursor.character() == ',' && cursor.depth() == 0) return true;
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

std::optional<std::string> partTakenFromACall(std::string_view statement) {
  auto assignment = parseAssignment(statement);
  if (!assignment || assignment->first.size() != 1) return std::nullopt;
  std::string_view value = statement.substr(assignment->second);
  // `x = (a.max(dim=1).values)` over several lines: the parentheses hold one expression.
  while (true) {
    size_t first = value.find_first_not_of(" \t\r\n\\");
    if (first == std::string_view::npos || value[first] != '(') break;
    size_t close = matchingBracket(value, first);
    if (close == std::string_view::npos || !onlyLayout(value.substr(close + 1)) ||
        hasTopLevelComma(value.substr(first + 1, close - first - 1))) {
      break;
    }
    value = value.substr(first + 1, close - first - 1);
  }
  // Past the last call's `)` outside every bracket: only `.name` and `[...]` may follow.
  size_t tail = std::string_view::npos;
  PythonCursor cursor(value);
  while (cursor.next()) {
    if (cursor.character() == ')' && cursor.depth() == 0) tail = cursor.position() + 1;
  }
  if (tail == std::string_view::npos) return std::nullopt;
  std::optional<std::string> first_part;
  size_t position = tail;
  while (true) {
    size_t start = value.find_first_not_of(" \t\r\n\\", position);
    if (start == std::string_view::npos) break;
    size_t end = start;
    if (value[start] == '.' && start + 1 < value.size() && isIdentifierStart(value[start + 1])) {
      end = start + 1;
      while (end < value.size() && isIdentifierPart(value[end])) ++end;
    } else if (value[start] == '[') {
      size_t close = matchingBracket(value, start);
      if (close == std::string_view::npos) return std::nullopt;
      end = close + 1;
    } else {
      if (!onlyLayout(value.substr(start))) return std::nullopt;  // `f(x) + y`, `f(x) if c ...`
      break;
    }
    if (!first_part) first_part = std::string(value.substr(start, end - start));
    position = end;
  }
  return first_part;
}

std::vector<std::string> bareNameArguments(std::string_view statement) {
  auto assignment = parseAssignment(statement);
  size_t from = assignment ? assignment->second : 0;
  std::string_view value = statement.substr(from);
  std::vector<std::string> names;
  PythonCursor cursor(value);
  char before = 0;  // the last character of code outside names, spaces and line breaks
  size_t start = std::string_view::npos;
  int start_depth = 0;
  auto close_name = [&](size_t end, char after) {
    if (start == std::string_view::npos) return;
    std::string_view name = value.substr(start, end - start);
    if (start_depth > 0 && (before == '(' || before == ',') && (after == ',' || after == ')') &&
        isIdentifierStart(name.front())) {
      names.emplace_back(name);
    }
    start = std::string_view::npos;
  };
  size_t name_end = 0;
  while (cursor.next()) {
    char character = cursor.character();
    if (isIdentifierPart(character)) {
      if (start == std::string_view::npos) {
        start = cursor.position();
        start_depth = cursor.depth();
      } else if (cursor.position() != name_end) {
        start = std::string_view::npos;  // `a b`: not one name
        before = 0;
      }
      name_end = cursor.position() + 1;
      continue;
    }
    if (character == ' ' || character == '\t' || character == '\n' || character == '\r' ||
        character == '\\') {
      continue;
    }
    close_name(name_end, character);
    before = character;
  }
  close_name(name_end, 0);
  return names;
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
      size_t close = matchingBracket(line, position);
      if (close == std::string_view::npos) return std::nullopt;
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
  // goes on, or a backslash continues it) or that holds a string or comment is left alone.
  std::string_view returned = line.substr(position);
  std::vector<std::string_view> elements;
  size_t start = 0;
  PythonCursor cursor(returned);
  while (cursor.next()) {
    if (cursor.character() == '\\' || cursor.closedUnopened()) return std::nullopt;
    if (cursor.character() == ',' && cursor.depth() == 0) {
      elements.push_back(returned.substr(start, cursor.position() - start));
      start = cursor.position() + 1;
    }
  }
  if (cursor.depth() != 0 || cursor.passedStringOrComment()) return std::nullopt;
  elements.push_back(returned.substr(start));
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

std::optional<std::string> SourceFileCache::statement(const std::string& file, int64_t first_line) {
  constexpr int64_t kMostLines = 200;
  std::string text;
  PythonCursor cursor;
  for (int64_t number = first_line; number < first_line + kMostLines; ++number) {
    std::optional<std::string> next = line(file, number);
    if (!next) return number == first_line ? std::nullopt : std::optional<std::string>(text);
    if (number > first_line) text += '\n';
    text += *next;
    cursor.readAll(*next);
    if (cursor.endsStatement()) break;
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
  PythonCursor cursor;
  for (int64_t number = first; number <= line_number; ++number) {
    std::optional<std::string> text = line(file, number);
    if (!text) return start = line_number;
    if (cursor.endsStatement()) start = number;
    cursor.readAll(*text);
  }
  return start;
}

}  // namespace memtrace::estimator
