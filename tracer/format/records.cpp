#include "tracer/format/records.h"

namespace memtrace::format {

const char* apiName(Api api) {
  switch (api) {
    case Api::kPluggable:
      return "pluggable";
    case Api::kCudaMalloc:
      return "cudaMalloc";
    case Api::kCudaMallocAsync:
      return "cudaMallocAsync";
    case Api::kCudaMallocManaged:
      return "cudaMallocManaged";
    case Api::kCuMemAlloc:
      return "cuMemAlloc";
    case Api::kCuMemAllocAsync:
      return "cuMemAllocAsync";
    case Api::kSnapshot:
      return "snapshot";
    case Api::kCuMemCreate:
      return "cuMemCreate";
    case Api::kCuMemAllocManaged:
      return "cuMemAllocManaged";
    case Api::kDeviceRead:
      return "device-read";
    case Api::kTorchAllocator:
      return "torch";
    case Api::kSimulatedSize:
      return "simulated-size";
    case Api::kCount:
      break;
  }
  return "?";
}

const char* levelName(Level level) {
  switch (level) {
    case Level::kTensor:
      return "tensor";
    case Level::kSegment:
      return "segment";
    case Level::kCount:
      break;
  }
  return "?";
}

const char* markerName(MarkerKind kind) {
  switch (kind) {
    case MarkerKind::kTracingStarted:
      return "tracing-started";
    case MarkerKind::kTracingStopped:
      return "tracing-stopped";
    case MarkerKind::kAnnotation:
      return "annotation";
    case MarkerKind::kPhaseBegin:
      return "phase-begin";
    case MarkerKind::kPhaseEnd:
      return "phase-end";
    case MarkerKind::kProcessExit:
      return "process-exit";
    case MarkerKind::kTraceClosed:
      return "trace-closed";
    case MarkerKind::kCount:
      break;
  }
  return "?";
}

const char* stackModeName(StackMode mode) {
  switch (mode) {
    case StackMode::kNone:
      return "none";
    case StackMode::kPython:
      return "python";
    case StackMode::kNative:
      return "native";
    case StackMode::kAll:
      return "all";
  }
  return "?";
}

const char* categoryName(Category category) {
  switch (category) {
    case Category::kUnknown:
      return "unknown";
    case Category::kParameter:
      return "parameter";
    case Category::kGradient:
      return "gradient";
    case Category::kOptimizerState:
      return "optimizer_state";
    case Category::kActivation:
      return "activation";
    case Category::kInput:
      return "input";
    case Category::kTemporary:
      return "temporary";
    case Category::kCount:
      break;
  }
  return "?";
}

const char* trainingPhaseName(TrainingPhase phase) {
  switch (phase) {
    case TrainingPhase::kNone:
      return "none";
    case TrainingPhase::kForward:
      return "forward";
    case TrainingPhase::kBackward:
      return "backward";
    case TrainingPhase::kOptimizer:
      return "optimizer";
    case TrainingPhase::kCount:
      break;
  }
  return "?";
}

const char* sectionKindName(SectionKind kind) {
  switch (kind) {
    case SectionKind::kFrame:
      return "frame";
    case SectionKind::kPeak:
      return "peak";
    case SectionKind::kOutOfMemory:
      return "out-of-memory";
    case SectionKind::kWindow:
      return "window";
    case SectionKind::kCount:
      break;
  }
  return "?";
}

const char* segmentActionName(SegmentAction action) {
  switch (action) {
    case SegmentAction::kAlloc:
      return "alloc";
    case SegmentAction::kFree:
      return "free";
    case SegmentAction::kMap:
      return "map";
    case SegmentAction::kUnmap:
      return "unmap";
    case SegmentAction::kCount:
      break;
  }
  return "?";
}

const char* certaintyName(Certainty certainty) {
  switch (certainty) {
    case Certainty::kExact:
      return "exact";
    case Certainty::kBounded:
      return "bounded";
    case Certainty::kEstimated:
      return "estimated";
    case Certainty::kCount:
      break;
  }
  return "?";
}

}  // namespace memtrace::format
