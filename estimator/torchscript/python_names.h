#pragma once

// Which Python name holds each value, found while the graph is built: the location of a node
// (its Python stack, the statement it belongs to, the scope it binds in), the statements of
// traced graphs (Note [Names in traced graphs]), the names a call returns (Note [Names
// returned by a function]), the elements a statement's container holds (Note [Containers a
// statement builds]) and the stores a trace dropped (Note [Stores the trace dropped]). One
// class with its own state (PythonNames); the GraphBuilder (graph_builder_internal.h) runs the
// ops and asks it where each one is and binds what each one made. Not part of the estimator's
// API.

#include <torch/csrc/jit/api/module.h>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "estimator/eager_names.h"
#include "estimator/graph.h"
#include "estimator/python_source.h"
#include "estimator/torchscript/source_locations.h"

namespace memtrace::estimator::torchscript::internal {

namespace jit = torch::jit;

// A statement of a traced model's Python code that is still running, and the values its last
// node so far produced (after node `after`): when the next node belongs to another statement,
// those are what the statement assigns.
struct PendingStatement {
  SourceFrame statement;
  ScopeId scope;
  std::vector<ValueId> values;
  NodeId after;
  std::string last_callee;  // the module the statement last called
  // The Python function the statement last called (a deeper level that finished): its scope,
  // the last statement it ran, and the node that statement ended with.
  ScopeId callee_scope;
  SourceFrame callee_statement;
  NodeId callee_after;
  // What the statement held as each of its calls began, and the node that made it: the
  // elements of a container it builds (Note [Containers a statement builds]).
  std::vector<std::pair<ValueId, NodeId>> parts;
  // Lists and tuples the tracer built to pass to an op of the statement (Note [Lists passed
  // by name]).
  std::vector<ValueId> packs;
};

// One function invocation.
struct Frame {
  ScopeId scope;
  std::string module_path;
  std::string function;
  std::vector<SourceFrame> callers;  // call sites, innermost first (scripted code)
  std::vector<SourceFrame> last_stack;
  std::string last_statement;
  bool last_traced = false;
  size_t module_depth = 0;                      // nn.Module calls from the root module
  std::vector<SourceFrame> first_traced_stack;  // of the first traced node run in this call
  // Traced graphs (Note [Names in traced graphs]): the statements the last node belongs to,
  // outermost first, and the scopes of the Python functions they are in.
  std::vector<PendingStatement> statements;
  std::map<std::string, ScopeId> traced_scopes;
  // Traced: the statements the last node run belonged to, outermost first (the forward's
  // last line, then the line in each function it called), with their functions' scopes.
  std::vector<std::pair<SourceFrame, ScopeId>> last_statements;
};

// Where a node runs: its Python stack, the statement it belongs to, the scope it binds in.
struct Location {
  std::vector<SourceFrame> stack;
  std::vector<std::string> targets;  // names the statement binds
  ScopeId scope;
  std::string module_path;
  bool traced = false;
};

class PythonNames {
 public:
  // The values a node's output `index` holds (GraphBuilder::valuesOf), asked for only for the
  // outputs a name is bound to.
  using OutputValues = std::function<std::vector<ValueId>(size_t index)>;

  PythonNames(const jit::Module& module, Graph& graph, SourceLocations& locations,
              SourceFileCache& source_files,
              const std::unordered_map<const c10::ivalue::Object*, std::string>& module_paths)
      : module_(module),
        graph_(graph),
        locations_(locations),
        source_files_(source_files),
        module_paths_(module_paths) {}

  Location locate(const jit::Node* node, Frame& frame);
  // Whether a scripted prim::Loop is a list or dict comprehension (Note [A comprehension's
  // own names]).
  bool isComprehension(const jit::Node* node);
  void enterStatements(Frame& frame, const std::vector<SourceFrame>& stack, Location& location,
                       const std::string* callee = nullptr);
  void noteStatementValues(Frame& frame, const std::vector<ValueId>& values);
  // Notes the lists and tuples without a source location that node `id` (traced, of the
  // running statement) reads (Note [Lists passed by name]).
  void notePackedArguments(Frame& frame, NodeId id);
  // Binds what the finished statements (those past the first `keep`) assigned.
  void finishStatements(Frame& frame, size_t keep);
  void bindOutputs(const jit::Node* node, const Location& location, size_t outputs,
                   const OutputValues& values_of);
  void bindReturnedNames(const Frame& callee, const Location& location, size_t outputs,
                         const OutputValues& values_of);
  void noteDroppedStores();

 private:
  void locateInlined(const jit::Node* node, const jit::InlinedCallStackPtr& callstack,
                     Location& location);
  std::string inlinedModulePath(const jit::InlinedCallStackPtr& callstack);
  std::vector<std::string> targetsOf(const SourceFrame& statement);
  bool writesIntoATensor(NodeId last) const;
  std::optional<size_t> partBound(const PendingStatement& pending);
  void bindPackedArguments(const PendingStatement& pending);
  static void notePart(PendingStatement& pending);
  void bindContainerParts(const PendingStatement& pending, const std::string& target);
  std::optional<std::vector<std::string>> returnedNamesAfter(const SourceFrame& last);
  bool bindThroughCallee(const PendingStatement& pending, const std::vector<std::string>& targets);
  std::optional<SourceFrame> droppedStoreAfter(const SourceFrame& read, ScopeId scope,
                                               const std::string& target);
  NodeId lastNode() const;

  const jit::Module& module_;
  Graph& graph_;  // the GraphBuilder's: restored with it when a branch is undone
  SourceLocations& locations_;
  SourceFileCache& source_files_;
  // Module instances by path (GraphBuilder::registerModuleTensors fills it first).
  const std::unordered_map<const c10::ivalue::Object*, std::string>& module_paths_;
  // The module path of each inlined call stack met (inlinedModulePath), cached.
  std::unordered_map<const jit::InlinedCallStack*, std::string> inlined_module_paths_;
};

}  // namespace memtrace::estimator::torchscript::internal
