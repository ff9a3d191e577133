// The one reader of Python text (PythonCursor, estimator/python_source.h): every quote form,
// escapes, raw strings, f-strings' fields, comments, bracket depth, and a statement read line
// by line. Each expectation is what CPython's tokenizer does with the same text (3.12's for
// quotes inside an f-string's field).
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "estimator/python_source.h"

namespace memtrace::estimator {
namespace {

// The characters of code the cursor reads in `text`, in order.
std::string codeOf(std::string_view text) {
  PythonCursor cursor(text);
  std::string code;
  while (cursor.next()) code += cursor.character();
  return code;
}

TEST(PythonCursor, SkipsSingleAndDoubleQuotedStrings) {
  EXPECT_EQ(codeOf("a = 'x, (y' + \"z)\" + b"), "a =  +  + b");
  EXPECT_EQ(codeOf("f('it\"s', \"it's\")"), "f(, )");  // the other quote is text
  EXPECT_EQ(codeOf("'' + (x) + \"\""), " + (x) + ");   // empty strings
}

TEST(PythonCursor, SkipsTripleQuotedStrings) {
  EXPECT_EQ(codeOf("x = '''a ' '' (b''' + y"), "x =  + y");
  EXPECT_EQ(codeOf("x = \"\"\"a \" \"\" )\"\"\" + y"), "x =  + y");
  EXPECT_EQ(codeOf("x = \"\"\"\"\"\" + y"), "x =  + y");                 // an empty one
  EXPECT_EQ(codeOf("x = '''it's''' + '''a\n(b''' + y"), "x =  +  + y");  // over lines
}

TEST(PythonCursor, ABackslashEscapesTheCharacterAfterIt) {
  EXPECT_EQ(codeOf("s = 'it\\'s (' + t"), "s =  + t");
  EXPECT_EQ(codeOf("s = \"a\\\"b, (\" + t"), "s =  + t");
  EXPECT_EQ(codeOf("s = '\\\\' + t"), "s =  + t");  // an escaped backslash ends nothing
  EXPECT_EQ(codeOf("s = '''a\\''' (''' + t"), "s =  + t");
}

TEST(PythonCursor, RawStringsEndWhereOtherStringsEnd) {
  // In a raw string a backslash stays in the text, and still keeps the quote after it from
  // ending the string: r'\'' is one string, r'\\' another.
  EXPECT_EQ(codeOf("r'\\'' + x"), " + x");
  EXPECT_EQ(codeOf("r\"\\\\\" + x"), " + x");
  EXPECT_EQ(codeOf("re.compile(r\"\\d+(\\.\\d+)?\")"), "re.compile()");
  EXPECT_EQ(codeOf("R'''\\''' (''' + x"), " + x");
}

TEST(PythonCursor, EveryStringPrefixIsPartOfItsString) {
  for (std::string prefix : {"b", "B", "u", "U", "f", "F", "r", "R", "t", "rb", "Rb", "bR", "BR",
                             "br", "fr", "Rf", "rF", "FR", "tr"}) {
    EXPECT_EQ(codeOf("x = " + prefix + "'(' + y"), "x =  + y") << prefix;
    EXPECT_EQ(codeOf("x = " + prefix + "\"\"\"(\"\"\" + y"), "x =  + y") << prefix;
  }
  // Names that look like prefixes are names, and a keyword before a string is code.
  EXPECT_EQ(codeOf("fr(x) + rb + u"), "fr(x) + rb + u");
  EXPECT_EQ(codeOf("bar + 'a'"), "bar + ");
  EXPECT_EQ(codeOf("elif'(':"), "elif:");
  EXPECT_EQ(codeOf("x = rbf'a'"), "x = rbf");  // not a prefix: the name, then a string
}

TEST(PythonCursor, ReadsTheFieldsOfFStrings) {
  EXPECT_EQ(codeOf("f'{d[\"k\"]} (' + x"), " + x");
  // Python 3.12: a field's strings may use the f-string's own quote.
  EXPECT_EQ(codeOf("f\"{d[\"k\"]}, (\" + x"), " + x");
  EXPECT_EQ(codeOf("f\"{f\"{x}\"}\" + y"), " + y");  // an f-string in a field
  EXPECT_EQ(codeOf("f'{{' + x + '}}'"), " + x + ");  // doubled braces are text
  EXPECT_EQ(codeOf("f'{x:>{width}}' + y"), " + y");  // a format spec's nested field
  EXPECT_EQ(codeOf("f\"{x:'>10}\" + y"), " + y");    // a format spec's text
  EXPECT_EQ(codeOf("f'{x!r:{\"<\"}{w}}' + y"), " + y");
  EXPECT_EQ(codeOf("f'{(lambda: \"'\")()}' + y"), " + y");  // a colon inside brackets
  EXPECT_EQ(codeOf("f'\\N{BULLET} {x}' + y"), " + y");      // a character's name
  // `\{` does not escape the brace: the field opens, and its string holds the quote.
  EXPECT_EQ(codeOf("f'\\{d[\"'\"]}' + y"), " + y");
  EXPECT_EQ(codeOf("rf'\\{d[\"'\"]}' + y"), " + y");
  // Not an f-string: braces are text.
  EXPECT_EQ(codeOf("'{d[' + x + ']}'"), " + x + ");
}

TEST(PythonCursor, SkipsComments) {
  PythonCursor cursor("x = (1,  # it's a ) comment\n     2)");
  std::string code;
  while (cursor.next()) code += cursor.character();
  EXPECT_EQ(code, "x = (1,  \n     2)");
  EXPECT_EQ(cursor.depth(), 0);
  EXPECT_TRUE(cursor.passedStringOrComment());
  EXPECT_EQ(codeOf("'#' + x  # y"), " + x  ");  // a # in a string is text
}

TEST(PythonCursor, KeepsTheDepthOfBrackets) {
  PythonCursor cursor("f(a, [b, {c: d}])");
  int deepest = 0;
  std::string top_level;
  while (cursor.next()) {
    deepest = std::max(deepest, cursor.depth());
    if (cursor.character() == ',') top_level += std::to_string(cursor.depth());
  }
  EXPECT_EQ(deepest, 3);
  EXPECT_EQ(top_level, "12");
  EXPECT_EQ(cursor.depth(), 0);
  EXPECT_FALSE(cursor.closedUnopened());
  EXPECT_FALSE(cursor.passedStringOrComment());

  // A closing bracket with none open (the text began inside brackets) leaves the depth at 0.
  PythonCursor inside("x) + (y");
  while (inside.next()) {
  }
  EXPECT_TRUE(inside.closedUnopened());
  EXPECT_EQ(inside.depth(), 1);
  EXPECT_EQ(codeOf("('(', \"[\", {'{': '}'})"), "(, , {: })");
}

TEST(PythonCursor, ReadsAStatementLineByLine) {
  PythonCursor cursor;
  cursor.readAll("s = \"\"\"a (");  // a triple-quoted string goes on
  EXPECT_TRUE(cursor.inString());
  EXPECT_FALSE(cursor.endsStatement());
  cursor.readAll("b) ' \"\"\" + f(x,");
  EXPECT_FALSE(cursor.inString());
  EXPECT_EQ(cursor.depth(), 1);
  cursor.readAll("      y)");
  EXPECT_TRUE(cursor.endsStatement());

  cursor.readAll("s = 'abc (");  // not closed: Python rejects it; read as closed at the line's end
  EXPECT_TRUE(cursor.endsStatement());

  cursor.readAll("s = 'abc \\");  // a backslash continues the string on the next line
  EXPECT_TRUE(cursor.inString());
  cursor.read("def (' + x");
  std::string code;
  while (cursor.next()) code += cursor.character();
  EXPECT_EQ(code, " + x");
  EXPECT_TRUE(cursor.endsStatement());

  cursor.readAll("x = a + \\   ");  // a backslash continues the line
  EXPECT_FALSE(cursor.endsStatement());
  cursor.readAll("    b");
  EXPECT_TRUE(cursor.endsStatement());
  cursor.readAll("x = 1  # \\");  // not in a comment
  EXPECT_TRUE(cursor.endsStatement());

  cursor.readAll("y = f'{x +");  // Python 3.12: a field goes on over lines
  EXPECT_FALSE(cursor.endsStatement());
  cursor.readAll("     1}'");
  EXPECT_TRUE(cursor.endsStatement());

  cursor.readAll("y = f'''{x:");  // a triple-quoted f-string's format spec, over lines
  cursor.readAll("  >10}''' + (");
  EXPECT_FALSE(cursor.inString());
  EXPECT_EQ(cursor.depth(), 1);
}

// What the readers built on the cursor make of quotes that the earlier hand-written loops
// read wrongly (each had its own rule).
TEST(PythonCursor, ServesEveryReaderOfStatements) {
  // An escaped quote and a triple-quoted string hold no top-level comma.
  EXPECT_FALSE(bindsAContainerDisplay("y = \"a\\\", b\""));
  EXPECT_FALSE(bindsAContainerDisplay("y = '''it's, x'''"));
  EXPECT_TRUE(bindsAContainerDisplay("y = '''it's''', x"));
  // A bracket in a triple-quoted key does not close the display.
  EXPECT_TRUE(bindsAContainerDisplay("masks = {\"\"\"a \" }\"\"\": f(x), \"b\": g(x)}"));
  // A subscript's bracket inside a string.
  EXPECT_EQ(storedTarget("cache[\"]\"] = x"), "cache[\"]\"]");
  EXPECT_EQ(storedTarget("cache[f\"{k['a']}\"] = x"), "cache[f\"{k['a']}\"]");
  // returnedNames leaves a line with a string or a comment alone, wherever it is.
  EXPECT_EQ(returnedNames("return x, (y, ')')"), std::nullopt);
  EXPECT_EQ(returnedNames("return a, \\"), std::nullopt);
}

}  // namespace
}  // namespace memtrace::estimator
