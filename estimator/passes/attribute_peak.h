#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "estimator/graph.h"
#include "estimator/passes/replay_caching_allocator.h"

namespace memtrace::estimator {

// Live bytes at the peak that share a key: a source line, or a module instance.
struct LiveGroup {
  SourceFrame frame;        // the line; unknown for module groups
  std::string module_path;  // the module; empty for line groups
  int64_t bytes = 0;
  int64_t tensors = 0;
};

// Live bytes at a training step's peak that one of the step's own calls allocated (Note [The
// step's own calls]).
struct StepCallGroup {
  format::TrainingPhase phase = format::TrainingPhase::kNone;  // kBackward or kOptimizer
  int64_t bytes = 0;
  int64_t tensors = 0;
};
// Bytes at the peak of one module and one category (Note [Module x category predicted]).
struct ModuleCategoryGroup {
  std::string module_path;  // named_modules()'s ("" the root); kNoModule: outside every module
  format::Category category = format::Category::kUnknown;
  int64_t bytes = 0;
};
// The module key of what no module owns (the loss, the inputs, the optimizer state of a tensor
// the model does not hold), as the tracer's module table names its row; and of the optimizer
// step's own temporaries, the tracer's owner that is not a module (Note [Owners that are not
// modules] in python/mem_tracer/training.py).
inline constexpr const char* kNoModule = "<no module>";
inline constexpr const char* kOptimizerStep = "<optimizer.step>";

// A training step's cuBLAS and cuBLASLt workspaces live at the requested peak, grouped as the
// rest is, apart from it (Note [The step's workspaces]).
struct StepWorkspaceAttribution {
  int64_t bytes = 0;
  std::vector<LiveGroup> by_frame;
  std::vector<LiveGroup> by_user_frame;
  std::vector<LiveGroup> by_module;
  std::vector<StepCallGroup> by_step_call;
  std::vector<ModuleCategoryGroup> by_module_category;
};

// The storages live at the peak, each charged to the node that allocated it, grouped three
// ways. The first two are the tracer's two groupings (Note [Two groupings by line]).
struct PeakAttribution {
  std::vector<LiveGroup> by_frame;       // innermost source range
  std::vector<LiveGroup> by_user_frame;  // innermost frame in the user's own code
  std::vector<LiveGroup> by_module;      // module instance path
  std::vector<StorageId> storages;       // the live storages, largest first
  // A training step's requested peak: what backward and the optimizer's step allocated outside
  // the forward's lines, in place of by_user_frame (Note [The step's own calls]).
  std::vector<StepCallGroup> by_step_call;
  // attributeRequestedPeak only: every byte live there, by owner and category, largest first
  // (a training step's cuBLAS and cuBLASLt workspaces apart, in step_workspaces).
  std::vector<ModuleCategoryGroup> by_module_category;
  StepWorkspaceAttribution step_workspaces;
};

PeakAttribution attributePeak(const Graph& graph, const std::vector<StorageId>& live);

// Note [Workspaces on their lines]
// The figure a measurement is compared with is requested_bytes.all.peak: the weights, the
// inputs, the activations and the library workspaces live at once (cuBLAS's, kept from the
// first matmul on; cuBLASLt's, where the torch release keeps one; a convolution's, while it
// runs). A trace charges a workspace to the line whose op took it, as it charges a tensor (the
// first matmul's line holds cuBLAS's 32 MiB on an H100). So the per-line prediction beside a
// measurement is taken where requested_bytes peaks, not where the activations alone do, and
// each workspace live there is charged to the node that took it, under every grouping: then
// the lines, with the weights and inputs (which have no line: they are there before the
// forward), sum to the predicted peak, as the measured lines sum to the measured one. By
// module, the weights are charged too, each to the module whose parameter or buffer it is (by
// its name, "blocks.0.attn.qkv.weight"), as the tracer's module table puts them (Note
// [Weights and their modules] in tracer/format/records.h). The activations' own peak keeps its
// attribution ("peak" of the estimate's JSON); this one is "requested_peak".
//
// Note [The step's own calls]
// A training step's estimate is of the steady state: the replay allocates the library
// workspaces, with the weights, the optimizer's state and the inputs, before the step's first
// node (replay_caching_allocator.cpp), as a program's second step finds them, taken in its
// first. So on a training step the cuBLAS and cuBLASLt workspaces are charged to no line and no
// module, and stand apart (Note [The step's workspaces]). The lines of the user's code the
// recording knows are the forward's (the model's code, the loss function); backward and
// optimizer.step() are called by the estimator's own loop (TrainingStep), so what they allocate
// has for its user frame the line that called estimate(), where no trace puts it. A trace puts
// it on the line of the program's loop that called loss.backward() (autograd's threads borrow
// that stack) or optimizer.step(). So a storage made in the backward or the optimizer phase
// whose user frame is none of the forward's lines is charged to its phase instead
// ("by_step_call"), and the report puts each beside the row of the line whose allocations were
// last made in that phase (the line that called backward() also holds the loss's own gradient,
// made before autograd reaches the model's output, where a trace's backward phase begins).
// Backward's work on the forward's lines (a checkpointed block's recomputation, a hook in the
// model's code) stays on them. The innermost-frame grouping (torch's own files, both sides) and the
// modules are unchanged.
// Note [The step's workspaces]
// Whether a trace of a training step shows cuBLAS's and cuBLASLt's workspaces on the lines and
// in the modules that took them, or as allocated before tracing, depends on where the trace
// starts, which the estimate cannot know: a whole program traced (`memtrace run train.py`)
// holds them where its first step's first matmul in each thread took them (the forward's line
// and module; the line that called backward() and the module whose backward ran first, for
// autograd's thread); a trace that starts after the first step holds them untraced. So the
// estimate keeps them apart from every grouping of the requested peak ("requested_peak.
// step_workspaces", with their total), grouped as the rest is: by innermost line, by the user's
// line (or the step's own call, as backward's allocations are: Note [The step's own calls]), by
// module, and by owner and category (temporary of the taking node's owner). The report reads
// the trace and puts them either where they were taken or beside the untraced row
// (Note [Where the step's workspaces are] in tracer/report/prediction.cpp). Everything else
// plus these sums to the requested peak.
//
// Note [Module x category predicted]
// The tracer's module table (Note [The module table] in tracer/report/analysis.h) puts every
// byte live at the measured peak in a cell: its owner (a module, an owner that is not a
// module, or none) and its category. The same cells are predicted here, at the requested peak,
// so that they sum to peak_requested_bytes, the figure the measured peak is compared with:
// - owner: a parameter's, gradient's and optimizer state's is the parameter's module (a graph
//   file's storage "module"; a weight of a TorchScript graph, its name's: Note [Everything a
//   parameter has is its module's] in python/mem_tracer/training.py); anything else is its
//   producer's module (a workspace, the node's that took it); a node outside every module is
//   <optimizer.step> in the optimizer phase, else <no module>, as are the inputs.
// - category: a training step's storages carry theirs (graph files); an inference graph's have
//   none, and are named as a trace of a forward under no_grad names them: weights parameter,
//   inputs input, everything the forward allocates temporary (autograd saves nothing), as are
//   the library workspaces.
PeakAttribution attributeRequestedPeak(const Graph& graph, const std::vector<StorageId>& live,
                                       const std::vector<Workspace>& workspaces);

}  // namespace memtrace::estimator
