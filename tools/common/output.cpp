#include "tools/common/output.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tools/common/tool_main.h"

namespace memtrace::tools {

namespace fs = std::filesystem;

void refuseToOverwrite(const std::string& path, bool force) {
  std::error_code error;
  if (force || path.empty() || !fs::is_regular_file(path, error)) return;
  throw UserError(path + " already exists; -f/--force overwrites it");
}

void writeOutput(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::error_code error;
  fs::file_status status = fs::status(path, error);
  bool special = fs::exists(status) && !fs::is_regular_file(status);
  std::string target = special ? path : path + ".tmp." + std::to_string(::getpid());
  std::ofstream file(target, std::ios::binary | std::ios::trunc);
  if (file) file << text;
  if (file) file.close();
  if (!file) {
    int saved = errno;
    if (!special) fs::remove(target, error);
    throw UserError(path + ": cannot write: " + std::strerror(saved));
  }
  if (special) return;
  fs::rename(target, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(target, ignored);
    throw UserError(path + ": cannot write: " + error.message());
  }
}

}  // namespace memtrace::tools
