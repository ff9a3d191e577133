// The shell of the command-line tools' main(): where they log, and how an exception that
// reaches main() becomes one line on stderr and an exit status, never a crash or a trace.
#pragma once

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace memtrace::tools {

// Bad input the user can fix, found by the code the tools share (an output file that
// exists, or cannot be written): the policy's user error status, its message alone.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A command line the tool refuses: treated as the tool's own `ToolError` below (with the
// policy's suffix, which points at --help).
class UsageError : public UserError {
 public:
  using UserError::UserError;
};

// What a tool says and returns for an exception that reaches main(). `ToolError` (the tool's
// own type: bad input or bad usage, which the user can fix) and any other std::exception
// each get an exit status and words around their message. tools::UsageError counts as the
// tool's own; tools::UserError gets the same status without the suffix.
struct ErrorPolicy {
  int user_error_status = 2;
  std::string user_error_suffix;  // e.g. " (memtrace-report --help shows the usage)"
  int other_status = 2;
  std::string other_prefix;            // e.g. "internal error: "
  bool other_first_line_only = false;  // a what() that may run to several lines
};

// Log lines read "<tool>: <level>: <message>" on stderr.
inline void setUpToolLogging(const char* tool) {
  auto logger = spdlog::stderr_logger_mt(tool);
  logger->set_pattern("%n: %l: %v");
  spdlog::set_default_logger(logger);
}

// Sets up logging for `tool`, then returns run()'s exit status, or the policy's for an
// exception run() throws, after logging its one line.
template <typename ToolError, typename Run>
int toolMain(const char* tool, const ErrorPolicy& policy, Run&& run) {
  setUpToolLogging(tool);
  try {
    return run();
  } catch (const std::exception& error) {
    if (dynamic_cast<const ToolError*>(&error) || dynamic_cast<const UsageError*>(&error)) {
      spdlog::error("{}{}", error.what(), policy.user_error_suffix);
      return policy.user_error_status;
    }
    if (dynamic_cast<const UserError*>(&error)) {
      spdlog::error("{}", error.what());
      return policy.user_error_status;
    }
    std::string message = error.what();
    if (policy.other_first_line_only) message = message.substr(0, message.find('\n'));
    spdlog::error("{}{}", policy.other_prefix, message);
    return policy.other_status;
  }
}

}  // namespace memtrace::tools
