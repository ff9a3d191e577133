// Where the tools write their results: standard output, or a file given with -o/--output,
// which they never overwrite unless told to (-f/--force, as memray does) and write whole or
// not at all.
#pragma once

#include <string>

namespace memtrace::tools {

// Refuses (throws UserError, naming the file and the flag) to write to `path` when it is an
// existing regular file and `force` is off. Called before any work, so that nothing is
// read, computed or written for a refused command.
void refuseToOverwrite(const std::string& path, bool force);

// Writes `text` to standard output when `path` is empty; else to `path`, whole or not at
// all (a temporary file beside it, renamed into place). A path that exists and is not a
// regular file (/dev/null, a pipe) is written to directly: renaming over it would replace it.
// Throws UserError when the file cannot be written.
void writeOutput(const std::string& path, const std::string& text);

}  // namespace memtrace::tools
