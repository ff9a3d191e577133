#include "tracer/report/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>

#include <cstdio>
#include <cstdlib>

namespace memtrace::report {
namespace {

const Dwfl_Callbacks kCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

std::string demangle(const char* name) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !demangled) return name;
  std::string result(demangled);
  std::free(demangled);
  return result;
}

std::string baseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

struct Symbolizer::State {
  Dwfl* dwfl = nullptr;
};

Symbolizer::Symbolizer(const reader::Tables& tables) : state_(std::make_unique<State>()) {
  state_->dwfl = dwfl_begin(&kCallbacks);
  if (!state_->dwfl) return;
  dwfl_report_begin(state_->dwfl);
  for (size_t i = 1; i < tables.loaded_objects.size(); ++i) {
    const reader::LoadedObject& object = tables.loaded_objects[i];
    std::string path(tables.string(object.path));
    // Objects that are not files (the vDSO) or are gone are skipped: their frames keep
    // their address.
    dwfl_report_elf(state_->dwfl, path.c_str(), path.c_str(), -1, object.bias, false);
  }
  dwfl_report_end(state_->dwfl, nullptr, nullptr);
}

Symbolizer::~Symbolizer() {
  if (state_->dwfl) dwfl_end(state_->dwfl);
}

const NativeFrame& Symbolizer::resolve(uint64_t ip, bool innermost) {
  uint64_t address = innermost || ip == 0 ? ip : ip - 1;
  auto [it, inserted] = cache_.try_emplace(address);
  NativeFrame& frame = it->second;
  if (!inserted) return frame;
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(ip));
  frame.function = hex;
  if (!state_->dwfl) return frame;
  // libdw calls a loaded object a Dwfl_Module.
  Dwfl_Module* object = dwfl_addrmodule(state_->dwfl, address);
  if (!object) return frame;
  const char* object_name =
      dwfl_module_info(object, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (object_name) frame.object = baseName(object_name);
  if (const char* name = dwfl_module_addrname(object, address)) frame.function = demangle(name);
  if (Dwfl_Line* line = dwfl_module_getsrc(object, address)) {
    int line_number = 0;
    if (const char* file = dwfl_lineinfo(line, nullptr, &line_number, nullptr, nullptr, nullptr)) {
      frame.file = file;
      frame.line = line_number;
    }
  }
  return frame;
}

}  // namespace memtrace::report
