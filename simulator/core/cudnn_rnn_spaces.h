// The simulated cuDNN's RNN work and reserve spaces (Note [RNN spaces] in
// simulator/libraries/cudnn_rnn.cpp), in one place for the two that need them: the simulated
// cuDNN's cudnnGetRNNTempSpaceSizes, and memtrace-estimate's TorchScript front end, which makes
// an RNN call on a CUDA profile as cuDNN's _cudnn_rnn makes it (Note [cuDNN's RNN in the
// TorchScript front end] in estimator/torchscript/op_rules.cpp). Header only: the estimator
// does not link the simulator. The recording's copy (python/mem_tracer/estimator/
// device_kernels.py, cudnn_rnn_spaces) is held to this one by
// tests/estimator/test_rnn_weights.py.
#pragma once

#include <stdint.h>

namespace simgpu {

struct RnnSpaceShape {
  int64_t gates = 1;        // 4 for an LSTM, 3 for a GRU, 1 for a plain RNN
  bool cell_state = false;  // an LSTM's cell state or a GRU's reset-gated term a step
  int64_t hidden = 0;
  int64_t output = 0;  // what a layer outputs a step, per direction (the projection's size)
  int64_t layers = 1;
  int64_t directions = 1;
  int64_t steps = 0;      // (time step, sequence) pairs: max sequence x batch
  int64_t element = 4;    // bytes of the data type
  int64_t math = 4;       // bytes of the math precision
  bool training = false;  // a reserve space only in training
  bool dropout = false;   // dropout between layers (in training)
};

// One layer's input projections for the whole sequence in the math precision, and two buffers
// of a layer's output between layers.
inline int64_t rnnWorkSpaceBytes(const RnnSpaceShape& rnn) {
  int64_t between = rnn.layers > 1 ? 2 * rnn.steps * rnn.output * rnn.directions * rnn.element : 0;
  return rnn.steps * rnn.gates * rnn.hidden * rnn.directions * rnn.math + between;
}

// What each step keeps for the backward: the gates' activations, the cell state and the output,
// a byte a dropped element between layers; nothing in inference.
inline int64_t rnnReserveSpaceBytes(const RnnSpaceShape& rnn) {
  if (!rnn.training) return 0;
  int64_t per_step = rnn.gates * rnn.hidden + (rnn.cell_state ? rnn.hidden : 0) + rnn.output;
  int64_t bytes = rnn.layers * rnn.directions * rnn.steps * per_step * rnn.element;
  if (rnn.dropout && rnn.layers > 1)
    bytes += (rnn.layers - 1) * rnn.steps * rnn.output * rnn.directions;
  return bytes;
}

}  // namespace simgpu
