// The simulated cuDNN's RNN API (cudnn_adv.h, the v8 API PyTorch's nn.LSTM, nn.GRU and nn.RNN
// use from cuDNN 8.9.7 on: aten/src/ATen/native/cudnn/RNN.cpp): the RNN, RNN data and dropout
// descriptors as the program sets them, the weight space and where each matrix and bias lies in
// it, and the work, reserve and dropout-state sizes (Note [RNN spaces]). The forward and
// backward calls only compute: the generated stubs do nothing and succeed.
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "simulator/core/cudnn_rnn_spaces.h"
#include "simulator/core/sizes.h"
#include "simulator/libraries/cudnn_backend.h"
#include "simulator/libraries/cudnn_legacy.h"
#include "simulator/libraries/library.h"

using namespace simgpu;
using simgpu::cudnn::LegacyDescriptor;

// Note [RNN spaces]
// cuDNN's RNN API hands the program four sizes, which PyTorch allocates through its caching
// allocator (RNN.cpp): the weight space (nn.LSTM's flat weights, for the model's life), the
// work space (for the length of one call), the reserve space (made by the training forward,
// saved by autograd until the backward) and the dropout state (made once per device when an
// RNN has dropout, kept for the process).
//  - The weight space is exact: cudnnGetRNNWeightParams documents its layout, every matrix and
//    bias vector of every pseudo-layer (a layer's direction: layer * 2 + direction when
//    bidirectional), one after the other, and PyTorch checks it (get_parameters asserts that
//    each gate's matrix starts where the previous one ended). Per pseudo-layer, in that order:
//    the input matrices (one per gate: hidden x input, where a layer's input is the input size
//    for the first layer and the output size times the directions for the others; none for
//    the first layer under CUDNN_SKIP_INPUT), the recurrent matrices (hidden x output), the
//    LSTM's projection (output x hidden, when projSize < hiddenSize), then the biases the bias
//    mode names (hidden each: input biases, recurrent biases). Gates: 4 for an LSTM, 3 for a
//    GRU, 1 for a plain RNN; the output size is projSize. Elements are the data type's.
//  - The work and reserve spaces are the library's choice on the card (its algorithm, tiles
//    and persistent kernels), documented nowhere: estimated, from what a step keeps. The
//    reserve space holds, for each pseudo-layer and time step of each sequence, what the
//    backward reads: the gates' activations (gates x hidden), the LSTM's cell state or the
//    GRU's reset-gated recurrent term (hidden) and the layer's output (output size), in the
//    data type, plus a byte a dropped element between layers (the mask) when dropout is on.
//    The work space holds one layer's input projections for the whole sequence (gates x hidden
//    a step, both directions, in the math precision) and two buffers of a layer's output for
//    the layers between (output size times directions a step, in the data type). Both are
//    said to be at most twice the estimate; that bound is an estimate too.
//  - The dropout state is cuRAND's Philox generators, one state (64 bytes) per thread the card
//    can hold (multiprocessors x threads per multiprocessor): estimated, at most twice.
// Every estimate goes through the one policy of Note [Sizes nobody measured]: said, recorded,
// and replaced by the device profile's measured entry where it has one.

namespace {
enum : int { kSuccess = 0, kBadParam = 2000, kNotSupported = 3000 };

// cudnnRNNMode_t, cudnnRNNBiasMode_t, cudnnDirectionMode_t, cudnnRNNInputMode_t,
// cudnnForwardMode_t and cudnnRNNDataLayout_t (cudnn_adv.h).
enum : int { kRelu = 0, kTanh = 1, kLstm = 2, kGru = 3 };
enum : int { kNoBias = 0, kSingleInputBias = 1, kDoubleBias = 2, kSingleRecurrentBias = 3 };
enum : int { kUnidirectional = 0, kBidirectional = 1 };
enum : int { kLinearInput = 0, kSkipInput = 1 };
enum : int { kInference = 0, kTraining = 1 };
enum : int { kSeqMajorUnpacked = 0, kSeqMajorPacked = 1, kBatchMajorUnpacked = 2 };

struct Dropout {
  float probability = 0;
  void* states = nullptr;
  size_t state_bytes = 0;
};

struct Rnn {
  int algo = 0, cell = kLstm, bias = kDoubleBias, direction = kUnidirectional;
  int input_mode = kLinearInput, data_type = 0, math_precision = 0, math_type = 0;
  int input_size = 0, hidden_size = 0, proj_size = 0, layers = 0;
  Dropout* dropout = nullptr;
  uint32_t aux_flags = 0;

  int gates() const { return cell == kLstm ? 4 : cell == kGru ? 3 : 1; }
  int directions() const { return direction == kBidirectional ? 2 : 1; }
  // What a layer outputs a step, per direction: the projection's size where there is one.
  int64_t outputSize() const { return proj_size > 0 ? proj_size : hidden_size; }
  bool projected() const { return cell == kLstm && proj_size > 0 && proj_size < hidden_size; }
  bool inputBias() const { return bias == kDoubleBias || bias == kSingleInputBias; }
  bool recurrentBias() const { return bias == kDoubleBias || bias == kSingleRecurrentBias; }
};

struct RnnData {
  int data_type = 0, layout = kSeqMajorUnpacked;
  int max_sequence = 0, batch = 0, vector_size = 0;
  std::vector<int> lengths;
};

int64_t elementBytes(int data_type) {
  switch (data_type) {
    case 0:  // FLOAT
    case 4:  // INT32
      return 4;
    case 1:   // DOUBLE
    case 10:  // INT64
      return 8;
    case 2:  // HALF
    case 9:  // BFLOAT16
      return 2;
    default:
      return 1;
  }
}

// One matrix or bias vector of a pseudo-layer: its place (elements from the weight space's
// start) and its shape, rows x columns (a bias: rows x 1).
struct Piece {
  int64_t offset = -1;  // -1: not there
  int rows = 0;
  int columns = 0;
};

// The elements of one pseudo-layer and, for `wanted` (a linLayerID), where its matrix and bias
// start within it (Note [RNN spaces]).
int64_t pseudoLayer(const Rnn& rnn, int pseudo, int wanted, Piece* matrix, Piece* bias) {
  int layer = pseudo / rnn.directions();
  int gates = rnn.gates();
  int64_t hidden = rnn.hidden_size, output = rnn.outputSize();
  int64_t input = layer == 0 ? rnn.input_size : output * rnn.directions();
  bool input_matrices = !(layer == 0 && rnn.input_mode == kSkipInput);
  int64_t at = 0;
  for (int gate = 0; gate < gates; ++gate) {  // input matrices: linLayerID 0 .. gates - 1
    if (!input_matrices) break;
    if (gate == wanted) *matrix = Piece{at, static_cast<int>(hidden), static_cast<int>(input)};
    at += hidden * input;
  }
  for (int gate = 0; gate < gates; ++gate) {  // recurrent matrices: gates .. 2 gates - 1
    if (gates + gate == wanted)
      *matrix = Piece{at, static_cast<int>(hidden), static_cast<int>(output)};
    at += hidden * output;
  }
  if (rnn.projected()) {  // the LSTM's recurrent projection: linLayerID 8
    if (wanted == 2 * gates)
      *matrix = Piece{at, static_cast<int>(output), static_cast<int>(hidden)};
    at += output * hidden;
  }
  for (int gate = 0; gate < gates; ++gate) {
    if (!rnn.inputBias() || !input_matrices) break;
    if (gate == wanted) *bias = Piece{at, static_cast<int>(hidden), 1};
    at += hidden;
  }
  for (int gate = 0; gate < gates; ++gate) {
    if (!rnn.recurrentBias()) break;
    if (gates + gate == wanted) *bias = Piece{at, static_cast<int>(hidden), 1};
    at += hidden;
  }
  return at;
}

int64_t weightElements(const Rnn& rnn) {
  int64_t total = 0;
  Piece unused_matrix, unused_bias;
  for (int pseudo = 0; pseudo < rnn.layers * rnn.directions(); ++pseudo)
    total += pseudoLayer(rnn, pseudo, -1, &unused_matrix, &unused_bias);
  return total;
}

const char* cellName(int cell) {
  return cell == kLstm ? "lstm" : cell == kGru ? "gru" : cell == kRelu ? "rnn_relu" : "rnn_tanh";
}

// The shapes an RNN's sizes depend on, for the question (and a measured entry's match).
std::string rnnShapes(const Rnn& rnn, const RnnData* x, int mode) {
  std::string out =
      "{\"cell\":\"" + std::string(cellName(rnn.cell)) +
      "\",\"data_type\":" + jsonString(cudnn::dataTypeName(rnn.data_type)) +
      ",\"math_precision\":" + jsonString(cudnn::dataTypeName(rnn.math_precision)) +
      ",\"input_size\":" + std::to_string(rnn.input_size) +
      ",\"hidden_size\":" + std::to_string(rnn.hidden_size) +
      ",\"proj_size\":" + std::to_string(rnn.proj_size) +
      ",\"layers\":" + std::to_string(rnn.layers) +
      ",\"bidirectional\":" + (rnn.directions() == 2 ? "true" : "false") +
      ",\"algo\":" + std::to_string(rnn.algo) + ",\"bias\":" + std::to_string(rnn.bias) +
      ",\"math_type\":" + std::to_string(rnn.math_type) +
      ",\"dropout\":" + (rnn.dropout && rnn.dropout->probability > 0 ? "true" : "false");
  if (x) {
    out += ",\"max_sequence\":" + std::to_string(x->max_sequence) +
           ",\"batch\":" + std::to_string(x->batch) +
           ",\"packed\":" + (x->layout == kSeqMajorPacked ? "true" : "false") + ",\"mode\":\"" +
           (mode == kTraining ? "training" : "inference") + "\"";
  }
  return out + "}";
}

}  // namespace

SIMGPU_API int cudnnCreateRNNDescriptor(void** out) {
  if (!out) return kBadParam;
  *out = new Rnn;
  return kSuccess;
}
SIMGPU_API int cudnnDestroyRNNDescriptor(void* descriptor) {
  delete static_cast<Rnn*>(descriptor);
  return kSuccess;
}
SIMGPU_API int cudnnCreateRNNDataDescriptor(void** out) {
  if (!out) return kBadParam;
  *out = new RnnData;
  return kSuccess;
}
SIMGPU_API int cudnnDestroyRNNDataDescriptor(void* descriptor) {
  delete static_cast<RnnData*>(descriptor);
  return kSuccess;
}
SIMGPU_API int cudnnCreateDropoutDescriptor(void** out) {
  if (!out) return kBadParam;
  *out = new Dropout;
  return kSuccess;
}
SIMGPU_API int cudnnDestroyDropoutDescriptor(void* descriptor) {
  delete static_cast<Dropout*>(descriptor);
  return kSuccess;
}

SIMGPU_API int cudnnSetRNNDescriptor_v8(void* descriptor, int algo, int cell, int bias,
                                        int direction, int input_mode, int data_type,
                                        int math_precision, int math_type, int32_t input_size,
                                        int32_t hidden_size, int32_t proj_size, int32_t layers,
                                        void* dropout, uint32_t aux_flags) {
  if (!descriptor || cell < kRelu || cell > kGru || bias < kNoBias || bias > kSingleRecurrentBias ||
      input_size <= 0 || hidden_size <= 0 || layers <= 0 || proj_size < 0 ||
      proj_size > hidden_size || (proj_size != hidden_size && cell != kLstm))
    return kBadParam;
  auto* rnn = static_cast<Rnn*>(descriptor);
  *rnn = Rnn{algo,
             cell,
             bias,
             direction,
             input_mode,
             data_type,
             math_precision,
             math_type,
             input_size,
             hidden_size,
             proj_size,
             layers,
             static_cast<Dropout*>(dropout),
             aux_flags};
  return kSuccess;
}

SIMGPU_API int cudnnGetRNNDescriptor_v8(void* descriptor, int* algo, int* cell, int* bias,
                                        int* direction, int* input_mode, int* data_type,
                                        int* math_precision, int* math_type, int32_t* input_size,
                                        int32_t* hidden_size, int32_t* proj_size, int32_t* layers,
                                        void** dropout, uint32_t* aux_flags) {
  if (!descriptor) return kBadParam;
  const auto& rnn = *static_cast<const Rnn*>(descriptor);
  if (algo) *algo = rnn.algo;
  if (cell) *cell = rnn.cell;
  if (bias) *bias = rnn.bias;
  if (direction) *direction = rnn.direction;
  if (input_mode) *input_mode = rnn.input_mode;
  if (data_type) *data_type = rnn.data_type;
  if (math_precision) *math_precision = rnn.math_precision;
  if (math_type) *math_type = rnn.math_type;
  if (input_size) *input_size = rnn.input_size;
  if (hidden_size) *hidden_size = rnn.hidden_size;
  if (proj_size) *proj_size = rnn.proj_size;
  if (layers) *layers = rnn.layers;
  if (dropout) *dropout = rnn.dropout;
  if (aux_flags) *aux_flags = rnn.aux_flags;
  return kSuccess;
}

SIMGPU_API int cudnnSetRNNDataDescriptor(void* descriptor, int data_type, int layout,
                                         int max_sequence, int batch, int vector_size,
                                         const int* lengths, void*) {
  if (!descriptor || max_sequence <= 0 || batch <= 0 || vector_size <= 0 || !lengths)
    return kBadParam;
  auto* data = static_cast<RnnData*>(descriptor);
  data->data_type = data_type;
  data->layout = layout;
  data->max_sequence = max_sequence;
  data->batch = batch;
  data->vector_size = vector_size;
  data->lengths.assign(lengths, lengths + batch);
  return kSuccess;
}

SIMGPU_API int cudnnGetRNNWeightSpaceSize(void* handle, void* descriptor, size_t* bytes) {
  if (!handle || !descriptor || !bytes) return kBadParam;
  const auto& rnn = *static_cast<const Rnn*>(descriptor);
  *bytes = static_cast<size_t>(weightElements(rnn) * elementBytes(rnn.data_type));
  return kSuccess;
}

SIMGPU_API int cudnnGetRNNWeightParams(void* handle, void* descriptor, int32_t pseudo,
                                       size_t weight_bytes, const void* weights, int32_t id,
                                       void* matrix_descriptor, void** matrix_address,
                                       void* bias_descriptor, void** bias_address) {
  if (!handle || !descriptor) return kBadParam;
  const auto& rnn = *static_cast<const Rnn*>(descriptor);
  if (pseudo < 0 || pseudo >= rnn.layers * rnn.directions()) return kBadParam;
  int largest = rnn.projected() ? 2 * rnn.gates() : 2 * rnn.gates() - 1;
  if (id < 0 || id > largest) return kBadParam;
  int64_t element = elementBytes(rnn.data_type);
  if (weight_bytes < static_cast<size_t>(weightElements(rnn) * element)) return kBadParam;
  int64_t start = 0;
  Piece unused_matrix, unused_bias;
  for (int before = 0; before < pseudo; ++before)
    start += pseudoLayer(rnn, before, -1, &unused_matrix, &unused_bias);
  Piece matrix, bias;
  pseudoLayer(rnn, pseudo, id, &matrix, &bias);
  // A piece that is not there (a bias under CUDNN_RNN_NO_BIAS, the projection's bias, the
  // first layer's input matrices under CUDNN_SKIP_INPUT) is a null address and no dims.
  auto fill = [&](const Piece& piece, void* tensor, void** address) {
    if (address)
      *address = piece.offset < 0 ? nullptr
                                  : static_cast<char*>(const_cast<void*>(weights)) +
                                        (start + piece.offset) * element;
    if (!tensor) return;
    auto* out = static_cast<LegacyDescriptor*>(tensor);
    out->data_type = rnn.data_type;
    if (piece.offset < 0) {
      out->dims.clear();
      out->strides.clear();
      return;
    }
    // Three dims, as cuDNN gives them: 1 x rows x columns, packed.
    out->dims = {1, piece.rows, piece.columns};
    out->strides = {piece.rows * piece.columns, piece.columns, 1};
  };
  if (matrix_descriptor || matrix_address) fill(matrix, matrix_descriptor, matrix_address);
  if (bias_descriptor || bias_address) fill(bias, bias_descriptor, bias_address);
  return kSuccess;
}

SIMGPU_API int cudnnGetRNNTempSpaceSizes(void* handle, void* descriptor, int mode, void* x,
                                         size_t* work_bytes, size_t* reserve_bytes) {
  if (!handle || !descriptor || !x || (mode != kInference && mode != kTraining)) return kBadParam;
  const auto& rnn = *static_cast<const Rnn*>(descriptor);
  const auto& data = *static_cast<const RnnData*>(x);
  RnnSpaceShape shape;
  shape.gates = rnn.gates();
  shape.cell_state = rnn.cell == kLstm || rnn.cell == kGru;
  shape.hidden = rnn.hidden_size;
  shape.output = rnn.outputSize();
  shape.layers = rnn.layers;
  shape.directions = rnn.directions();
  shape.steps = int64_t{data.max_sequence} * data.batch;  // every (time, sequence) pair
  shape.element = elementBytes(rnn.data_type);
  shape.math = elementBytes(rnn.math_precision);
  shape.training = mode == kTraining;
  shape.dropout = rnn.dropout && rnn.dropout->probability > 0;
  std::string shapes = rnnShapes(rnn, &data, mode);
  if (work_bytes) {
    SizeAnswer answer;
    answer.bytes = static_cast<uint64_t>(rnnWorkSpaceBytes(shape));
    answer.at_most = 2 * answer.bytes;
    answer.how = "one layer's input projections and two layer outputs (Note [RNN spaces])";
    SizeQuestion question{"cuDNN", "cudnnGetRNNTempSpaceSizes (work space)", shapes};
    if (!answerSize(question, &answer))
      return refuse("cuDNN", "cudnnGetRNNTempSpaceSizes", kNotSupported, kUnknownSizeRefused);
    *work_bytes = answer.bytes;
  }
  if (reserve_bytes) {
    uint64_t bytes = 0;
    if (mode == kTraining) {
      bytes = static_cast<uint64_t>(rnnReserveSpaceBytes(shape));
      SizeAnswer answer;
      answer.bytes = bytes;
      answer.at_most = 2 * bytes;
      answer.how = "what each step keeps for the backward (Note [RNN spaces])";
      SizeQuestion question{"cuDNN", "cudnnGetRNNTempSpaceSizes (reserve space)", shapes};
      if (!answerSize(question, &answer))
        return refuse("cuDNN", "cudnnGetRNNTempSpaceSizes", kNotSupported, kUnknownSizeRefused);
      bytes = answer.bytes;
    }
    *reserve_bytes = bytes;  // inference keeps nothing for a backward
  }
  return kSuccess;
}

SIMGPU_API int cudnnDropoutGetStatesSize(void* handle, size_t* bytes) {
  if (!handle || !bytes) return kBadParam;
  const Profile* card = profile();
  SizeAnswer answer;
  answer.bytes = card ? uint64_t{64} * static_cast<uint64_t>(card->multiprocessors) *
                            static_cast<uint64_t>(card->max_threads_per_multiprocessor)
                      : 0;
  answer.at_most = 2 * answer.bytes;
  answer.how = "one 64-byte Philox state per thread the card holds (Note [RNN spaces])";
  SizeQuestion question{"cuDNN", "cudnnDropoutGetStatesSize", "{}"};
  if (!answerSize(question, &answer))
    return refuse("cuDNN", "cudnnDropoutGetStatesSize", kNotSupported, kUnknownSizeRefused);
  *bytes = answer.bytes;
  return kSuccess;
}

SIMGPU_API int cudnnSetDropoutDescriptor(void* descriptor, void* handle, float probability,
                                         void* states, size_t state_bytes, unsigned long long) {
  if (!descriptor || !handle) return kBadParam;
  *static_cast<Dropout*>(descriptor) = Dropout{probability, states, state_bytes};
  return kSuccess;
}
SIMGPU_API int cudnnRestoreDropoutDescriptor(void* descriptor, void* handle, float probability,
                                             void* states, size_t state_bytes, unsigned long long) {
  if (!descriptor || !handle) return kBadParam;
  *static_cast<Dropout*>(descriptor) = Dropout{probability, states, state_bytes};
  return kSuccess;
}
SIMGPU_API int cudnnGetDropoutDescriptor(void* descriptor, void* handle, float* probability,
                                         void** states, unsigned long long* seed) {
  if (!descriptor || !handle) return kBadParam;
  const auto& dropout = *static_cast<const Dropout*>(descriptor);
  if (probability) *probability = dropout.probability;
  if (states) *states = dropout.states;
  if (seed) *seed = 0;
  return kSuccess;
}
