#include "estimator/torchscript/op_rules.h"

#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>
#include <torch/library.h>

#include <cmath>
#include <functional>
#include <limits>
#include <mutex>

#include "estimator/byte_size.h"
#include "estimator/sdpa_choice.h"
#include "estimator/torchscript/graph_builder_internal.h"
#include "simulator/core/cudnn_rnn_spaces.h"

namespace memtrace::estimator::torchscript {

namespace {

// --- Meta kernels LibTorch lacks ----------------------------------------------------------------
// Registered into the dispatcher's Meta key, so that they also run where a composite op calls
// them (sdpa's math fallback calls _safe_softmax, group_norm calls native_group_norm). Each
// allocates what the CPU kernel returns, with its strides and dtypes.

at::Tensor safeSoftmaxMeta(const at::Tensor& self, int64_t dim,
                           std::optional<at::ScalarType> dtype) {
  // aten/src/ATen/native/SoftMax.cpp: softmax, then zero the rows that are all -inf.
  return at::empty_like(self, self.options().dtype(dtype.value_or(self.scalar_type())),
                        at::MemoryFormat::Contiguous);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeGroupNormMeta(
    const at::Tensor& input, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
    c10::SymInt batch, c10::SymInt, c10::SymInt, int64_t group, double) {
  // aten/src/ATen/native/group_norm.cpp: the output in the input's memory format, mean and
  // rstd (N, group) in the input's dtype.
  at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
  at::Tensor mean = at::empty({batch.expect_int(), group}, input.options());
  at::Tensor rstd = at::empty({batch.expect_int(), group}, input.options());
  return {output, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor> weightNormInterfaceMeta(const at::Tensor& v, const at::Tensor& g,
                                                           int64_t) {
  // aten/src/ATen/native/WeightNorm.cpp: w like v; the norms like g in g's accumulate type.
  at::Tensor w = at::empty_like(v, at::MemoryFormat::Contiguous);
  at::Tensor norms =
      at::empty(g.sizes(), g.options().dtype(at::toAccumulateType(g.scalar_type(), true)));
  return {w, norms};
}

at::Tensor whereMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  // aten/src/ATen/native/TensorCompare.cpp: a TensorIterator over the three, broadcast, in the
  // type self and other promote to (sdpa's math fallback makes a bool mask additive with it).
  std::vector<int64_t> shape =
      at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  // On meta, whichever of them is a CPU scalar (a Python number).
  return at::empty(shape, self.options().dtype(at::result_type(self, other)).device(at::kMeta));
}

at::Tensor histcMeta(const at::Tensor& self, int64_t bins, const at::Scalar&, const at::Scalar&) {
  // aten/src/ATen/native/Histogram.cpp: `bins` counts in the input's type (the bin edges it
  // makes on the way are dropped inside the kernel).
  TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins);
  return at::empty({bins}, self.options());
}

at::Tensor floorDivideMeta(const at::Tensor& self, const at::Tensor& other) {
  // aten/src/ATen/native/BinaryOps.cpp: the TensorIterator of div(..., rounding_mode="floor"),
  // whose structured meta kernel LibTorch has (broadcast, promoted, in the inputs' layout).
  return at::div(self, other, "floor");
}

at::Tensor& floorDivideInPlaceMeta(at::Tensor& self, const at::Tensor& other) {
  return self.div_(other, "floor");
}

at::Tensor groupedMmMeta(const at::Tensor& a, const at::Tensor& b,
                         const std::optional<at::Tensor>& offs, const std::optional<at::Tensor>&,
                         std::optional<at::ScalarType> out_dtype) {
  // aten/src/ATen/native/GroupedMMUtils.h: its composite kernel reads `offs` on the host,
  // which meta cannot. The output is made as create_grouped_gemm_output_tensor makes it, on
  // every device: rows padded to 16 bytes (TMA), so an unaligned last dim allocates more.
  TORCH_CHECK(a.dim() == 2 || a.dim() == 3, "mat_a has to be 2 or 3d");
  TORCH_CHECK(b.dim() == 2 || b.dim() == 3, "mat_b has to be 2 or 3d");
  bool a_2d = a.dim() == 2;
  bool b_2d = b.dim() == 2;
  TORCH_CHECK(offs.has_value() == (a_2d || b_2d),
              "Have to provide offsets if there is a 2d matrix, or no offset if both matrices "
              "are 3d");
  if (!a_2d || !b_2d) {
    TORCH_CHECK(a.size(-1) == b.size(-2), "contraction dimension of mat_a and mat_b must match");
  }
  std::vector<int64_t> size;
  if (a_2d) {
    size = b_2d ? std::vector<int64_t>{offs->size(0), a.size(0), b.size(1)}
                : std::vector<int64_t>{a.size(0), b.size(-1)};
  } else {
    size = b_2d ? std::vector<int64_t>{a.size(1), b.size(1)}
                : std::vector<int64_t>{a.size(0), a.size(1), b.size(-1)};
  }
  at::ScalarType dtype = out_dtype.value_or(a.scalar_type());
  int64_t alignment = 16 / static_cast<int64_t>(c10::elementSize(dtype));
  int64_t padded = (size.back() + alignment - 1) / alignment * alignment;
  std::vector<int64_t> strides = a_2d != b_2d ? std::vector<int64_t>{padded, 1}
                                              : std::vector<int64_t>{size[1] * padded, padded, 1};
  return at::empty_strided(size, strides, a.options().dtype(dtype));
}

at::Tensor logicalNotMeta(const at::Tensor& self) {
  // aten/src/ATen/native/UnaryOps.cpp: logical_not is a composite over logical_not_out, which
  // LibTorch has no meta kernel for (its meta is Python's). A bool TensorIterator output of
  // one input, as `self == 0` makes it (the same iterator, whose meta kernel LibTorch has).
  return at::eq(self, 0);
}

void registerMetaKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: a registration lasts as long as its Library object.
    auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta,
                                       __FILE__, __LINE__);
    library->impl("_safe_softmax", TORCH_FN(safeSoftmaxMeta));
    library->impl("native_group_norm", TORCH_FN(nativeGroupNormMeta));
    library->impl("_weight_norm_interface", TORCH_FN(weightNormInterfaceMeta));
    library->impl("where.self", TORCH_FN(whereMeta));
    library->impl("histc", TORCH_FN(histcMeta));
    library->impl("floor_divide", TORCH_FN(floorDivideMeta));
    library->impl("floor_divide_.Tensor", TORCH_FN(floorDivideInPlaceMeta));
    library->impl("_grouped_mm", TORCH_FN(groupedMmMeta));
    library->impl("logical_not", TORCH_FN(logicalNotMeta));
  });
}

// --- Fused kernels chosen by the profile --------------------------------------------------------

struct Arguments {
  const c10::FunctionSchema& schema;
  const std::vector<c10::IValue>& values;

  const c10::IValue& operator[](const char* name) const {
    std::optional<int> index = schema.argumentIndexWithName(name);
    TORCH_CHECK(index && static_cast<size_t>(*index) < values.size(), "no argument ", name);
    return values[*index];
  }
  std::optional<at::Tensor> optionalTensor(const char* name) const {
    std::optional<int> index = schema.argumentIndexWithName(name);
    if (!index || static_cast<size_t>(*index) >= values.size()) return std::nullopt;
    const c10::IValue& value = values[*index];
    if (!value.isTensor() || !value.toTensor().defined()) return std::nullopt;
    return value.toTensor();
  }
};

// The facts of a call sdpa's kernel choice reads (Note [sdpa's kernel choice]).
SdpaTensor sdpaTensor(const at::Tensor& tensor) {
  if (tensor.is_nested()) {  // no sizes of its own: its rank is all the choice reads
    return {std::vector<int64_t>(tensor.dim(), 0), 1, true};
  }
  return {tensor.sizes().vec(), tensor.dim() > 0 ? tensor.stride(-1) : 1, false};
}

SdpaCall sdpaCall(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& mask, double dropout, bool is_causal,
                  bool enable_gqa) {
  return {sdpaTensor(q),
          sdpaTensor(k),
          sdpaTensor(v),
          internal::dtypeName(q.scalar_type()),
          static_cast<int64_t>(q.element_size()),
          mask.has_value(),
          dropout,
          is_causal,
          enable_gqa};
}

// sdpa's bool masks become additive ones in the query's dtype (convert_boolean_attn_mask):
// two scalar tensors and a where.
std::optional<at::Tensor> additiveMask(const std::optional<at::Tensor>& mask,
                                       const at::Tensor& query) {
  if (!mask || mask->scalar_type() != at::kBool) return mask;
  at::Tensor zero = at::scalar_tensor(0.0, query.options());
  at::Tensor minus_infinity =
      at::scalar_tensor(-std::numeric_limits<double>::infinity(), query.options());
  // at::where has no meta kernel in LibTorch: its output is the mask's shape, contiguous.
  return at::empty(mask->sizes(), query.options());
}

at::Tensor sdpaFused(const SdpaKernel& kernel, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const std::optional<at::Tensor>& given_mask) {
  int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), source = k.size(2);
  int64_t head_dim = v.size(-1);
  std::optional<at::Tensor> mask = additiveMask(given_mask, q);
  if (mask && kernel.pad_mask_to > 1) {
    // preprocess_mask (attention.cpp): expanded to (B, H, L, S) and padded when S is not
    // aligned, which materializes B x H x L x S.
    at::Tensor expanded = mask->expand({batch, heads, length, source});
    if (source % kernel.pad_mask_to != 0) {
      int64_t pad = kernel.pad_mask_to - source % kernel.pad_mask_to;
      mask = at::constant_pad_nd(expanded, {0, pad}).slice(-1, 0, source);
    } else {
      mask = expanded;
    }
  }
  std::vector<at::Tensor> padded;
  int64_t padded_dim = head_dim;
  if (head_dim % kernel.pad_head_dim_to != 0) {
    // Flash pads the head dim of q, k and v (copies) and slices the output.
    int64_t pad = kernel.pad_head_dim_to - head_dim % kernel.pad_head_dim_to;
    padded_dim += pad;
    for (const at::Tensor* tensor : {&q, &k, &v}) {
      padded.push_back(at::constant_pad_nd(*tensor, {0, pad}));
    }
  }
  at::Tensor output;
  if (kernel.output_like_query) {
    // Transposed inputs (B, L, H, E viewed as B, H, L, E, as most models make them) give a
    // transposed output, whose transpose back is contiguous: no copy after the call.
    output = at::empty_like(padded.empty() ? q : padded.front());
  } else {
    output = kernel.bhld_output
                 ? at::empty({batch, heads, length, padded_dim}, q.options())
                 : at::empty({batch, length, heads, padded_dim}, q.options()).transpose(1, 2);
  }
  at::Tensor logsumexp;
  if (kernel.logsumexp) {
    at::ScalarType accumulate = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    logsumexp =
        kernel.bhld_output
            ? at::empty({batch, length, heads}, q.options().dtype(accumulate)).transpose(1, 2)
            : at::empty({batch, heads, length}, q.options().dtype(accumulate));
  }
  if (padded_dim != head_dim) output = output.slice(-1, 0, head_dim);
  return output;
}

std::optional<OpRuleResult> sdpaRule(const KernelRules& kernels, const Arguments& arguments) {
  at::Tensor q = arguments["query"].toTensor();
  at::Tensor k = arguments["key"].toTensor();
  at::Tensor v = arguments["value"].toTensor();
  std::optional<at::Tensor> mask = arguments.optionalTensor("attn_mask");
  double dropout = arguments["dropout_p"].toDouble();
  bool is_causal = arguments["is_causal"].toBool();
  bool enable_gqa =
      arguments.schema.argumentIndexWithName("enable_gqa") && arguments["enable_gqa"].toBool();
  SdpaChoice choice =
      chooseSdpaKernel(kernels.sdpa, sdpaCall(q, k, v, mask, dropout, is_causal, enable_gqa));
  if (choice.kernel) {
    OpRuleResult result;
    result.outputs.emplace_back(sdpaFused(*choice.kernel, q, k, v, mask));
    result.kernel = choice.name;
    result.why = choice.why;
    return result;
  }
  // The math fallback: what the meta decomposition runs (with _safe_softmax's meta kernel).
  std::optional<double> scale;
  const c10::IValue& given_scale = arguments["scale"];
  if (given_scale.isDouble()) scale = given_scale.toDouble();
  OpRuleResult result;
  result.outputs.emplace_back(
      at::scaled_dot_product_attention(q, k, v, mask, dropout, is_causal, scale, enable_gqa));
  result.kernel = choice.name;
  result.why = choice.why;
  return result;
}

// nn.MultiheadAttention's fast path (need_weights=False) as native_multi_head_attention runs
// it on both devices since 2.0: one packed projection, sdpa, the output projection.
at::Tensor multiHeadAttention(const KernelRules& kernels, const at::Tensor& query,
                              int64_t embed_dim, int64_t heads, const at::Tensor& qkv_weight,
                              const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
                              const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask,
                              std::string& kernel, std::string& why) {
  int64_t batch = query.size(0);
  at::Tensor qkv = at::linear(query, qkv_weight, qkv_bias);
  std::vector<at::Tensor> chunks = qkv.chunk(3, -1);
  for (at::Tensor& chunk : chunks) {
    chunk = chunk.view({batch, -1, heads, embed_dim / heads}).transpose(1, 2);
  }
  const c10::FunctionSchema& schema =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("aten::scaled_dot_product_attention", "")
          .schema();
  std::vector<c10::IValue> values = {
      chunks[0], chunks[1], chunks[2],     mask ? c10::IValue(*mask) : c10::IValue(),
      0.0,       false,     c10::IValue(), false};
  OpRuleResult attention = *sdpaRule(kernels, Arguments{schema, values});
  kernel = attention.kernel;
  why = attention.why;
  at::Tensor joined =
      attention.outputs.front().toTensor().transpose(1, 2).reshape({batch, -1, embed_dim});
  return at::linear(joined, proj_weight, proj_bias);
}

std::optional<OpRuleResult> nativeMultiHeadAttentionRule(const KernelRules& kernels,
                                                         const Arguments& arguments) {
  at::Tensor query = arguments["query"].toTensor();
  if (query.dim() != 3 || arguments["need_weights"].toBool()) return std::nullopt;
  OpRuleResult result;
  if (!kernels.count_kernel_scratch) {
    result.outputs.emplace_back(at::empty_like(query, at::MemoryFormat::Contiguous));
  } else {
    result.outputs.emplace_back(multiHeadAttention(
        kernels, query, arguments["embed_dim"].toInt(), arguments["num_head"].toInt(),
        arguments["qkv_weight"].toTensor(), arguments["qkv_bias"].toTensor(),
        arguments["proj_weight"].toTensor(), arguments["proj_bias"].toTensor(),
        arguments.optionalTensor("mask"), result.kernel, result.why));
  }
  result.outputs.emplace_back(at::Tensor());
  if (result.kernel.empty()) result.why = kernels.scratch_source;
  return result;
}

std::optional<OpRuleResult> encoderLayerRule(const KernelRules& kernels,
                                             const Arguments& arguments) {
  at::Tensor source = arguments["src"].toTensor();
  if (source.dim() != 3) return std::nullopt;
  OpRuleResult result;
  if (!kernels.count_kernel_scratch) {
    // The one tensor the dispatcher sees (Note [Op rules]).
    result.outputs.emplace_back(at::empty_like(source, at::MemoryFormat::Contiguous));
    result.why = kernels.scratch_source;
    return result;
  }
  // transformer_encoder_layer_forward (aten/src/ATen/native/transformers/transformer.cpp).
  int64_t embed_dim = arguments["embed_dim"].toInt();
  bool norm_first = arguments["norm_first"].toBool();
  double eps = arguments["eps"].toDouble();
  // at::layer_norm has no meta kernel in LibTorch (its composite calls native_batch_norm), so
  // the norm is written out as the kernel allocates: the output, and the per-row mean and rstd
  // of native_layer_norm (float for reduced-precision inputs) that layer_norm drops.
  auto norm = [&](const at::Tensor& x, const char* /*weight*/, const char* /*bias*/) {
    (void)eps;
    int64_t rows = x.numel() / embed_dim;
    at::ScalarType statistics = at::toAccumulateType(x.scalar_type(), /*is_cuda=*/true);
    at::Tensor mean = at::empty({rows}, x.options().dtype(statistics));
    at::Tensor rstd = at::empty({rows}, x.options().dtype(statistics));
    return at::empty_like(x, at::MemoryFormat::Contiguous);
  };
  auto attention = [&](const at::Tensor& x) {
    return multiHeadAttention(kernels, x, embed_dim, arguments["num_heads"].toInt(),
                              arguments["qkv_weight"].toTensor(), arguments["qkv_bias"].toTensor(),
                              arguments["proj_weight"].toTensor(),
                              arguments["proj_bias"].toTensor(), arguments.optionalTensor("mask"),
                              result.kernel, result.why);
  };
  auto feed_forward = [&](const at::Tensor& x) {
    at::Tensor hidden =
        at::linear(x, arguments["ffn_weight_1"].toTensor(), arguments["ffn_bias_1"].toTensor());
    // relu and gelu have no meta kernel in LibTorch: the activation is a new tensor of its size.
    hidden = at::empty_like(hidden, at::MemoryFormat::Contiguous);
    return at::linear(hidden, arguments["ffn_weight_2"].toTensor(),
                      arguments["ffn_bias_2"].toTensor());
  };
  at::Tensor x = source;
  if (norm_first) {
    x = x + attention(norm(x, "norm_weight_1", "norm_bias_1"));
    x = x + feed_forward(norm(x, "norm_weight_2", "norm_bias_2"));
  } else {
    x = norm(x + attention(x), "norm_weight_1", "norm_bias_1");
    x = norm(x + feed_forward(x), "norm_weight_2", "norm_bias_2");
  }
  result.outputs.emplace_back(x);
  return result;
}

// aten/src/ATen/native/RNN.cpp, FullLayer: on the CPU each layer (and direction) first
// projects the whole sequence through its input weights, one (T*B, gates*H) matrix product, and
// then runs the steps on rows of it; on any other device, meta included, every step projects
// its own input. The decomposition run on meta misses that matrix, which lives while its layer
// runs: it is held here for the whole call (every layer's is the same size). Checked against
// the real op for GRU, one direction (tests/estimator/test_op_rules.py); a bidirectional GRU
// keeps both directions' outputs besides (not modelled: the rule declines), and the CPU runs
// LSTM through oneDNN (mkldnn_rnn), which allocates otherwise.
// The op itself, with its arguments as given, through the dispatcher: its outputs.
std::vector<c10::IValue> runAsGiven(const Arguments& arguments) {
  torch::jit::Stack stack(arguments.values.begin(), arguments.values.end());
  c10::Dispatcher::singleton()
      .findSchemaOrThrow(arguments.schema.name().c_str(), arguments.schema.overload_name().c_str())
      .callBoxed(stack);
  return {std::make_move_iterator(stack.begin()), std::make_move_iterator(stack.end())};
}

std::optional<OpRuleResult> recurrentRule(int64_t gates, const KernelRules& kernels,
                                          const Arguments& arguments) {
  if (kernels.device != "cpu" || arguments["bidirectional"].toBool()) return std::nullopt;
  at::Tensor input = arguments["input"].toTensor();
  const c10::IValue& hx = arguments["hx"];
  at::Tensor hidden_state = hx.isTensor() ? hx.toTensor() : hx.toTensorList().get(0);
  if (input.dim() < 2 || hidden_state.dim() < 1) return std::nullopt;
  int64_t rows = input.numel() / std::max<int64_t>(1, input.size(-1));
  at::Tensor projection = at::empty({rows, gates * hidden_state.size(-1)}, input.options(),
                                    at::MemoryFormat::Contiguous);
  OpRuleResult result;
  result.outputs = runAsGiven(arguments);
  return result;
}

// Note [cuDNN's RNN in the TorchScript front end]
// On a CUDA profile nn.LSTM, nn.GRU and nn.RNN run as cuDNN's _cudnn_rnn (aten/src/ATen/native/
// cudnn/RNN.cpp), which allocates nothing like the op's meta decomposition (every step's
// gates, projections and states): the input made contiguous in time-major order (a copy under
// batch_first), the output, hy and an LSTM's cy, cuDNN's weight buffer when the weights are not
// already one buffer of it (RNN.cpp then copies them in, for every call: a model loaded from a
// TorchScript file and moved with .cuda() has them apart, as the file does unless it was saved
// from a module Module.cuda() had flattened), the work space and, with `train`, the reserve
// space; it frees the work space, then the copy. The recording makes the call the same way
// (Note [cuDNN's RNN reserve, bracketed] in python/mem_tracer/estimator/device_kernels.py);
// here it is made the same way too, with the simulated cuDNN's sizes (one formula:
// simulator/core/cudnn_rnn_spaces.h), and bracketed as there: real cuDNN's work and reserve
// spaces lie between nothing and twice those (assumed, not measured on a GPU), so the peak
// may be up to work + reserve lower or higher. Before this the front end ran the meta
// decomposition on CUDA profiles and said nothing: a 3-layer nn.LSTM(256, 256) over 64 x 8,
// saved as TorchScript and loaded onto the simulated H100, peaked at 16,924,672 B (its
// weights copied into cuDNN's buffer, the work space) against 8,503,296 B estimated (-49.8 %).
// A packed sequence (the .data overloads), or `train` with dropout (cuDNN's dropout state, made
// by the first such call of a process and kept, 17,301,504 B on the simulated H100), stays the
// decomposition's, bracketed by what it held beyond its outputs below and by twice cuDNN's
// spaces, the weights' copy, the input's copy and the state above. A data type cuDNN does not
// take (bfloat16) runs PyTorch's own CUDA cells, close to the decomposition: not bracketed.
// Tested against the simulated card in tests/estimator/test_rnn_weights.py.

// Twice the largest simulated cuDNN dropout state (a 64-byte Philox state per thread of an
// H100 or H200: 132 multiprocessors of 2,048): the bound the recording takes too.
constexpr int64_t kDropoutStateAtMost = 2 * int64_t{64} * 132 * 2048;

int64_t storageBytes(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.storage().nbytes()) : 0;
}

std::string bytesText(int64_t bytes) {
  return formatBytes(bytes);
}

// aten::lstm / gru / rnn_tanh / rnn_relu on a CUDA profile (Note [cuDNN's RNN in the
// TorchScript front end]); nullopt on the CPU's, where recurrentRule or the meta kernel runs.
std::optional<OpRuleResult> cudnnRnnRule(const KernelRules& kernels, const Arguments& arguments) {
  if (kernels.device == "cpu") return std::nullopt;
  std::string name = arguments.schema.name().substr(std::string("aten::").size());
  int64_t gates = name == "lstm" ? 4 : name == "gru" ? 3 : 1;
  bool packed = arguments.schema.overload_name() == "data";
  at::Tensor data = arguments[packed ? "data" : "input"].toTensor();
  at::ScalarType type = data.scalar_type();
  if (type != at::kHalf && type != at::kFloat && type != at::kDouble) return std::nullopt;
  std::vector<at::Tensor> params = arguments["params"].toTensorVector();
  const c10::IValue& hx_value = arguments["hx"];
  at::Tensor hx = hx_value.isTensor() ? hx_value.toTensor() : hx_value.toTensorList().get(0);
  at::Tensor cx = hx_value.isTensor() ? at::Tensor() : hx_value.toTensorList().get(1);
  if (params.size() < 2 || hx.dim() != 3 || (!packed && data.dim() != 3)) return std::nullopt;
  bool bidirectional = arguments["bidirectional"].toBool();
  bool train = arguments["train"].toBool();
  double dropout = arguments["dropout"].toDouble();
  bool batch_first = !packed && arguments["batch_first"].toBool();
  simgpu::RnnSpaceShape shape;
  shape.gates = gates;
  shape.cell_state = gates > 1;
  shape.hidden = params[0].size(0) / gates;
  shape.output = params[1].size(1);  // the recurrent matrix: the projection's size, if any
  shape.layers = arguments["num_layers"].toInt();
  shape.directions = bidirectional ? 2 : 1;
  if (packed) {  // cuDNN pads to the longest sequence: batch_sizes[0] x len(batch_sizes)
    at::Tensor sizes = arguments["batch_sizes"].toTensor();
    shape.steps = sizes.is_meta() || sizes.numel() == 0
                      ? data.size(0)
                      : sizes.numel() * sizes.select(0, 0).item<int64_t>();
  } else {
    shape.steps = data.size(0) * data.size(1);
  }
  shape.element = static_cast<int64_t>(c10::elementSize(type));
  shape.math = type == at::kHalf ? 4 : shape.element;
  shape.training = train;
  shape.dropout = train && dropout > 0;
  int64_t work = simgpu::rnnWorkSpaceBytes(shape), reserve = simgpu::rnnReserveSpaceBytes(shape);
  // As _cudnn_impl's try_get_weight_buf finds them: end to end in one storage of their size.
  int64_t elements = 0;
  bool flat = true;
  for (const at::Tensor& param : params) {
    flat = flat && param.is_contiguous() && param.storage_offset() == elements &&
           param.storage().is_alias_of(params[0].storage());
    elements += param.numel();
  }
  flat = flat && storageBytes(params[0]) == elements * static_cast<int64_t>(params[0].itemsize());
  OpRuleResult result;
  if (packed || shape.dropout) {
    result.outputs = runAsGiven(arguments);
    int64_t under = 2 * (work + reserve) + (flat ? 0 : elements * shape.element) +
                    storageBytes(data) + (shape.dropout ? kDropoutStateAtMost : 0);
    result.approximate = OpRuleResult::Approximate{
        -1, under,
        std::string("aten::") + name + ": made as PyTorch's decomposition runs it, not as " +
            "cuDNN does (" + (packed ? "a packed sequence" : "dropout in training") +
            "); cuDNN takes a work space of about " + bytesText(work) +
            (reserve ? ", a reserve space of about " + bytesText(reserve) : std::string()) +
            (flat ? std::string() : ", a copy of the weights") +
            (shape.dropout ? ", its dropout state (made once and kept)" : "") + " instead"};
    return result;
  }
  at::Tensor ordered = batch_first ? data.transpose(0, 1) : data;
  at::Tensor x = ordered.contiguous();
  at::Tensor output = at::empty({ordered.size(0), ordered.size(1), shape.output * shape.directions},
                                data.options());
  at::Tensor hy = at::empty(hx.sizes(), hx.options());
  at::Tensor cy = cx.defined() ? at::empty(cx.sizes(), cx.options()) : at::Tensor();
  at::Tensor buffer = flat ? at::Tensor() : at::empty({elements}, params[0].options());
  at::Tensor work_space = at::empty({work}, data.options().dtype(at::kByte));
  at::Tensor reserve_space =
      reserve ? at::empty({reserve}, data.options().dtype(at::kByte)) : at::Tensor();
  work_space.reset();  // RNN.cpp's locals, in reverse order: the work space, then the copy
  x.reset();
  if (batch_first) output = output.transpose(0, 1);
  result.outputs.emplace_back(output);
  result.outputs.emplace_back(hy);
  if (cy.defined()) result.outputs.emplace_back(cy);
  int64_t spread = work + reserve;
  result.approximate = OpRuleResult::Approximate{
      spread, spread,
      std::string("aten::") + name + ": made as cuDNN runs it, with the simulated cuDNN's " +
          "work space (" + bytesText(work) + ")" +
          (reserve ? " and reserve space (" + bytesText(reserve) + ")" : std::string()) +
          (flat ? std::string()
                : " and the weights copied into its buffer (" +
                      bytesText(elements * shape.element) + ", every call)") +
          "; real cuDNN chooses its spaces and documents neither (taken to be at most twice "
          "those)"};
  return result;
}

// aten::gru.input: on the CPU the call as its kernel makes it (recurrentRule), on a CUDA profile
// cuDNN's (cudnnRnnRule).
std::optional<OpRuleResult> gruRule(const KernelRules& kernels, const Arguments& arguments) {
  if (kernels.device != "cpu") return cudnnRnnRule(kernels, arguments);
  return recurrentRule(3, kernels, arguments);
}

// aten::repeat_interleave.self_Tensor with counts the tracer captured: torch.jit.trace records a
// Python number computed from sizes (Mamba-2's `num_heads // num_groups` in transformers'
// nemotron_h and falcon_h1) as a 0-dim tensor on the host, and so the Tensor overload, whose
// composite kernel reads the counts on the host (repeat_interleave.Tensor, which has no meta
// kernel in LibTorch). The program passed a number: the int overload, which PyTorch makes as
// unsqueeze, expand, one contiguous clone and a view (repeat_interleave_symint, Repeat.cpp), run
// here on meta. Counts on the device are the program's data: the rule declines and the op stays
// unknown (a lower bound), as before.
std::optional<OpRuleResult> repeatInterleaveRule(const KernelRules&, const Arguments& arguments) {
  const at::Tensor& self = arguments["self"].toTensor();
  const at::Tensor& repeats = arguments["repeats"].toTensor();
  if (repeats.is_meta() || repeats.numel() != 1 || repeats.dim() > 1 ||
      !at::isIntegralType(repeats.scalar_type(), /*includeBool=*/false)) {
    return std::nullopt;
  }
  const c10::IValue& dim = arguments["dim"];
  const c10::IValue& output_size = arguments["output_size"];
  OpRuleResult result;
  result.outputs.emplace_back(at::repeat_interleave_symint(
      self, c10::SymInt(repeats.item<int64_t>()),
      dim.isNone() ? std::nullopt : std::optional<int64_t>(dim.toInt()),
      output_size.isNone() ? std::nullopt : std::optional<c10::SymInt>(output_size.toSymInt())));
  return result;
}

// LibTorch's meta kernel for index_add and index_reduce (index_func_meta_impl) checks its
// TensorIterator on the slices at index 0 of self and source, so it rejects a source that is
// empty along `dim`, which the CPU and CUDA kernels take and leave self as it was: a
// mixture-of-experts layer whose expert got no rows. For that case the rule makes what the
// kernel makes (out of place, the structured kernel's output: self's sizes, contiguous; in
// place, nothing); otherwise the meta kernel runs.
std::optional<OpRuleResult> indexAccumulateRule(const KernelRules&, const Arguments& arguments) {
  const at::Tensor& self = arguments["self"].toTensor();
  const at::Tensor& source = arguments["source"].toTensor();
  int64_t dim = at::maybe_wrap_dim(arguments["dim"].toInt(), self.dim());
  bool in_place = !arguments.schema.name().empty() && arguments.schema.name().back() == '_';
  OpRuleResult result;
  if (source.dim() > 0 && dim < source.dim() && source.size(dim) == 0) {
    result.outputs.emplace_back(in_place ? self : at::empty(self.sizes(), self.options()));
    return result;
  }
  result.outputs = runAsGiven(arguments);
  return result;
}

// c10's is_channels_last_strides_2d_s4 / 3d_s5 (c10/core/MemoryFormat.h), which
// suggest_memory_format() reads: C innermost, then W, H (D), N; ambiguous layouts (a size-1
// or zero-stride channel dimension) read as contiguous. The same test as the recording's
// _strides_like_channels_last (python/mem_tracer/estimator/device_kernels.py).
bool stridesLikeChannelsLast(const at::Tensor& tensor) {
  static const std::vector<int64_t> kOrder4 = {1, 3, 2, 0};
  static const std::vector<int64_t> kOrder5 = {1, 4, 3, 2, 0};
  if (tensor.dim() != 4 && tensor.dim() != 5) return false;
  const std::vector<int64_t>& order = tensor.dim() == 4 ? kOrder4 : kOrder5;
  at::IntArrayRef sizes = tensor.sizes();
  at::IntArrayRef strides = tensor.strides();
  if (strides[1] == 0) return false;
  int64_t minimum = 0;
  for (int64_t dim : order) {
    if (sizes[dim] == 0 || strides[dim] < minimum) return false;
    if (dim == 0 && minimum == strides[1]) return false;
    minimum = strides[dim] * std::max<int64_t>(1, sizes[dim]);
  }
  return true;
}

// A convolution's output size (ConvUtils.h: conv_output_size, conv_input_size for a transposed
// one): meta tensors have no convolution kernel in LibTorch (the backend is chosen by device),
// so the rule sizes it. Nothing for what it does not know (a padding given as a string).
std::optional<std::vector<int64_t>> convolutionOutputSize(const at::Tensor& input,
                                                          const at::Tensor& weight,
                                                          const Arguments& arguments) {
  const std::string& name = arguments.schema.name();
  bool transposed = name.find("transpose") != std::string::npos;
  if (name == "aten::_convolution") transposed = arguments["transposed"].toBool();
  if (!arguments["padding"].isIntList()) return std::nullopt;
  int64_t spatial = input.dim() - 2;
  auto list = [&](const char* argument, int64_t fallback) {
    std::vector<int64_t> values(spatial, fallback);
    std::optional<int> index = arguments.schema.argumentIndexWithName(argument);
    if (!index || static_cast<size_t>(*index) >= arguments.values.size()) return values;
    std::vector<int64_t> given = arguments.values[*index].toIntVector();
    for (int64_t dim = 0; dim < spatial && !given.empty(); ++dim) {
      values[dim] = given[given.size() == 1 ? 0 : dim];
    }
    return values;
  };
  std::vector<int64_t> stride = list("stride", 1), padding = list("padding", 0),
                       dilation = list("dilation", 1), output_padding = list("output_padding", 0);
  int64_t groups = arguments["groups"].toInt();
  std::vector<int64_t> size = {input.size(0),
                               transposed ? weight.size(1) * groups : weight.size(0)};
  for (int64_t dim = 0; dim < spatial; ++dim) {
    int64_t extent = dilation[dim] * (weight.size(dim + 2) - 1);
    size.push_back(transposed
                       ? (input.size(dim + 2) - 1) * stride[dim] - 2 * padding[dim] + extent +
                             output_padding[dim] + 1
                       : (input.size(dim + 2) + 2 * padding[dim] - extent - 1) / stride[dim] + 1);
  }
  return size;
}

// A convolution on CUDA with the copies PyTorch makes of its operands for cuDNN (Note [The
// device's kernels on fake tensors] in python/mem_tracer/estimator/device_kernels.py, where
// the facts and what confirmed them are; the recording makes the same): `_convolution` passes
// `input.contiguous(format)`, cuDNN's forward makes `weight.contiguous(format)` after the
// output, both released when the call returns; the format is channels-last when the weight is
// 4-d (5-d: channels-last 3d) and either operand has channels-last strides, never in float64,
// else contiguous. Other devices: the op as it is (the rule declines).
std::optional<OpRuleResult> convolutionRule(const KernelRules& kernels,
                                            const Arguments& arguments) {
  if (kernels.device != "cuda") return std::nullopt;
  const at::Tensor& input = arguments["input"].toTensor();
  const at::Tensor& weight = arguments["weight"].toTensor();
  if (input.numel() == 0 || (input.dim() != weight.dim() && input.dim() != weight.dim() - 1)) {
    return std::nullopt;
  }
  at::Tensor batched = input.dim() == weight.dim() ? input : input.unsqueeze(0);
  at::MemoryFormat format = at::MemoryFormat::Contiguous;
  bool float64 = batched.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble;
  if (!float64 && (stridesLikeChannelsLast(batched) || stridesLikeChannelsLast(weight))) {
    if (weight.dim() == 4) format = at::MemoryFormat::ChannelsLast;
    if (weight.dim() == 5) format = at::MemoryFormat::ChannelsLast3d;
  }
  std::optional<std::vector<int64_t>> size = convolutionOutputSize(batched, weight, arguments);
  if (!size) return std::nullopt;
  at::Tensor staged;
  if (!batched.is_contiguous(format)) staged = batched.contiguous(format);
  // Contiguous, as the shape function that sizes a convolution without the rule makes it.
  at::Tensor output = at::empty(*size, batched.options());
  if (!weight.is_contiguous(format)) {
    at::Tensor copy = weight.contiguous(format);  // cuDNN's, released on return
  }
  staged.reset();
  OpRuleResult result;
  result.outputs.emplace_back(input.dim() == weight.dim() ? output : output.squeeze(0));
  return result;
}

// CUDA's layer norm (layer_norm_cuda, aten/src/ATen/native/cuda/layer_norm_kernel.cu):
// at::layer_norm hands its arguments to native_layer_norm, which allocates the output, then a
// per-row mean and rstd in the input's accumulate type (float for half and bfloat16); layer_norm
// returns the output and drops the two. LibTorch has no meta kernel for it (its composite calls
// native_batch_norm), and PyTorch's shape function sizes the output only. The copy the kernel
// takes of an input that is not contiguous is the profile's (kernels.temporaries, added by
// GraphBuilder::addKernelTemporaries). Other devices: the rule declines (the shape function).
std::optional<OpRuleResult> layerNormRule(const KernelRules& kernels, const Arguments& arguments) {
  if (kernels.device != "cuda") return std::nullopt;
  const at::Tensor& input = arguments["input"].toTensor();
  std::vector<int64_t> normalized = arguments["normalized_shape"].toIntVector();
  if (normalized.empty() || normalized.size() > static_cast<size_t>(input.dim())) {
    return std::nullopt;
  }
  size_t axis = static_cast<size_t>(input.dim()) - normalized.size();
  int64_t rows = 1;
  for (size_t dim = 0; dim < axis; ++dim) rows *= input.size(static_cast<int64_t>(dim));
  OpRuleResult result;
  result.outputs.emplace_back(at::empty(input.sizes(), input.options()));
  at::ScalarType statistics = at::toAccumulateType(input.scalar_type(), /*is_cuda=*/true);
  at::Tensor mean = at::empty({rows}, input.options().dtype(statistics));
  at::Tensor rstd = at::empty({rows}, input.options().dtype(statistics));
  return result;
}

using Rule = std::function<std::optional<OpRuleResult>(const KernelRules&, const Arguments&)>;

// The table (Note [Op rules]). Meta kernels registered in the dispatcher are listed by
// registerMetaKernels above; these are the rules that depend on the device profile.
const std::vector<std::pair<std::string, Rule>>& ruleTable() {
  static const std::vector<std::pair<std::string, Rule>> kTable = {
      {"aten::scaled_dot_product_attention", sdpaRule},
      {"aten::_native_multi_head_attention", nativeMultiHeadAttentionRule},
      {"aten::_transformer_encoder_layer_fwd", encoderLayerRule},
      {"aten::gru.input", gruRule},
      {"aten::gru.data", cudnnRnnRule},
      {"aten::lstm.input", cudnnRnnRule},
      {"aten::lstm.data", cudnnRnnRule},
      {"aten::rnn_tanh.input", cudnnRnnRule},
      {"aten::rnn_tanh.data", cudnnRnnRule},
      {"aten::rnn_relu.input", cudnnRnnRule},
      {"aten::rnn_relu.data", cudnnRnnRule},
      {"aten::index_add", indexAccumulateRule},
      {"aten::index_add_", indexAccumulateRule},
      {"aten::index_reduce", indexAccumulateRule},
      {"aten::index_reduce_", indexAccumulateRule},
      {"aten::repeat_interleave.self_Tensor", repeatInterleaveRule},
      {"aten::layer_norm", layerNormRule},
      {"aten::_convolution", convolutionRule},
      {"aten::conv1d", convolutionRule},
      {"aten::conv2d", convolutionRule},
      {"aten::conv3d", convolutionRule},
      {"aten::conv1d.padding", convolutionRule},
      {"aten::conv2d.padding", convolutionRule},
      {"aten::conv3d.padding", convolutionRule},
      {"aten::conv_transpose1d", convolutionRule},
      {"aten::conv_transpose2d.input", convolutionRule},
      {"aten::conv_transpose3d.input", convolutionRule},
  };
  return kTable;
}

// Entries name an overload where the op has several (`aten::gru.input`, not `.data`, the
// packed sequence); a bare name takes only the overload without a name (not the .out variants,
// which write given tensors).
const Rule* findRule(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  for (const auto& [entry, rule] : ruleTable()) {
    if (name == entry) return &rule;
  }
  return nullptr;
}

}  // namespace

OpRules::OpRules() {
  registerMetaKernels();
}

bool OpRules::handles(const c10::FunctionSchema& schema) {
  return findRule(schema) != nullptr;
}

std::optional<OpRuleResult> OpRules::run(const c10::FunctionSchema& schema,
                                         const std::vector<c10::IValue>& inputs) const {
  const Rule* rule = findRule(schema);
  if (!rule) return std::nullopt;
  return (*rule)(kernels_, Arguments{schema, inputs});
}

}  // namespace memtrace::estimator::torchscript
