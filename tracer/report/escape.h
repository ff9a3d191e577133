// Making strings from a trace safe for the formats the views write. A trace's strings are
// whatever the traced program named its files, functions and annotations: they may hold
// markup, quotes or bytes that are not UTF-8, and must never be able to inject script.
#pragma once

#include <string>
#include <string_view>

namespace memtrace::report {

// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string validUtf8(std::string_view text);
// Valid UTF-8, with < > & " ' escaped and XML-forbidden control characters replaced: safe
// as HTML or XML text and as a quoted attribute value.
std::string escapeXml(std::string_view text);
// JSON text made safe inside a <script> element: no "</script>", no "<!--".
std::string jsonForScript(std::string_view json);

}  // namespace memtrace::report
