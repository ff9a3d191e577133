// The tools' command lines, parsed by CLI11: what they share beyond CLI11 itself. Errors
// become the project's one line (tool_main.h) instead of CLI11's "...\nRun with --help for
// more information."; --help and --version print and exit 0.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/common/tool_main.h"

namespace memtrace::tools {

// The version the tools print (`memtrace-report --version`); CMake defines it from the
// VERSION file (tools/CMakeLists.txt).
#ifndef MEMTRACE_VERSION
#error "MEMTRACE_VERSION is defined by tools/CMakeLists.txt"
#endif
inline constexpr const char* kVersion = MEMTRACE_VERSION;

// CLI11's help, with the tool's own usage lines on its top-level help (a default
// subcommand, or a repeated option, reads better written out than generated).
class ToolFormatter : public CLI::Formatter {
 public:
  static constexpr size_t kWidth = 100;

  explicit ToolFormatter(std::string top_usage) : top_usage_(std::move(top_usage)) {
    column_width(34);
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    if (app->get_parent() == nullptr && !top_usage_.empty()) return top_usage_ + "\n";
    return CLI::Formatter::make_usage(app, std::move(name));
  }
  // CLI11 2.1 does not wrap: descriptions are wrapped here, to the project's 100 columns.
  std::string make_option_desc(const CLI::Option* option) const override {
    return wrap(CLI::Formatter::make_option_desc(option), kWidth - get_column_width());
  }
  std::string make_subcommand(const CLI::App* command) const override {
    std::stringstream out;
    CLI::detail::format_help(out, command->get_display_name(),
                             wrap(command->get_description(), kWidth - get_column_width()),
                             get_column_width());
    return out.str();
  }
  std::string make_description(const CLI::App* app) const override {
    std::string text = app->get_description();
    return text.empty() ? text : wrap(text, kWidth) + "\n";
  }

  // `text` in lines of at most `width` characters, broken at spaces; its own line breaks
  // are kept.
  static std::string wrap(const std::string& text, size_t width) {
    std::string out;
    size_t line_start = 0;  // in out
    size_t word_start = 0;
    while (word_start < text.size()) {
      size_t word_end = text.find_first_of(" \n", word_start);
      if (word_end == std::string::npos) word_end = text.size();
      std::string word = text.substr(word_start, word_end - word_start);
      if (out.size() > line_start && out.size() - line_start + 1 + word.size() > width) {
        out += '\n';
        line_start = out.size();
      } else if (out.size() > line_start) {
        out += ' ';
      }
      out += word;
      if (word_end < text.size() && text[word_end] == '\n') {
        out += '\n';
        line_start = out.size();
      }
      word_start = word_end + 1;
    }
    return out;
  }

 private:
  std::string top_usage_;
};

// An App set up as both tools want: the formatter above, --version, and options that keep
// the last value when given twice (as the hand-written parsers did). Call before adding
// subcommands and options: they inherit these.
inline void setUpApp(CLI::App& app, const std::string& tool, const std::string& top_usage) {
  app.formatter(std::make_shared<ToolFormatter>(top_usage));
  app.set_version_flag("--version", tool + " " + kVersion, "print the version and exit");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// CLI11's error as one line in the project's words.
inline std::string oneLineMessage(const CLI::ParseError& error) {
  std::string message = error.what();
  message = message.substr(0, message.find('\n'));
  // "--top: --top must be ...": a transform's refusal that names its option itself, as the
  // tools' transforms do, is the message.
  if (dynamic_cast<const CLI::ValidationError*>(&error)) {
    size_t colon = message.find(": ");
    if (colon != std::string::npos && message.compare(colon + 2, colon, message, 0, colon) == 0)
      return message.substr(colon + 2);
  }
  // "--top: 1 required TEXT missing": the option was last, without its value.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) &&
      message.find(" required ") != std::string::npos && message.ends_with(" missing")) {
    return message.substr(0, message.find(':')) + " needs a value";
  }
  return message;
}

// Parses `arguments` (argv without the program's name). Returns the exit status when the
// command line asked for help or the version (printed on standard output); nothing when
// the tool should go on. Throws UsageError, in one line, for a command line CLI11 refuses.
inline std::optional<int> parseCommandLine(CLI::App& app, std::vector<std::string> arguments) {
  std::reverse(arguments.begin(), arguments.end());  // CLI11 takes them last first
  try {
    app.parse(arguments);
  } catch (const CLI::Success& success) {  // --help, --version
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    throw UsageError(oneLineMessage(error));
  }
  return std::nullopt;
}

// The first argument of `app`'s (allowed) extras that looks like an option, as given
// ("--frobnicate" of "--frobnicate=3"); empty when there is none.
inline std::string firstUnknownOption(const CLI::App& app) {
  for (const std::string& argument : app.remaining()) {
    if (argument.size() > 1 && argument[0] == '-' && argument != "--")
      return argument.substr(0, argument.find('='));
  }
  return {};
}

// The first of `app`'s (allowed) extras that is not an option: a positional argument past
// those the command takes. Empty when there is none.
inline std::string firstExtraArgument(const CLI::App& app) {
  for (const std::string& argument : app.remaining()) {
    if (argument.empty() || argument[0] != '-' || argument == "-") return argument;
  }
  return {};
}

}  // namespace memtrace::tools
