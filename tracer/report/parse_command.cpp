#include "tracer/report/parse_command.h"

#include <fmt/format.h>

#include "tracer/reader/live_set.h"

namespace memtrace::report {
namespace {

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\')
      out += fmt::format("\\{}", static_cast<char>(c));
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

struct Printer : reader::LiveVisitor {
  explicit Printer(std::ostream& out) : out(out) {}

  void onProcessInfo(const reader::ProcessInfo& info) {
    std::string command;
    for (const std::string& argument : info.command_line)
      command += (command.empty() ? "" : " ") + quoted(argument);
    out << fmt::format(
        "process pid={} ppid={} start_unix_ns={} start_monotonic_ns={} command=[{}] "
        "executable={} host={} version={} stacks={} python_depth={} native_depth={} "
        "free_stacks={} time_unit_ns={}\n",
        info.pid, info.parent_pid, info.start_unix_ns, info.start_monotonic_ns, command,
        quoted(info.executable), quoted(info.host_name), quoted(info.tracer_version),
        format::stackModeName(info.stack_mode), info.python_depth, info.native_depth,
        info.free_stacks ? 1 : 0, info.time_unit_ns);
  }
  void onDistributed(const reader::DistributedInfo& info) {
    out << fmt::format(
        "rank rank={} world_size={} local_rank={} local_world_size={} group_rank={} "
        "restart_count={} job={}\n",
        info.rank, info.world_size, info.local_rank, info.local_world_size, info.group_rank,
        info.restart_count, quoted(info.job_id));
  }
  void onString(uint32_t id, std::string_view text) {
    out << fmt::format("string {} {}\n", id, quoted(text));
  }
  void onPythonFrame(uint32_t id, const reader::PythonFrame& frame) {
    out << fmt::format("frame {} file={} function={} line={}\n", id, frame.file, frame.function,
                       frame.line);
  }
  void onPythonStack(uint32_t id, const reader::StackNode& node) {
    out << fmt::format("pystack {} parent={} frame={}\n", id, node.parent, node.frame);
  }
  void onNativeStack(uint32_t id, const reader::NativeNode& node) {
    out << fmt::format("native {} parent={} ip={:#x}\n", id, node.parent, node.ip);
  }
  // Printed as "module", the word this output has always used for the record (scripts and
  // tests/preload parse it); everywhere else a module is an nn.Module.
  void onLoadedObject(uint32_t id, const reader::LoadedObject& object) {
    std::string build_id;
    for (unsigned char c : object.build_id) build_id += fmt::format("{:02x}", c);
    std::string segments;
    for (auto [start, size] : object.segments) segments += fmt::format(" {:#x}+{:#x}", start, size);
    out << fmt::format("module {} path={} bias={:#x} build_id={} segments={}\n", id, object.path,
                       object.bias, build_id.empty() ? "-" : build_id,
                       segments.empty() ? "-" : segments.substr(1));
  }
  void onDevice(const reader::Device& device) {
    out << fmt::format("device {} name={} total_bytes={}\n", device.device, device.name,
                       device.total_bytes);
  }
  void onContext(const reader::Context& context) {
    out << fmt::format("context thread={} device={} stream={:#x} api={} level={}\n",
                       context.thread_id, context.device, context.stream,
                       format::apiName(context.api), format::levelName(context.level));
  }
  void onModuleScope(int64_t thread, uint32_t module) {
    out << fmt::format("scope thread={} module={}\n", thread, module);
  }
  void onMarker(const reader::Marker& marker) {
    out << fmt::format("marker t={} kind={} name={}\n", marker.time_ns,
                       format::markerName(marker.kind), marker.name);
  }
  void onCategory(uint64_t address, format::Category category, const reader::Allocation* live) {
    out << fmt::format("category address={:#x} category={}{}\n", address,
                       format::categoryName(category), live ? "" : " not-live");
  }
  void onOwnerModule(uint64_t address, uint32_t module, const reader::Allocation* live) {
    out << fmt::format("owner-module address={:#x} module={}{}\n", address, module,
                       live ? "" : " not-live");
  }
  void onTrainingPhase(uint64_t time_ns, format::TrainingPhase phase) {
    out << fmt::format("training-phase t={} phase={}\n", time_ns, format::trainingPhaseName(phase));
  }
  void onStepEnd(uint64_t time_ns, uint64_t step) {
    out << fmt::format("step-end t={} step={}\n", time_ns, step);
  }
  void onMemoryMap(const reader::MemoryMap& map) {
    out << fmt::format("map t={} address={:#x} size={} offset={} handle={:#x}\n", map.time_ns,
                       map.address, map.size, map.offset, map.handle);
  }
  void printRange(const char* name, const reader::AddressRange& range) {
    out << fmt::format("{} t={} address={:#x} size={}\n", name, range.time_ns, range.address,
                       range.size);
  }
  void onMemoryUnmap(const reader::AddressRange& range) { printRange("unmap", range); }
  void onAddressReserve(const reader::AddressRange& range) { printRange("reserve", range); }
  void onAddressFree(const reader::AddressRange& range) { printRange("address-free", range); }
  void onSegment(const reader::Segment& segment) {
    out << fmt::format(
        "segment t={} action={} device={} address={:#x} size={} graph_pool={} "
        "user_pool={}\n",
        segment.time_ns, format::segmentActionName(segment.action), segment.device, segment.address,
        segment.size, segment.graph_pool, segment.user_pool);
  }
  void onDeviceMemory(const reader::DeviceMemory& reading) {
    out << fmt::format("device-memory t={} device={} free_bytes={} total_bytes={}\n",
                       reading.time_ns, reading.device, reading.free_bytes, reading.total_bytes);
  }
  void onSimulatedDevice(const reader::SimulatedDeviceInfo& info) {
    out << fmt::format(
        "simulated-device profile={} file={} memory_bytes={} memory_set_by_user={} devices={}\n",
        quoted(info.profile_name), quoted(info.profile_file), info.memory_bytes,
        info.memory_set_by_user ? 1 : 0, info.device_count);
  }
  void onDeviceRead(const reader::DeviceRead& read) {
    out << fmt::format("device-read t={} bytes={} pystack={} native={} {}\n", read.time_ns,
                       read.bytes, read.python_stack, read.native_stack,
                       read.traced ? "traced" : "untraced");
  }
  void onSimulatedSize(const reader::SimulatedSize& size) {
    out << fmt::format(
        "simulated-size t={} address={:#x} bytes={} at_most={} certainty={} question={} "
        "pystack={} native={} {}\n",
        size.time_ns, size.address, size.bytes,
        size.at_most == UINT64_MAX ? std::string("none") : std::to_string(size.at_most),
        format::certaintyName(size.certainty), size.question, size.python_stack, size.native_stack,
        size.traced ? "traced" : "untraced");
  }
  void onAssumedValue(const reader::AssumedValue& value) {
    out << fmt::format("assumed-value t={} assumed={} pystack={} native={} {}\n", value.time_ns,
                       value.assumed, value.python_stack, value.native_stack,
                       value.traced ? "traced" : "untraced");
  }
  void onSection(const reader::Section& section) {
    const reader::RunTotals& totals = section.totals;
    std::string devices;
    for (const reader::DeviceTotals& device : totals.devices)
      devices += fmt::format(" {}:{}:{}:{}", device.device, device.allocated_bytes,
                             device.peak_bytes, device.peak_time_ns);
    out << fmt::format(
        "section t={} kind={} tracing={} phase={} window_events={} events={} allocations={} "
        "frees={} failed={} allocated_bytes={} untraced={} devices={}\n",
        section.time_ns, format::sectionKindName(section.kind), section.tracing ? 1 : 0,
        format::trainingPhaseName(section.phase), section.window_events, totals.events,
        totals.allocations, totals.frees, totals.failed_allocations, totals.allocated_bytes,
        totals.untraced_allocations, devices.empty() ? "-" : devices.substr(1));
  }
  void onStepPeak(const reader::StepPeak& step) {
    out << fmt::format(
        "step-peak step={} begin={} end={} peak_t={} peak_bytes={} phase={} module={}\n", step.step,
        step.begin_ns, step.end_ns, step.peak_time_ns, step.peak_bytes,
        format::trainingPhaseName(step.phase), step.module);
  }
  void onGeneratedCode(const reader::GeneratedCode& code) {
    out << fmt::format("generated-code file={} first_line={} lines={} pystack={}\n", code.file,
                       code.first_line, code.line_count, code.source_stack);
  }
  // Every record as written: an implied free is not a record, so it prints nothing.
  void onAlloc(const reader::Event& event, const reader::Allocation&) {
    out << fmt::format("alloc #{} t={} address={:#x} size={} pystack={} native={} {}\n",
                       event.index, event.time_ns, event.address, event.size, event.python_stack,
                       event.native_stack, traced(event));
  }
  void onFree(const reader::Event& event, const reader::Allocation& freed) {
    printFree(event, std::to_string(freed.size));
  }
  void onUnmatchedFree(const reader::Event& event) { printFree(event, "?"); }
  void onFailedAlloc(const reader::Event& event) {
    out << fmt::format("failed-alloc #{} t={} size={} pystack={} native={} {}\n", event.index,
                       event.time_ns, event.size, event.python_stack, event.native_stack,
                       traced(event));
  }

  static const char* traced(const reader::Event& event) {
    return event.traced ? "traced" : "untraced";
  }
  void printFree(const reader::Event& event, const std::string& size) {
    out << fmt::format("free #{} t={} address={:#x} size={} pystack={} native={} {}\n", event.index,
                       event.time_ns, event.address, size, event.python_stack, event.native_stack,
                       traced(event));
  }

  std::ostream& out;
};

}  // namespace

void printRecords(reader::TraceReader& trace, std::ostream& out) {
  Printer printer(out);
  reader::LiveReplay replay(printer);
  trace.read(replay);
  if (trace.cutOffset())
    out << fmt::format("cut at byte {} of {}\n", trace.cutOffset(), trace.fileSize());
  if (trace.openChunkOffset())
    out << fmt::format("open chunk at byte {} of {}\n", trace.openChunkOffset(), trace.fileSize());
}

}  // namespace memtrace::report
