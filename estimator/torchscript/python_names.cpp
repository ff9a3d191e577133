#include "estimator/torchscript/python_names.h"

#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

namespace memtrace::estimator::torchscript::internal {

namespace {

// Strips the digits TorchScript's printer appends to make a rebound name unique (att, att0,
// att1 in the saved code are all Python's `att`).
std::string withoutTrailingDigits(std::string name) {
  while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

// Whether a statement of `scope` binds `value` to the Python name `name` (printed with or
// without the digits TorchScript's printer appends).
bool isBoundAs(const Value& value, ScopeId scope, const std::string& name) {
  return std::any_of(value.bindings.begin(), value.bindings.end(), [&](const Binding& binding) {
    return binding.scope == scope && withoutTrailingDigits(binding.variable) == name;
  });
}

// A module path split before its last component: "layers.0" -> {"layers", "0"}.
std::pair<std::string_view, std::string_view> splitLastComponent(std::string_view path) {
  size_t dot = path.rfind('.');
  if (dot == std::string_view::npos) return {{}, path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

// Whether two module paths are one module, or two entries of one container (`layers.0` and
// `layers.1`).
bool isRepeatedCall(std::string_view previous, std::string_view next) {
  if (previous.empty() || next.empty()) return false;
  if (previous == next) return true;
  auto numeric = [](std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char character) {
      return std::isdigit(static_cast<unsigned char>(character));
    });
  };
  auto [previous_parent, previous_last] = splitLastComponent(previous);
  auto [next_parent, next_last] = splitLastComponent(next);
  return previous_parent == next_parent && numeric(previous_last) && numeric(next_last);
}

}  // namespace

// Note [Names in traced graphs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A traced graph keeps no reliable Python names: a value is named after whichever variable the
// tracer found holding it (F.softmax's parameter `input`, say), most values not at all, and
// module calls have no source range. What it keeps is the whole Python stack of every op, and
// the model's source file is usually still on disk. So the front end follows statements: the
// frames of this module's segment of the stack (splitByModuleCalls), outermost first, are the
// statements running at each level of Python calls (the forward's line, then the line in a
// helper it called). A statement's value is what its last node produced; when the next node
// belongs to another statement at that level, the statement is done and its value is bound to
// the name on the left of its `=` (read from the file), in the scope of the function the
// statement is in. A module call is a node of its caller's statement, found in the stack of
// the first node the callee ran. Statements that unpack into several names use the debug
// names, which the tracer sets from those very variables.

std::vector<std::string> PythonNames::targetsOf(const SourceFrame& statement) {
  if (!statement.known()) return {};
  std::optional<std::string> line = source_files_.line(statement.file, statement.line);
  return line ? assignmentTargets(*line) : std::vector<std::string>();
}

void PythonNames::enterStatements(Frame& frame, const std::vector<SourceFrame>& stack,
                                  Location& location, const std::string* callee) {
  std::vector<std::vector<SourceFrame>> segments = splitByModuleCalls(stack);
  std::vector<SourceFrame> levels;
  if (frame.module_depth + 1 < segments.size()) {
    levels.assign(segments[frame.module_depth + 1].rbegin(),
                  segments[frame.module_depth + 1].rend());
  }
  // A statement over several lines is one statement, whichever of its lines is running.
  for (SourceFrame& level : levels) {
    if (level.known()) level.line = source_files_.statementStart(level.file, level.line);
  }
  size_t common = 0;
  while (common < levels.size() && common < frame.statements.size() &&
         frame.statements[common].statement == levels[common]) {
    ++common;
  }
  // The same line calling the same module again, or the next one of a ModuleList or Sequential,
  // is a loop going round (`for layer in self.layers: x = layer(x)`), not one statement calling
  // two modules (`x = self.pool(self.conv(x))`): the previous round's assignment is done.
  if (callee && common == levels.size() && common > 0 &&
      isRepeatedCall(frame.statements[common - 1].last_callee, *callee)) {
    --common;
  } else if (callee && common == levels.size() && common > 0) {
    notePart(frame.statements.back());  // the statement calls another module
  }
  size_t running = frame.statements.size();
  // The function each level was running before: a level whose function changes under the same
  // caller statement is a new call (`decay = exp(segment_sum(pad(a)))` after `exp(segment_sum(
  // b))` two lines up: segment_sum's second call, whose names are not the first call's).
  std::vector<std::pair<std::string, std::string>> was_running;
  // A function whose last statement was its `return` runs another statement only in a new
  // call (`a, b = [chunks(t) for t in (a, b)]`: chunks' names, once per element).
  std::vector<bool> returned;
  for (const PendingStatement& pending : frame.statements) {
    was_running.emplace_back(pending.statement.file, pending.statement.function);
    std::optional<std::string> text =
        pending.statement.known()
            ? source_files_.statement(pending.statement.file, pending.statement.line)
            : std::nullopt;
    returned.push_back(text && returnedNames(*text).has_value());
  }
  finishStatements(frame, common);
  // The outermost level is the module's forward, which is this frame's own scope (module calls
  // it makes are scopes inside it); the functions it calls get scopes of their own, one per
  // call: a function whose caller is at a new statement, that had no statement running, or
  // that follows another function called by the same statement, was called again, and its
  // names are new (torch.utils.checkpoint's `ret`, once per block; falcon_h1's segment_sum,
  // twice per mamba2_chunk_scan, each call's 32 MiB locals freed as it returns).
  std::string key;
  for (size_t level = 0; level < levels.size(); ++level) {
    key += levels[level].file + ":" + levels[level].function + "/";
    if (level < common) continue;
    ScopeId scope = frame.scope;
    if (level > 0 && level == common) notePart(frame.statements[level - 1]);  // calls a function
    if (level > 0) {
      auto [entry, inserted] = frame.traced_scopes.try_emplace(key);
      bool other_function =
          level < was_running.size() &&
          (was_running[level] != std::make_pair(levels[level].file, levels[level].function) ||
           returned[level]);
      if (inserted || level > common || level >= running || other_function) {
        entry->second =
            graph_.addScope({frame.statements[level - 1].scope, levels[level].function});
      }
      scope = entry->second;
    }
    PendingStatement pending;
    pending.statement = levels[level];
    pending.scope = scope;
    frame.statements.push_back(std::move(pending));
  }
  if (callee && !frame.statements.empty()) frame.statements.back().last_callee = *callee;
  frame.last_statements.clear();
  for (const PendingStatement& pending : frame.statements) {
    frame.last_statements.emplace_back(pending.statement, pending.scope);
  }
  location.traced = true;
  location.scope = frame.statements.empty() ? frame.scope : frame.statements.back().scope;
  location.targets =
      frame.statements.empty() ? std::vector<std::string>() : targetsOf(levels.back());
}

void PythonNames::noteStatementValues(Frame& frame, const std::vector<ValueId>& values) {
  if (values.empty()) return;
  for (PendingStatement& pending : frame.statements) {
    pending.values = values;
    pending.after = lastNode();
  }
}

// Note [Containers a statement builds]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A statement's value is what its last op produced, but a statement that builds a container
// binds its name to every element: `causal_mask_mapping = {"full_attention":
// create_causal_mask(...), "sliding_attention": create_sliding_window_causal_mask(...)}`
// (transformers' decoders) holds both masks until the name is rebound, though only the second
// was made last. A trace shows no dict (the tracer saw Python build it), so the elements are
// found from the statement: as each call of the statement begins (a Python function or a
// module), what the statement last produced is the previous element, or an argument of the
// new call. Of those, the ones no later op of the statement reads are the elements; when the
// source says the statement builds a container (bindsAContainerDisplay), they are bound to its
// name with its last value.

void PythonNames::notePart(PendingStatement& pending) {
  for (ValueId id : pending.values) pending.parts.emplace_back(id, pending.after);
}

void PythonNames::bindContainerParts(const PendingStatement& pending, const std::string& target) {
  if (pending.parts.empty() || !pending.statement.known() || !pending.after.valid()) return;
  std::optional<std::string> text =
      source_files_.statement(pending.statement.file, pending.statement.line);
  if (!text || !bindsAContainerDisplay(*text)) return;
  for (const auto& [id, made_by] : pending.parts) {
    if (std::find(pending.values.begin(), pending.values.end(), id) != pending.values.end()) {
      continue;  // the last element, bound with the statement's value
    }
    bool read_later = false;
    uint32_t first = made_by.valid() ? made_by.value + 1 : 0;
    for (uint32_t index = first; index <= pending.after.value && !read_later; ++index) {
      const Node& node = graph_.nodes[index];
      read_later = !node.torch_script_only &&
                   std::find(node.inputs.begin(), node.inputs.end(), id) != node.inputs.end();
    }
    if (read_later) continue;  // an argument of a later call, or an operand
    Value& value = graph_.value(id);
    bool bound =
        std::any_of(value.bindings.begin(), value.bindings.end(), [&](const Binding& binding) {
          return binding.scope == pending.scope && binding.variable == target &&
                 binding.after == pending.after;
        });
    if (!bound) value.bindings.push_back({pending.scope, target, pending.after});
  }
}

// `inv_perm[perm] = torch.arange(n)`, `self.keys[:, :, position] = k`: a store that ends in an
// in-place op (index_put_, copy_ into a slice, fill_) copies into a tensor, which holds
// nothing of what was stored, unlike an object's attribute or a list's element.
bool PythonNames::writesIntoATensor(NodeId last) const {
  if (!last.valid()) return false;
  const std::string& op = graph_.node(last).op;
  return op.rfind("aten::", 0) == 0 && op.size() > 7 && op.back() == '_' &&
         op[op.size() - 2] != '_';
}

// Note [Lists passed by name]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `output = [hidden_state]`, `output.append(layer(...))` in a loop, then `hidden_state =
// torch.cat(output, dim=1)` (HGNetV2's blocks): the list is a Python object bound to `output`,
// holding every layer's output until the function returns, long after cat read them. A trace
// runs no op for the list's statements and builds the list, without a source location, only as
// cat's argument, so nothing named it and its elements died after cat (-1.0 % on HGNetV2 at
// batch 2 through TorchScript). Such a list passed to an op of a statement whose text passes
// exactly one bare name as a positional argument, a name no statement of the scope bound to a
// value, is that name's list: it is bound to it there, and holds its elements (as any
// container does) until the name is bound again or the function returns. A list the statement
// builds itself (`torch.cat([a, b])`) has no such name and is freed after its op, as before.
void PythonNames::notePackedArguments(Frame& frame, NodeId id) {
  if (frame.statements.empty()) return;
  for (ValueId input : graph_.node(id).inputs) {
    const Value& value = graph_.value(input);
    if (value.kind != ValueKind::kContainer || !value.producer.valid()) continue;
    const Node& producer = graph_.node(value.producer);
    if ((producer.op == "prim::ListConstruct" || producer.op == "prim::TupleConstruct") &&
        producer.stack.empty()) {
      frame.statements.back().packs.push_back(input);
    }
  }
}

void PythonNames::bindPackedArguments(const PendingStatement& pending) {
  if (pending.packs.empty() || !pending.statement.known()) return;
  std::optional<std::string> text =
      source_files_.statement(pending.statement.file, pending.statement.line);
  if (!text) return;
  std::vector<std::string> names = bareNameArguments(*text);
  std::erase_if(names, [&](const std::string& name) {
    return lastBoundTo(graph_, pending.scope, name).has_value();
  });
  if (names.size() != 1 || pending.packs.size() != 1) return;
  Value& list = graph_.value(pending.packs.front());
  NodeId after = list.producer;
  list.bindings.push_back({pending.scope, names.front(), after});
}

// Note [A part of what a call returned]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `query = query.max(dim=3).values` binds the values only: the named tuple max returned, and
// its indices with it, die as the statement ends. A trace shows no tuple (the tracer saw Python
// take the attribute), so the statement's last op seems to bind both outputs, and the indices
// (int64: twice the values' bytes) stayed alive until `query` was bound again (hiera, twice a
// block: +1.6 % at batch 2 through TorchScript). The statement's text says which part it takes
// (partTakenFromACall): `[k]` the k-th output, `.name` the output the op's schema names so
// (`values`, `indices`, `Q`, `eigenvalues`). Where neither says, every output stays bound, as
// a name holding the whole tuple would hold them: never less than Python holds.
std::optional<size_t> PythonNames::partBound(const PendingStatement& pending) {
  if (pending.values.size() < 2 || !pending.after.valid() || !pending.statement.known()) {
    return std::nullopt;
  }
  const Node& node = graph_.node(pending.after);
  if (node.outputs != pending.values) return std::nullopt;
  std::optional<std::string> text =
      source_files_.statement(pending.statement.file, pending.statement.line);
  std::optional<std::string> part = text ? partTakenFromACall(*text) : std::nullopt;
  if (!part) return std::nullopt;
  size_t count = pending.values.size();
  if (part->front() == '[') {
    std::string inside = part->substr(1, part->size() - 2);
    inside.erase(std::remove_if(inside.begin(), inside.end(),
                                [](char character) { return std::isspace(character); }),
                 inside.end());
    bool negative = !inside.empty() && inside.front() == '-';
    std::string digits = negative ? inside.substr(1) : inside;
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char character) { return std::isdigit(character); })) {
      return std::nullopt;  // a slice, a name: not one output
    }
    auto index = static_cast<int64_t>(std::stoll(digits));
    if (negative) index = static_cast<int64_t>(count) - index;
    if (index < 0 || index >= static_cast<int64_t>(count)) return std::nullopt;
    return static_cast<size_t>(index);
  }
  std::string name = part->substr(1);
  if (node.op.find("::") == std::string::npos) return std::nullopt;
  for (const std::shared_ptr<jit::Operator>& op :
       jit::getAllOperatorsFor(c10::Symbol::fromQualString(node.op))) {
    const std::vector<c10::Argument>& returns = op->schema().returns();
    if (returns.size() != count) continue;
    for (size_t index = 0; index < returns.size(); ++index) {
      if (returns[index].name() == name) return index;
    }
  }
  return std::nullopt;
}

// Note [Names a comprehension unpacks into]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `hidden_states, A, B, C = [reshape_into_chunks(t, pad, chunk) for t in (hidden_states, A, B,
// C)]` (Mamba-2's chunk scan): four calls of one function, each result bound to its own name
// until the function returns. A trace shows four calls and no list, and debug names say
// nothing of the four results, so they were bound to nothing and died at their last use
// (falcon_h1 through TorchScript, batch 2: two of them 64 MiB, -9.2 %). As each call of the
// statement begins, what the statement made so far is noted (Note [Containers a statement
// builds]); when the statement unpacks a display or a comprehension into N names and those
// notes no later op of the statement reads, plus its last value, are N distinct values, the
// k-th is bound to the k-th name. Otherwise nothing is bound, as before.
static bool bindUnpackedParts(Graph& graph, SourceFileCache& source_files,
                              const PendingStatement& pending,
                              const std::vector<std::string>& targets) {
  if (pending.values.size() != 1 || !pending.after.valid() || !pending.statement.known() ||
      pending.statement.function.starts_with("<")) {
    return false;  // a comprehension's own frame (Python < 3.12) binds in its caller's line
  }
  std::optional<std::string> text =
      source_files.statement(pending.statement.file, pending.statement.line);
  if (!text) return false;
  size_t equals = text->find('=');
  size_t open = equals == std::string::npos ? equals : text->find_first_not_of(" \t", equals + 1);
  if (open == std::string::npos || ((*text)[open] != '[' && (*text)[open] != '(')) return false;
  std::vector<ValueId> parts;
  for (const auto& [id, made_by] : pending.parts) {
    // What a later op of the statement reads is an operand (the padded copy a call reshapes),
    // not a result.
    bool read_later = false;
    uint32_t first = made_by.valid() ? made_by.value + 1 : 0;
    for (uint32_t index = first; index <= pending.after.value && !read_later; ++index) {
      const Node& node = graph.nodes[index];
      read_later = !node.torch_script_only &&
                   std::find(node.inputs.begin(), node.inputs.end(), id) != node.inputs.end();
    }
    if (!read_later && std::find(parts.begin(), parts.end(), id) == parts.end()) {
      parts.push_back(id);
    }
  }
  if (std::find(parts.begin(), parts.end(), pending.values.front()) != parts.end()) return false;
  parts.push_back(pending.values.front());
  if (parts.size() != targets.size()) return false;
  for (size_t index = 0; index < parts.size(); ++index) {
    graph.value(parts[index]).bindings.push_back({pending.scope, targets[index], pending.after});
  }
  return true;
}

// `states, final_state = new_states[:, :-1], new_states[:, -1]` (Mamba-2): a traced statement
// unpacking a tuple display into names that neither debug names nor calls tie to its values
// still binds every one of them again, which releases what they held (the 4 MiB `states` from a cat
// two lines up lived until the function returned: +0.8 % on falcon_h1 through TorchScript). Each
// such name is bound to an empty container, which holds nothing: what the name held before is
// released here, and what it holds now is not guessed (binding the statement's last value to every
// name instead kept hiera's 1.5 MiB patch embedding alive, through `embeddings, bool_masked_pos,
// ids_restore = ...` and the names its caller takes them as). Names a debug name bound in the
// statement keep that binding.
static bool bindRebound(Graph& graph, SourceFileCache& source_files,
                        const PendingStatement& pending, const std::vector<std::string>& targets) {
  if (pending.values.empty() || !pending.after.valid() || !pending.statement.known() ||
      pending.statement.function.starts_with("<")) {
    return false;
  }
  // Only a tuple display on the right (`a, b = x[:, :-1], x[:, -1]`): unpacking what a call
  // returned (`embeddings, mask, ids = self.embeddings(x)`) binds what the callee's names held,
  // which Note [Names returned by a function] finds where it can; nothing is released there.
  std::optional<std::string> text =
      source_files.statement(pending.statement.file, pending.statement.line);
  size_t equals = text ? text->find('=') : std::string::npos;
  if (equals == std::string::npos) return false;
  bool tuple_display = false;
  PythonCursor cursor(std::string_view(*text).substr(equals + 1));
  while (cursor.next())
    tuple_display = tuple_display || (cursor.character() == ',' && cursor.depth() == 0);
  if (!tuple_display) return false;
  // The statement's first node: walking back while the nodes run this statement.
  auto runs_statement = [&](const Node& node) {
    return std::any_of(node.stack.begin(), node.stack.end(), [&](const SourceFrame& frame) {
      return frame.file == pending.statement.file && frame.function == pending.statement.function &&
             source_files.statementStart(frame.file, frame.line) == pending.statement.line;
    });
  };
  uint32_t first = pending.after.value;
  while (first > 0 && runs_statement(graph.nodes[first - 1])) --first;
  bool bound_any = false;
  ValueId nothing;
  for (const std::string& target : targets) {
    bool bound_here = false;
    for (const Value& value : graph.values) {
      for (const Binding& binding : value.bindings) {
        bound_here = bound_here || (binding.scope == pending.scope && binding.variable == target &&
                                    binding.after.valid() && binding.after.value >= first &&
                                    binding.after.value <= pending.after.value);
      }
    }
    if (bound_here) continue;
    if (!nothing.valid()) {
      Value empty;
      empty.kind = ValueKind::kContainer;
      empty.producer = pending.after;
      nothing = graph.addValue(std::move(empty));
    }
    graph.value(nothing).bindings.push_back({pending.scope, target, pending.after});
    bound_any = true;
  }
  return bound_any;
}

// Binds what the finished statements (those past the first `keep`) assigned.
void PythonNames::finishStatements(Frame& frame, size_t keep) {
  while (frame.statements.size() > keep) {
    PendingStatement& pending = frame.statements.back();
    bindPackedArguments(pending);
    std::vector<std::string> targets = targetsOf(pending.statement);
    if (bindThroughCallee(pending, targets)) {
      // Bound to what the function it called returned.
      if (targets.size() == 1) bindContainerParts(pending, targets.front());
    } else if (targets.size() == 1) {
      std::optional<size_t> part = partBound(pending);
      for (size_t index = 0; index < pending.values.size(); ++index) {
        if (part && index != *part) continue;
        graph_.value(pending.values[index])
            .bindings.push_back({pending.scope, targets.front(), pending.after});
      }
      bindContainerParts(pending, targets.front());
    } else if (targets.size() > 1 && bindUnpackedParts(graph_, source_files_, pending, targets)) {
      // Each call of a comprehension or display unpacked into its own name.
    } else if (targets.size() > 1 && bindRebound(graph_, source_files_, pending, targets)) {
      // Names the statement binds again, to values it does not show.
    } else if (std::optional<std::string> line =
                   pending.statement.known()
                       ? source_files_.line(pending.statement.file, pending.statement.line)
                       : std::nullopt;
               !line && pending.statement.known()) {
      for (ValueId id : pending.values) graph_.unnamed_values.push_back({id, pending.scope});
      noteSourceMissing(graph_, pending.statement);
    } else if (std::optional<std::string> target = line ? storedTarget(*line) : std::nullopt;
               target && !pending.values.empty() && !writesIntoATensor(pending.after)) {
      noteStoredInObject(graph_, pending.statement, pending.scope, *target, pending.values,
                         pending.after);
    }
    if (frame.statements.size() >= 2) {
      PendingStatement& caller = frame.statements[frame.statements.size() - 2];
      if (pending.statement.function.starts_with("<")) {
        // `<listcomp>` (a frame of its own before Python 3.12): what its calls made are
        // parts of the statement that runs it (Note [Names a comprehension unpacks into]).
        caller.parts.insert(caller.parts.end(), pending.parts.begin(), pending.parts.end());
      }
      caller.callee_scope = pending.scope;
      caller.callee_statement = pending.statement;
      caller.callee_after = pending.after;
    }
    frame.statements.pop_back();
  }
}

// Note [Names returned by a function]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `attn_output, attn_weights = attention_interface(...)`, or `out = helper(x)`: Python binds
// the caller's names to the objects the callee's names held as it returned, and a tuple bound
// to one name holds all of its elements. The `return` line usually runs no op (`return
// attn_output, attn_weights`), so no node's stack names it; it is the first `return` in the
// source at or after the callee's last statement run, at that statement's indentation or
// less (a deeper one sits in a block that may not have run); failing that, when every branch
// returns, the one deeper return that only names values (no op ran after the last statement,
// so a return that computes did not run). Its bare names are looked up in the callee's scope. Only
// when the call is the statement's last node (`a, b = f(x)`, not `a, b = f(x).chunk(2)`), and only
// for returns the line parser reads whole.
std::optional<std::vector<std::string>> PythonNames::returnedNamesAfter(const SourceFrame& last) {
  if (!last.known()) return std::nullopt;
  auto indentation = [](const std::string& text) {
    size_t first = text.find_first_not_of(" \t");
    return first == std::string::npos ? text.size() : first;
  };
  std::optional<std::string> first_line = source_files_.line(last.file, last.line);
  if (!first_line) return std::nullopt;
  size_t statement_indentation = indentation(*first_line);
  // Returns in deeper blocks that only name values: no op ran after `last`, so a return that
  // computes something did not run, and one of these did.
  std::vector<std::vector<std::string>> naming_only;
  constexpr int64_t kLinesToScan = 80;
  for (int64_t number = last.line; number < last.line + kLinesToScan; ++number) {
    std::optional<std::string> line = source_files_.line(last.file, number);
    if (!line) break;  // the end of the file ends the function too
    size_t depth = indentation(*line);
    std::string_view text = std::string_view(*line).substr(std::min(depth, line->size()));
    if (number > last.line && beginsADefinition(text)) {
      break;  // past the end of the function
    }
    if (!text.starts_with("return")) continue;
    if (depth <= statement_indentation) return returnedNames(*line);
    std::optional<std::vector<std::string>> names = returnedNames(*line);
    if (names && std::none_of(names->begin(), names->end(),
                              [](const std::string& name) { return name.empty(); })) {
      naming_only.push_back(*names);
    }
  }
  // No return at the statement's depth (both branches of an if return): the one that names
  // what it returns, when it is the only one (DynamicSlidingWindowLayer.update's
  // `return full_key_states, full_value_states`, beside a return of two slices).
  if (naming_only.size() == 1) return naming_only.front();
  return std::nullopt;
}

bool PythonNames::bindThroughCallee(const PendingStatement& pending,
                                    const std::vector<std::string>& targets) {
  if (targets.empty() || !pending.callee_scope.valid() || !pending.after.valid() ||
      !pending.callee_after.valid() || pending.callee_after.value != pending.after.value) {
    return false;
  }
  std::optional<std::vector<std::string>> returned = returnedNamesAfter(pending.callee_statement);
  if (!returned) return false;
  std::vector<std::optional<ValueId>> held;
  for (const std::string& name : *returned) {
    held.push_back(name.empty() ? std::nullopt : lastBoundTo(graph_, pending.callee_scope, name));
  }
  if (targets.size() == 1) {
    // One name: the returned value, or the whole tuple, which holds every element.
    if (returned->size() == 1 && !held.front()) return false;
    for (const std::optional<ValueId>& value : held) {
      if (value) {
        graph_.value(*value).bindings.push_back({pending.scope, targets.front(), pending.after});
      }
    }
    if (returned->size() > 1) {
      for (ValueId id : pending.values) {
        graph_.value(id).bindings.push_back({pending.scope, targets.front(), pending.after});
      }
    }
    return true;
  }
  if (returned->size() != targets.size()) return false;
  for (size_t index = 0; index < targets.size(); ++index) {
    if (held[index]) {
      graph_.value(*held[index]).bindings.push_back({pending.scope, targets[index], pending.after});
    }
  }
  return true;
}

bool PythonNames::isComprehension(const jit::Node* node) {
  const RangeLocation& range = locations_.resolve(node->sourceRange());
  return node->kind() == jit::prim::Loop && range.known && !range.traced && range.bracketed;
}

Location PythonNames::locate(const jit::Node* node, Frame& frame) {
  const RangeLocation& range = locations_.resolve(node->sourceRange());
  Location location;
  location.scope = frame.scope;
  location.module_path = frame.module_path;
  if (std::optional<jit::InlinedCallStackPtr> callstack = node->callstack()) {
    locateInlined(node, *callstack, location);
    if (!range.traced) {
      frame.last_stack = location.stack;
      frame.last_traced = false;
      return location;
    }
  }
  if (!range.known) {
    // prim nodes (ListUnpack, GetAttr) carry no range: they belong to the statement before.
    location.stack = frame.last_stack.empty() ? frame.callers : frame.last_stack;
    if (frame.last_traced && !frame.statements.empty()) {
      location.traced = true;
      location.scope = frame.statements.back().scope;
      location.targets = targetsOf(frame.statements.back().statement);
    } else {
      location.targets = assignmentTargets(frame.last_statement);
    }
    return location;
  }
  if (range.traced) {
    location.stack = range.frames;
    enterStatements(frame, location.stack, location);
    if (frame.first_traced_stack.empty()) frame.first_traced_stack = location.stack;
    frame.last_statement.clear();
  } else {
    SourceFrame here = range.frames.front();
    here.function = frame.function;
    location.stack.reserve(frame.callers.size() + 1);
    location.stack.push_back(std::move(here));
    location.stack.insert(location.stack.end(), frame.callers.begin(), frame.callers.end());
    location.targets = assignmentTargets(range.statement);
    frame.last_statement = range.statement;
  }
  frame.last_stack = location.stack;
  frame.last_traced = range.traced;
  return location;
}

// A node inlined from calls (Note [The interpreter's graph]): its module is found by following
// the call stack's module instances down from the root module, and a scripted node's Python
// stack is its own line, then the call sites, innermost first (a traced node's range holds its
// whole stack already).
void PythonNames::locateInlined(const jit::Node* node, const jit::InlinedCallStackPtr& callstack,
                                Location& location) {
  location.module_path = inlinedModulePath(callstack);
  const RangeLocation& range = locations_.resolve(node->sourceRange());
  if (!range.known || range.traced) return;
  std::vector<jit::InlinedCallStackEntry> entries = callstack->vec();
  SourceFrame here = range.frames.front();
  here.function = std::get<0>(entries.back()) ? std::get<0>(entries.back())->name() : "";
  location.stack.push_back(std::move(here));
  for (size_t index = entries.size(); index-- > 0;) {
    const RangeLocation& call = locations_.resolve(std::get<1>(entries[index]));
    if (!call.known || call.traced) continue;
    SourceFrame site = call.frames.front();
    site.function = index > 0 && std::get<0>(entries[index - 1])
                        ? std::get<0>(entries[index - 1])->name()
                        : std::string("forward");
    location.stack.push_back(std::move(site));
  }
  location.targets = assignmentTargets(range.statement);
}

// The module a call stack's innermost method belongs to. The stack names each module by the
// attribute its caller fetched it from (`0` for `self.layers[0]`, not `layers.0`) and its
// class: the module is the nearest one below its caller with that attribute name and class.
std::string PythonNames::inlinedModulePath(const jit::InlinedCallStackPtr& callstack) {
  auto cached = inlined_module_paths_.find(callstack.get());
  if (cached != inlined_module_paths_.end()) return cached->second;
  c10::intrusive_ptr<c10::ivalue::Object> object = module_._ivalue();
  for (const jit::InlinedCallStackEntry& entry : callstack->vec()) {
    const std::optional<jit::ModuleInstanceInfo>& instance = std::get<2>(entry);
    if (!instance || instance->instance_name() == "SELF") continue;  // a function, or self
    // Breadth first, a few levels down: containers (ModuleList, ModuleDict) are not called.
    std::vector<c10::intrusive_ptr<c10::ivalue::Object>> level = {object};
    c10::intrusive_ptr<c10::ivalue::Object> found;
    for (int depth = 0; depth < 4 && !found && !level.empty(); ++depth) {
      std::vector<c10::intrusive_ptr<c10::ivalue::Object>> next;
      for (const auto& parent : level) {
        const c10::ClassTypePtr& type = parent->type();
        for (size_t slot = 0; slot < type->numAttributes() && !found; ++slot) {
          const c10::IValue& value = parent->getSlot(slot);
          if (!value.isObject() || !value.toObject()->type()->is_module()) continue;
          if (type->getAttributeName(slot) == instance->instance_name() &&
              value.toObject()->type() == instance->class_type()) {
            found = value.toObject();
          }
          next.push_back(value.toObject());
        }
      }
      level = std::move(next);
    }
    if (!found) break;  // the path found so far
    object = found;
  }
  auto path = module_paths_.find(object.get());
  std::string result = path == module_paths_.end() ? std::string() : path->second;
  inlined_module_paths_.emplace(callstack.get(), result);
  return result;
}

// Eager lifetimes need to know which Python name holds each value (Note [Eager and
// TorchScript lifetimes]). TorchScript keeps the names as debug names (`out.1`, renamed
// `out0` when the saved code binds `out` again); the statement the node comes from says which
// names it binds, and settles what a debug name does not (a traced value is named after the
// first variable the tracer found holding it).
void PythonNames::bindOutputs(const jit::Node* node, const Location& location, size_t outputs,
                              const OutputValues& values_of) {
  NodeId after = lastNode();
  const std::vector<std::string>& targets = location.targets;
  // `a, _ = f(x)`: TorchScript leaves `_` unnamed, yet Python binds it; the statement's
  // targets name an unpacking node's outputs by position.
  bool unpacking =
      (node->kind() == jit::prim::TupleUnpack || node->kind() == jit::prim::ListUnpack) &&
      targets.size() == node->outputs().size();
  for (size_t index = 0; index < node->outputs().size() && index < outputs; ++index) {
    const jit::Value* output = node->outputs()[index];
    if (!output->hasDebugName() && !unpacking) continue;
    std::vector<ValueId> ids = values_of(index);
    if (ids.empty()) continue;
    std::string name = unpacking ? targets[index] : output->debugNameBase();
    auto bound = [&](const std::string& candidate) {
      return std::find(targets.begin(), targets.end(), candidate) != targets.end();
    };
    if (!bound(name) && bound(withoutTrailingDigits(name))) name = withoutTrailingDigits(name);
    // An if or a loop binds no name of its own: its outputs are the Python variables its
    // blocks assigned (printed `h0`, `h1` where the source rebinds `h`), bound there already.
    if ((node->kind() == jit::prim::If || node->kind() == jit::prim::Loop) &&
        std::all_of(ids.begin(), ids.end(), [&](ValueId id) {
          return isBoundAs(graph_.value(id), location.scope, withoutTrailingDigits(name));
        })) {
      continue;
    }
    if (location.traced) {
      // Only unpacking statements are left to debug names (Note [Names in traced graphs]).
      if (targets.size() < 2 || !bound(name)) continue;
    } else if (!bound(name) && targets.size() == 1) {
      name = targets.front();
    }
    for (ValueId id : ids) graph_.value(id).bindings.push_back({location.scope, name, after});
  }
}

// `x, _ = self.attention(x)` on a traced module: the trace keeps only what the caller used, but
// Python binds every element of the returned tuple. The callee's return line says which of its
// names each element was (`return self.proj(out), weights`): the caller's name holds the value
// the callee's name held as it returned. The elements the return line computes rather than
// names (`self.proj(out)`) are the call's outputs no callee name accounts for, in order; they
// are bound when as many are left as there are such elements. One name for several elements
// holds them all (the call's outputs are bound to it as the statement's values already).
void PythonNames::bindReturnedNames(const Frame& callee, const Location& location, size_t outputs,
                                    const OutputValues& values_of) {
  const std::vector<std::string>& targets = location.targets;
  if (targets.empty()) return;
  // A forward wrapped by a decorator (transformers' GradientCheckpointingLayer: `return
  // forward(self, *args, **kwargs)`) returns what the function it calls returns: the names
  // are that function's.
  size_t level = 0;
  const std::vector<std::pair<SourceFrame, ScopeId>>& chain = callee.last_statements;
  while (level + 1 < chain.size()) {
    std::optional<std::string> line =
        chain[level].first.known()
            ? source_files_.line(chain[level].first.file, chain[level].first.line)
            : std::nullopt;
    std::optional<std::vector<std::string>> passed = line ? returnedNames(*line) : std::nullopt;
    if (!passed || passed->size() != 1 || !passed->front().empty()) break;
    ++level;
  }
  if (chain.empty()) return;
  std::optional<std::vector<std::string>> returned = returnedNamesAfter(chain[level].first);
  if (!returned) return;
  ScopeId scope = level == 0 ? callee.scope : chain[level].second;
  NodeId after = lastNode();
  if (targets.size() == 1 && returned->size() > 1) {
    // `outputs = block(x)` (Falcon's layers): one name holds the whole tuple, so every element,
    // the ones the trace dropped too, until `outputs` is bound again.
    for (const std::string& name : *returned) {
      if (name.empty()) continue;
      if (std::optional<ValueId> held = lastBoundTo(graph_, scope, name)) {
        graph_.value(*held).bindings.push_back({location.scope, targets.front(), after});
      }
    }
    return;
  }
  // One name for one element is bound as the statement's value already.
  if (targets.size() < 2 || returned->size() != targets.size()) return;
  std::vector<ValueId> named;
  std::vector<size_t> computed;
  for (size_t index = 0; index < targets.size(); ++index) {
    if ((*returned)[index].empty()) {
      computed.push_back(index);
      continue;
    }
    std::optional<ValueId> held = lastBoundTo(graph_, scope, (*returned)[index]);
    if (held) {
      graph_.value(*held).bindings.push_back({location.scope, targets[index], after});
      named.push_back(*held);
    }
  }
  std::vector<ValueId> unaccounted;
  for (size_t index = 0; index < outputs; ++index) {
    for (ValueId id : values_of(index)) {
      if (std::find(named.begin(), named.end(), id) == named.end()) unaccounted.push_back(id);
    }
  }
  if (unaccounted.size() != computed.size()) return;
  for (size_t index = 0; index < computed.size(); ++index) {
    graph_.value(unaccounted[index])
        .bindings.push_back({location.scope, targets[computed[index]], after});
  }
}

// Note [Stores the trace dropped]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A sliding-window cache (transformers' DynamicSlidingWindowLayer) computes the full keys
// (`full_key_states = torch.cat([self.keys, key_states])`), returns them, and stores a view of
// them (`self.keys = full_key_states[:, :, -window:]`). Nothing later in the traced call reads
// that view, so the tracer drops the slicing ops, and with them every trace of the store; but
// Python's object still holds the full keys through the view, and let the old ones go. So when
// a function reads a stored value and its source stores into the same attribute later on, by a
// statement no node of that call ran, the first tensor it computed from the stored value is
// taken as what that statement stored (Note [Values stored into objects] then has it replace
// the old value). It stays approximate, as every store does.
void PythonNames::noteDroppedStores() {
  // (scope, stored value read) pairs already handled: one store per call and attribute.
  std::set<std::pair<uint32_t, uint32_t>> handled;
  for (size_t index = 0; index < graph_.nodes.size(); ++index) {
    const Node& node = graph_.nodes[index];
    if (node.stack.empty() || !node.stack.front().known()) continue;
    std::vector<ValueId> tensors;
    for (ValueId output : node.outputs) {
      if (graph_.value(output).kind == ValueKind::kTensor) tensors.push_back(output);
    }
    if (tensors.empty()) continue;
    std::vector<ValueId> read = node.inputs;
    for (size_t at = 0; at < read.size(); ++at) {
      const Value& input = graph_.value(read[at]);
      if (input.kind == ValueKind::kContainer) {
        read.insert(read.end(), input.elements.begin(), input.elements.end());
        continue;
      }
      std::optional<std::string> target = storedIntoOf(input);
      if (!target || !handled.insert({node.scope.value, read[at].value}).second) continue;
      std::optional<SourceFrame> store = droppedStoreAfter(node.stack.front(), node.scope, *target);
      if (!store) continue;
      noteStoredInObject(graph_, *store, node.scope, *target, tensors,
                         NodeId(static_cast<uint32_t>(index)));
    }
  }
}

// The first statement after `read` in its function that stores into `target`, if no node of
// `scope` ran it.
std::optional<SourceFrame> PythonNames::droppedStoreAfter(const SourceFrame& read, ScopeId scope,
                                                          const std::string& target) {
  constexpr int64_t kLinesToScan = 80;
  for (int64_t number = read.line + 1; number < read.line + kLinesToScan; ++number) {
    std::optional<std::string> line = source_files_.line(read.file, number);
    if (!line) return std::nullopt;
    std::string_view text = *line;
    text.remove_prefix(std::min(text.size(), text.find_first_not_of(" \t")));
    if (beginsADefinition(text)) return std::nullopt;  // past the end of the function
    if (storedTarget(*line) != target) continue;
    bool ran = std::any_of(graph_.nodes.begin(), graph_.nodes.end(), [&](const Node& node) {
      return node.scope == scope && !node.stack.empty() && node.stack.front().file == read.file &&
             node.stack.front().line == number;
    });
    if (ran) return std::nullopt;
    return SourceFrame{read.file, number, read.function};
  }
  return std::nullopt;
}

NodeId PythonNames::lastNode() const {
  return graph_.nodes.empty() ? NodeId() : NodeId(graph_.nodes.size() - 1);
}

}  // namespace memtrace::estimator::torchscript::internal
