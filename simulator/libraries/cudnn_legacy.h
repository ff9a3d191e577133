// cuDNN's legacy (non-graph) descriptors as the simulated cuDNN keeps them: what the program
// set, where a later call reads it back (a tensor descriptor cudnnGetRNNWeightParams fills and
// PyTorch reads with cudnnGetTensorNdDescriptor). cudnn.cpp makes them; cudnn_rnn.cpp fills
// and reads them.
#pragma once

#include <vector>

namespace simgpu::cudnn {

struct LegacyDescriptor {
  int kind = 0;
  // A tensor descriptor's (cudnnSetTensorNdDescriptor): cudnnDataType_t, dims, strides.
  int data_type = 0;
  std::vector<int> dims;
  std::vector<int> strides;
};

}  // namespace simgpu::cudnn
