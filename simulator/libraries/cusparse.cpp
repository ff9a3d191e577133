// The simulated cuSPARSE (libcusparse.so.12): the generic API's descriptors (sparse and dense
// matrices and vectors as the program describes them), the legacy API's option objects, and the
// buffer sizes of the routines PyTorch's sparse ops call (aten/src/ATen/native/sparse/cuda/:
// SpMM, SpMV, SDDMM, the triangular solves, sorting, csrgeam2) (Note [cuSPARSE's buffers]). The
// routines only compute: the generated stubs do nothing and succeed.
#include <stdint.h>

#include <algorithm>
#include <string>

#include "simulator/core/sizes.h"
#include "simulator/libraries/library.h"

using namespace simgpu;

// Note [cuSPARSE's buffers]
// cuSPARSE's routines ask for an external buffer whose size their algorithm chooses on the card,
// documented nowhere as a formula, so the simulated cuSPARSE answers estimates (Note [Sizes
// nobody measured] in simulator/core/sizes.cpp), from what each algorithm must keep beside its
// operands:
//   SpMM, SpMV, SDDMM (default algorithms)   none; at most the sparse matrix's own size
//   SpSV, SpSM (their analysis)              the sparse matrix's size; at most twice
//   csrsort, coosort                         a permutation: nnz 32-bit indices; at most twice
//   csrgeam2                                 none; at most both inputs' nnz 32-bit indices
//   bsrsv2, bsrsm2                           the block matrix's values; at most twice
// A sparse matrix's size here is its indices and values: nnz values, nnz column (and, for COO,
// row) indices and rows + 1 offsets (CSR). The product of two sparse matrices (SpGEMM) is sized
// by where the nonzeros are, which are device values (zeros here): it stays refused.

namespace {

enum : int { kSuccess = 0, kInvalidValue = 3, kNotSupported = 10 };

// cusparseFormat_t: CSR 1, CSC 2, COO 3; cusparseIndexType_t: 16U 1, 32I 2, 64I 3.
enum : int { kCsr = 1, kCoo = 3 };

struct SparseMatrix {
  int format = kCsr;
  int64_t rows = 0, cols = 0, nnz = 0;
  int offset_type = 2, index_type = 2, value_type = 0;
  int batch = 1;
};

struct DenseMatrix {
  int64_t rows = 0, cols = 0, ld = 0;
  int value_type = 0;
  int batch = 1;
};

struct DenseVector {
  int64_t size = 0;
  int value_type = 0;
};

struct Opaque {  // a legacy matrix descriptor, an analysis info, an SpSV/SpSM descriptor
  int value = 0;
};

uint64_t indexBytes(int type) {
  return type == 3 ? 8 : type == 1 ? 2 : 4;
}

// cudaDataType: R_32F 0, R_64F 1, R_16F 2, C_32F 4, C_64F 5, C_16F 6, R_16BF 14, C_16BF 15.
uint64_t valueBytes(int type) {
  switch (type) {
    case 1:
    case 4:
      return 8;
    case 5:
      return 16;
    case 2:
    case 14:
      return 2;
    case 6:
    case 15:
      return 4;
    default:
      return 4;
  }
}

uint64_t matrixBytes(const SparseMatrix& a) {
  uint64_t nnz = static_cast<uint64_t>(std::max<int64_t>(a.nnz, 0));
  uint64_t indices = nnz * indexBytes(a.index_type) * (a.format == kCoo ? 2 : 1);
  uint64_t offsets =
      a.format == kCsr ? static_cast<uint64_t>(a.rows + 1) * indexBytes(a.offset_type) : 0;
  return (nnz * valueBytes(a.value_type) + indices + offsets) *
         static_cast<uint64_t>(std::max(a.batch, 1));
}

std::string sparseShapes(const SparseMatrix& a) {
  return "{\"format\":\"" + std::string(a.format == kCoo ? "coo" : "csr") +
         "\",\"rows\":" + std::to_string(a.rows) + ",\"cols\":" + std::to_string(a.cols) +
         ",\"nnz\":" + std::to_string(a.nnz) + ",\"value_type\":" + std::to_string(a.value_type) +
         ",\"batch\":" + std::to_string(a.batch) + "}";
}

// Answers `call` with `bytes` (at most `at_most`); false under MEMTRACE_GPU_UNKNOWN_SIZES=refuse.
bool answer(const char* call, const std::string& shapes, uint64_t bytes, uint64_t at_most,
            uint64_t* out) {
  SizeAnswer reply;
  reply.bytes = bytes;
  reply.at_most = std::max(at_most, bytes);
  reply.how = "Note [cuSPARSE's buffers] in simulator/libraries/cusparse.cpp";
  if (!answerSize(SizeQuestion{"cuSPARSE", call, shapes}, &reply)) return false;
  *out = reply.bytes;
  return true;
}

int toSize(const char* call, const std::string& shapes, uint64_t bytes, uint64_t at_most,
           size_t* out) {
  if (!out) return kInvalidValue;
  uint64_t value = 0;
  if (!answer(call, shapes, bytes, at_most, &value))
    return refuse("cuSPARSE", call, kNotSupported, kUnknownSizeRefused);
  *out = value;
  return kSuccess;
}

int toInt(const char* call, const std::string& shapes, uint64_t bytes, uint64_t at_most, int* out) {
  if (!out) return kInvalidValue;
  uint64_t value = 0;
  if (!answer(call, shapes, bytes, at_most, &value))
    return refuse("cuSPARSE", call, kNotSupported, kUnknownSizeRefused);
  *out = static_cast<int>(std::min<uint64_t>(value, INT32_MAX));
  return kSuccess;
}

template <typename T>
int make(void** out, const T& value) {
  if (!out) return kInvalidValue;
  *out = new T(value);
  return kSuccess;
}

}  // namespace

// ---- The generic API's descriptors -------------------------------------------------------

SIMGPU_API int cusparseCreateCsr(void** out, int64_t rows, int64_t cols, int64_t nnz, void*, void*,
                                 void*, int offset_type, int index_type, int, int type) {
  return make(out, SparseMatrix{kCsr, rows, cols, nnz, offset_type, index_type, type, 1});
}
SIMGPU_API int cusparseCreateConstCsr(void** out, int64_t rows, int64_t cols, int64_t nnz,
                                      const void*, const void*, const void*, int offset_type,
                                      int index_type, int, int type) {
  return make(out, SparseMatrix{kCsr, rows, cols, nnz, offset_type, index_type, type, 1});
}
SIMGPU_API int cusparseCreateCoo(void** out, int64_t rows, int64_t cols, int64_t nnz, void*, void*,
                                 void*, int index_type, int, int type) {
  return make(out, SparseMatrix{kCoo, rows, cols, nnz, index_type, index_type, type, 1});
}
SIMGPU_API int cusparseDestroySpMat(void* matrix) {
  delete static_cast<SparseMatrix*>(matrix);
  return kSuccess;
}
SIMGPU_API int cusparseCsrSetPointers(void* matrix, void*, void*, void*) {
  return matrix ? kSuccess : kInvalidValue;
}
SIMGPU_API int cusparseCsrSetStridedBatch(void* matrix, int batch, int64_t, int64_t) {
  if (!matrix || batch < 1) return kInvalidValue;
  static_cast<SparseMatrix*>(matrix)->batch = batch;
  return kSuccess;
}
SIMGPU_API int cusparseCooSetStridedBatch(void* matrix, int batch, int64_t) {
  if (!matrix || batch < 1) return kInvalidValue;
  static_cast<SparseMatrix*>(matrix)->batch = batch;
  return kSuccess;
}
SIMGPU_API int cusparseSpMatGetSize(const void* matrix, int64_t* rows, int64_t* cols,
                                    int64_t* nnz) {
  if (!matrix) return kInvalidValue;
  const auto& a = *static_cast<const SparseMatrix*>(matrix);
  if (rows) *rows = a.rows;
  if (cols) *cols = a.cols;
  if (nnz) *nnz = a.nnz;
  return kSuccess;
}
SIMGPU_API int cusparseSpMatSetAttribute(void* matrix, int, void*, size_t) {
  return matrix ? kSuccess : kInvalidValue;
}
SIMGPU_API int cusparseCreateDnMat(void** out, int64_t rows, int64_t cols, int64_t ld, void*,
                                   int type, int) {
  return make(out, DenseMatrix{rows, cols, ld, type, 1});
}
SIMGPU_API int cusparseCreateConstDnMat(void** out, int64_t rows, int64_t cols, int64_t ld,
                                        const void*, int type, int) {
  return make(out, DenseMatrix{rows, cols, ld, type, 1});
}
SIMGPU_API int cusparseDestroyDnMat(void* matrix) {
  delete static_cast<DenseMatrix*>(matrix);
  return kSuccess;
}
SIMGPU_API int cusparseDnMatSetStridedBatch(void* matrix, int batch, int64_t) {
  if (!matrix || batch < 1) return kInvalidValue;
  static_cast<DenseMatrix*>(matrix)->batch = batch;
  return kSuccess;
}
SIMGPU_API int cusparseCreateDnVec(void** out, int64_t size, void*, int type) {
  return make(out, DenseVector{size, type});
}
SIMGPU_API int cusparseCreateConstDnVec(void** out, int64_t size, const void*, int type) {
  return make(out, DenseVector{size, type});
}
SIMGPU_API int cusparseDestroyDnVec(void* vector) {
  delete static_cast<DenseVector*>(vector);
  return kSuccess;
}
SIMGPU_API int cusparseSpSV_createDescr(void** out) {
  return make(out, Opaque{});
}
SIMGPU_API int cusparseSpSV_destroyDescr(void* descriptor) {
  delete static_cast<Opaque*>(descriptor);
  return kSuccess;
}
SIMGPU_API int cusparseSpSM_createDescr(void** out) {
  return make(out, Opaque{});
}
SIMGPU_API int cusparseSpSM_destroyDescr(void* descriptor) {
  delete static_cast<Opaque*>(descriptor);
  return kSuccess;
}

// ---- The legacy API's option objects -----------------------------------------------------

SIMGPU_API int cusparseCreateMatDescr(void** out) {
  return make(out, Opaque{});
}
SIMGPU_API int cusparseDestroyMatDescr(void* descriptor) {
  delete static_cast<Opaque*>(descriptor);
  return kSuccess;
}
SIMGPU_API int cusparseCreateBsrsv2Info(void** out) {
  return make(out, Opaque{});
}
SIMGPU_API int cusparseDestroyBsrsv2Info(void* info) {
  delete static_cast<Opaque*>(info);
  return kSuccess;
}
SIMGPU_API int cusparseCreateBsrsm2Info(void** out) {
  return make(out, Opaque{});
}
SIMGPU_API int cusparseDestroyBsrsm2Info(void* info) {
  delete static_cast<Opaque*>(info);
  return kSuccess;
}
// Fills a permutation on the device: a computation, done as nothing.
SIMGPU_API int cusparseCreateIdentityPermutation(void* handle, int n, int*) {
  return handle && n >= 0 ? kSuccess : kInvalidValue;
}
// A zero pivot is a value the factorization found: none here (-1, cuSPARSE's "no zero pivot").
SIMGPU_API int cusparseXbsrsv2_zeroPivot(void* handle, void*, int* position) {
  if (!handle) return kInvalidValue;
  if (position) *position = -1;
  return kSuccess;
}
SIMGPU_API int cusparseXbsrsm2_zeroPivot(void* handle, void*, int* position) {
  return cusparseXbsrsv2_zeroPivot(handle, nullptr, position);
}

// ---- Buffer sizes (Note [cuSPARSE's buffers]) -------------------------------------------

SIMGPU_API int cusparseSpMM_bufferSize(void* handle, int, int, const void*, const void* a,
                                       const void*, const void*, void*, int, int alg,
                                       size_t* bytes) {
  if (!handle || !a) return kInvalidValue;
  const auto& matrix = *static_cast<const SparseMatrix*>(a);
  return toSize(__func__, sparseShapes(matrix).insert(1, "\"alg\":" + std::to_string(alg) + ","), 0,
                matrixBytes(matrix), bytes);
}
SIMGPU_API int cusparseSpMV_bufferSize(void* handle, int, const void*, const void* a, const void*,
                                       const void*, void*, int, int alg, size_t* bytes) {
  if (!handle || !a) return kInvalidValue;
  const auto& matrix = *static_cast<const SparseMatrix*>(a);
  return toSize(__func__, sparseShapes(matrix).insert(1, "\"alg\":" + std::to_string(alg) + ","), 0,
                matrixBytes(matrix), bytes);
}
SIMGPU_API int cusparseSDDMM_bufferSize(void* handle, int, int, const void*, const void*,
                                        const void*, const void*, void* c, int, int alg,
                                        size_t* bytes) {
  if (!handle || !c) return kInvalidValue;
  const auto& matrix = *static_cast<const SparseMatrix*>(c);
  return toSize(__func__, sparseShapes(matrix).insert(1, "\"alg\":" + std::to_string(alg) + ","), 0,
                matrixBytes(matrix), bytes);
}
SIMGPU_API int cusparseSpSV_bufferSize(void* handle, int, const void*, const void* a, const void*,
                                       void*, int, int, void*, size_t* bytes) {
  if (!handle || !a) return kInvalidValue;
  const auto& matrix = *static_cast<const SparseMatrix*>(a);
  return toSize(__func__, sparseShapes(matrix), matrixBytes(matrix), 2 * matrixBytes(matrix),
                bytes);
}
SIMGPU_API int cusparseSpSM_bufferSize(void* handle, int, int, const void*, const void* a,
                                       const void*, void*, int, int, void*, size_t* bytes) {
  if (!handle || !a) return kInvalidValue;
  const auto& matrix = *static_cast<const SparseMatrix*>(a);
  return toSize(__func__, sparseShapes(matrix), matrixBytes(matrix), 2 * matrixBytes(matrix),
                bytes);
}
SIMGPU_API int cusparseXcoosort_bufferSizeExt(void* handle, int m, int n, int nnz, const int*,
                                              const int*, size_t* bytes) {
  if (!handle || nnz < 0) return kInvalidValue;
  std::string shapes = "{\"m\":" + std::to_string(m) + ",\"n\":" + std::to_string(n) +
                       ",\"nnz\":" + std::to_string(nnz) + "}";
  return toSize(__func__, shapes, uint64_t{4} * static_cast<uint64_t>(nnz),
                uint64_t{8} * static_cast<uint64_t>(nnz), bytes);
}
SIMGPU_API int cusparseXcsrsort_bufferSizeExt(void* handle, int m, int n, int nnz, const int*,
                                              const int*, size_t* bytes) {
  if (!handle || nnz < 0) return kInvalidValue;
  std::string shapes = "{\"m\":" + std::to_string(m) + ",\"n\":" + std::to_string(n) +
                       ",\"nnz\":" + std::to_string(nnz) + "}";
  return toSize(__func__, shapes, uint64_t{4} * static_cast<uint64_t>(nnz),
                uint64_t{8} * static_cast<uint64_t>(nnz), bytes);
}

#define SIMGPU_CUSPARSE_TYPED(T, value_bytes)                                                    \
  SIMGPU_API int cusparse##T##csrgeam2_bufferSizeExt(                                            \
      void* handle, int m, int n, const void*, const void*, int nnz_a, const void*, const int*,  \
      const int*, const void*, const void*, int nnz_b, const void*, const int*, const int*,      \
      const void*, const void*, const int*, const int*, size_t* bytes) {                         \
    if (!handle) return kInvalidValue;                                                           \
    std::string shapes = "{\"m\":" + std::to_string(m) + ",\"n\":" + std::to_string(n) +         \
                         ",\"nnz_a\":" + std::to_string(nnz_a) +                                 \
                         ",\"nnz_b\":" + std::to_string(nnz_b) + "}";                            \
    return toSize(__func__, shapes, 0,                                                           \
                  uint64_t{4} * static_cast<uint64_t>(std::max(nnz_a, 0) + std::max(nnz_b, 0)),  \
                  bytes);                                                                        \
  }                                                                                              \
  SIMGPU_API int cusparse##T##bsrsv2_bufferSize(void* handle, int, int, int mb, int nnzb,        \
                                                const void*, void*, const int*, const int*,      \
                                                int block, void*, int* bytes) {                  \
    if (!handle) return kInvalidValue;                                                           \
    uint64_t values = static_cast<uint64_t>(std::max(nnzb, 0)) * static_cast<uint64_t>(block) *  \
                      static_cast<uint64_t>(block) * value_bytes;                                \
    std::string shapes = "{\"mb\":" + std::to_string(mb) + ",\"nnzb\":" + std::to_string(nnzb) + \
                         ",\"block\":" + std::to_string(block) + "}";                            \
    return toInt(__func__, shapes, values, 2 * values, bytes);                                   \
  }                                                                                              \
  SIMGPU_API int cusparse##T##bsrsm2_bufferSize(void* handle, int, int, int, int mb, int n,      \
                                                int nnzb, const void*, void*, const int*,        \
                                                const int*, int block, void*, int* bytes) {      \
    if (!handle) return kInvalidValue;                                                           \
    uint64_t values = static_cast<uint64_t>(std::max(nnzb, 0)) * static_cast<uint64_t>(block) *  \
                      static_cast<uint64_t>(block) * value_bytes;                                \
    std::string shapes = "{\"mb\":" + std::to_string(mb) + ",\"n\":" + std::to_string(n) +       \
                         ",\"nnzb\":" + std::to_string(nnzb) +                                   \
                         ",\"block\":" + std::to_string(block) + "}";                            \
    return toInt(__func__, shapes, values, 2 * values, bytes);                                   \
  }

SIMGPU_CUSPARSE_TYPED(S, 4)
SIMGPU_CUSPARSE_TYPED(D, 8)
SIMGPU_CUSPARSE_TYPED(C, 8)
SIMGPU_CUSPARSE_TYPED(Z, 16)
#undef SIMGPU_CUSPARSE_TYPED
