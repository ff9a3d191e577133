// cuDNN's backend (graph) API as numbers: the enumerations of NVIDIA's cudnn_graph.h (cuDNN 9.24,
// the release torch 2.14's wheels bring) that the simulated cuDNN reads and answers, written as
// lists so that one list gives the enum, the name a refusal prints, and the check against the
// real header (tests/simulator/test_cudnn.py compiles each entry against cudnn_graph.h from the
// wheels: X(NAME, value) must equal CUDNN_ATTR_NAME, CUDNN_BACKEND_NAME_DESCRIPTOR, ...).
#pragma once

#include <stdint.h>

#include <string>

// cudnnBackendDescriptorType_t: X(NAME, value) is CUDNN_BACKEND_<NAME>_DESCRIPTOR.
#define SIMGPU_CUDNN_DESCRIPTOR_TYPES(X)       \
  X(POINTWISE, 0)                              \
  X(CONVOLUTION, 1)                            \
  X(ENGINE, 2)                                 \
  X(ENGINECFG, 3)                              \
  X(ENGINEHEUR, 4)                             \
  X(EXECUTION_PLAN, 5)                         \
  X(INTERMEDIATE_INFO, 6)                      \
  X(KNOB_CHOICE, 7)                            \
  X(KNOB_INFO, 8)                              \
  X(LAYOUT_INFO, 9)                            \
  X(OPERATION_CONVOLUTION_FORWARD, 10)         \
  X(OPERATION_CONVOLUTION_BACKWARD_FILTER, 11) \
  X(OPERATION_CONVOLUTION_BACKWARD_DATA, 12)   \
  X(OPERATION_POINTWISE, 13)                   \
  X(OPERATION_GEN_STATS, 14)                   \
  X(OPERATIONGRAPH, 15)                        \
  X(VARIANT_PACK, 16)                          \
  X(TENSOR, 17)                                \
  X(MATMUL, 18)                                \
  X(OPERATION_MATMUL, 19)                      \
  X(OPERATION_BN_FINALIZE_STATISTICS, 20)      \
  X(REDUCTION, 21)                             \
  X(OPERATION_REDUCTION, 22)                   \
  X(OPERATION_BN_BWD_WEIGHTS, 23)              \
  X(RESAMPLE, 24)                              \
  X(OPERATION_RESAMPLE_FWD, 25)                \
  X(OPERATION_RESAMPLE_BWD, 26)                \
  X(OPERATION_CONCAT, 27)                      \
  X(OPERATION_SIGNAL, 28)                      \
  X(OPERATION_NORM_FORWARD, 29)                \
  X(OPERATION_NORM_BACKWARD, 30)               \
  X(OPERATION_RESHAPE, 31)                     \
  X(RNG, 32)                                   \
  X(OPERATION_RNG, 33)                         \
  X(KERNEL_CACHE, 34)                          \
  X(OPERATION_PAGED_CACHE_LOAD, 35)            \
  X(OPERATION_BLOCK_SCALE_QUANTIZE, 36)        \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE, 37)      \
  X(DEVICEPROP, 38)                            \
  X(OPERATION_EXPAND_BAND_MATRIX, 39)          \
  X(OPERATION_CONTRACT_BAND_MATRIX, 40)        \
  X(OPERATION_SDPA_FWD, 41)                    \
  X(OPERATION_MOE_GROUPED_MATMUL, 42)          \
  X(OPERATION_SDPA_BWD, 43)                    \
  X(OPERATION_DIAGONAL_BAND_MASK, 44)          \
  X(OPERATION_SOFTMAX, 45)                     \
  X(OPERATION_TRANSPOSE, 46)                   \
  X(OPERATION_SLICE, 47)                       \
  X(OPERATION_MOE_GROUPED_MATMUL_BWD, 48)      \
  X(OPERATION_ROPE_FWD, 49)                    \
  X(OPERATION_ROPE_BWD, 50)

// cudnnBackendAttributeType_t: X(NAME, value, bytes of one element) is CUDNN_TYPE_<NAME>. The
// enumerations are C enums (4 bytes), a descriptor or handle a pointer, BOOLEAN a C++ bool,
// FRACTION cudnnFraction_t (two int64_t).
#define SIMGPU_CUDNN_ATTRIBUTE_TYPES(X) \
  X(HANDLE, 0, 8)                       \
  X(DATA_TYPE, 1, 4)                    \
  X(BOOLEAN, 2, 1)                      \
  X(INT64, 3, 8)                        \
  X(FLOAT, 4, 4)                        \
  X(DOUBLE, 5, 8)                       \
  X(VOID_PTR, 6, 8)                     \
  X(CONVOLUTION_MODE, 7, 4)             \
  X(HEUR_MODE, 8, 4)                    \
  X(KNOB_TYPE, 9, 4)                    \
  X(NAN_PROPOGATION, 10, 4)             \
  X(NUMERICAL_NOTE, 11, 4)              \
  X(LAYOUT_TYPE, 12, 4)                 \
  X(ATTRIB_NAME, 13, 4)                 \
  X(POINTWISE_MODE, 14, 4)              \
  X(BACKEND_DESCRIPTOR, 15, 8)          \
  X(GENSTATS_MODE, 16, 4)               \
  X(BN_FINALIZE_STATS_MODE, 17, 4)      \
  X(REDUCTION_OPERATOR_TYPE, 18, 4)     \
  X(BEHAVIOR_NOTE, 19, 4)               \
  X(TENSOR_REORDERING_MODE, 20, 4)      \
  X(RESAMPLE_MODE, 21, 4)               \
  X(PADDING_MODE, 22, 4)                \
  X(INT32, 23, 4)                       \
  X(CHAR, 24, 1)                        \
  X(SIGNAL_MODE, 25, 4)                 \
  X(FRACTION, 26, 16)                   \
  X(NORM_MODE, 27, 4)                   \
  X(NORM_FWD_PHASE, 28, 4)              \
  X(RNG_DISTRIBUTION, 29, 4)            \
  X(MOE_GROUPED_MATMUL_MODE, 30, 4)     \
  X(RESHAPE_MODE, 31, 4)                \
  X(OPERATIONGRAPH_MODE, 32, 4)

// cudnnDataType_t: X(NAME, value) is CUDNN_DATA_<NAME>.
#define SIMGPU_CUDNN_DATA_TYPES(X) \
  X(FLOAT, 0)                      \
  X(DOUBLE, 1)                     \
  X(HALF, 2)                       \
  X(INT8, 3)                       \
  X(INT32, 4)                      \
  X(INT8x4, 5)                     \
  X(UINT8, 6)                      \
  X(UINT8x4, 7)                    \
  X(INT8x32, 8)                    \
  X(BFLOAT16, 9)                   \
  X(INT64, 10)                     \
  X(BOOLEAN, 11)                   \
  X(FP8_E4M3, 12)                  \
  X(FP8_E5M2, 13)                  \
  X(FAST_FLOAT_FOR_FP8, 14)        \
  X(FP8_E8M0, 15)                  \
  X(FP4_E2M1, 16)                  \
  X(INT4, 17)                      \
  X(UINT4, 18)                     \
  X(UINT32, 19)                    \
  X(COMPLEX_FP32, 20)              \
  X(COMPLEX_FP64, 21)

// cudnnBackendNumericalNote_t: X(NAME, value) is CUDNN_NUMERICAL_NOTE_<NAME>.
#define SIMGPU_CUDNN_NUMERICAL_NOTES(X) \
  X(TENSOR_CORE, 0)                     \
  X(DOWN_CONVERT_INPUTS, 1)             \
  X(REDUCED_PRECISION_REDUCTION, 2)     \
  X(FFT, 3)                             \
  X(NONDETERMINISTIC, 4)                \
  X(WINOGRAD, 5)                        \
  X(WINOGRAD_TILE_4x4, 6)               \
  X(WINOGRAD_TILE_6x6, 7)               \
  X(WINOGRAD_TILE_13x13, 8)             \
  X(STRICT_NAN_PROP, 9)                 \
  X(TYPE_COUNT, 10)

// cudnnBackendBehaviorNote_t: X(NAME, value) is CUDNN_BEHAVIOR_NOTE_<NAME>.
#define SIMGPU_CUDNN_BEHAVIOR_NOTES(X)  \
  X(RUNTIME_COMPILATION, 0)             \
  X(REQUIRES_FILTER_INT8x32_REORDER, 1) \
  X(REQUIRES_BIAS_INT8x32_REORDER, 2)   \
  X(SUPPORTS_CUDA_GRAPH_NATIVE_API, 3)  \
  X(CUBLASLT_DEPENDENCY, 4)             \
  X(TYPE_COUNT, 5)

// cudnnBackendHeurMode_t: X(NAME, value) is CUDNN_HEUR_MODE_<NAME>.
#define SIMGPU_CUDNN_HEURISTIC_MODES(X) \
  X(INSTANT, 0)                         \
  X(B, 1)                               \
  X(FALLBACK, 2)                        \
  X(A, 3)

// cudnnStatus_t: the statuses the simulated cuDNN returns. X(NAME, value) is CUDNN_STATUS_<NAME>.
#define SIMGPU_CUDNN_STATUSES(X)       \
  X(SUCCESS, 0)                        \
  X(NOT_INITIALIZED, 1001)             \
  X(BAD_PARAM, 2000)                   \
  X(BAD_PARAM_NULL_POINTER, 2002)      \
  X(BAD_PARAM_NOT_FINALIZED, 2004)     \
  X(BAD_PARAM_OUT_OF_BOUND, 2005)      \
  X(BAD_PARAM_ATTRIBUTE_TYPE, 2010)    \
  X(BAD_PARAM_DESCRIPTOR_TYPE, 2012)   \
  X(NOT_SUPPORTED, 3000)               \
  X(NOT_SUPPORTED_GRAPH_PATTERN, 3001) \
  X(INTERNAL_ERROR_HOST_ALLOCATION_FAILED, 4003)

// cudnnBackendAttributeName_t: X(NAME, value) is CUDNN_ATTR_<NAME>.
#define SIMGPU_CUDNN_ATTRIBUTES(X)                                  \
  X(POINTWISE_MODE, 0)                                              \
  X(POINTWISE_MATH_PREC, 1)                                         \
  X(POINTWISE_NAN_PROPAGATION, 2)                                   \
  X(POINTWISE_RELU_LOWER_CLIP, 3)                                   \
  X(POINTWISE_RELU_UPPER_CLIP, 4)                                   \
  X(POINTWISE_RELU_LOWER_CLIP_SLOPE, 5)                             \
  X(POINTWISE_ELU_ALPHA, 6)                                         \
  X(POINTWISE_SOFTPLUS_BETA, 7)                                     \
  X(POINTWISE_SWISH_BETA, 8)                                        \
  X(POINTWISE_AXIS, 9)                                              \
  X(CONVOLUTION_COMP_TYPE, 100)                                     \
  X(CONVOLUTION_CONV_MODE, 101)                                     \
  X(CONVOLUTION_DILATIONS, 102)                                     \
  X(CONVOLUTION_FILTER_STRIDES, 103)                                \
  X(CONVOLUTION_POST_PADDINGS, 104)                                 \
  X(CONVOLUTION_PRE_PADDINGS, 105)                                  \
  X(CONVOLUTION_SPATIAL_DIMS, 106)                                  \
  X(ENGINEHEUR_MODE, 200)                                           \
  X(ENGINEHEUR_OPERATION_GRAPH, 201)                                \
  X(ENGINEHEUR_RESULTS, 202)                                        \
  X(ENGINEHEUR_SM_COUNT_TARGET, 203)                                \
  X(ENGINEHEUR_DEVICEPROP, 204)                                     \
  X(ENGINECFG_ENGINE, 300)                                          \
  X(ENGINECFG_INTERMEDIATE_INFO, 301)                               \
  X(ENGINECFG_KNOB_CHOICES, 302)                                    \
  X(ENGINECFG_WORKSPACE_SIZE, 303)                                  \
  X(ENGINECFG_SHARED_MEMORY_USED, 304)                              \
  X(EXECUTION_PLAN_HANDLE, 400)                                     \
  X(EXECUTION_PLAN_ENGINE_CONFIG, 401)                              \
  X(EXECUTION_PLAN_WORKSPACE_SIZE, 402)                             \
  X(EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS, 403)                 \
  X(EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS, 404)                 \
  X(EXECUTION_PLAN_JSON_REPRESENTATION, 405)                        \
  X(EXECUTION_PLAN_KERNEL_CACHE, 406)                               \
  X(EXECUTION_PLAN_DEVICEPROP, 407)                                 \
  X(INTERMEDIATE_INFO_UNIQUE_ID, 500)                               \
  X(INTERMEDIATE_INFO_SIZE, 501)                                    \
  X(INTERMEDIATE_INFO_DEPENDENT_DATA_UIDS, 502)                     \
  X(INTERMEDIATE_INFO_DEPENDENT_ATTRIBUTES, 503)                    \
  X(KNOB_CHOICE_KNOB_TYPE, 600)                                     \
  X(KNOB_CHOICE_KNOB_VALUE, 601)                                    \
  X(OPERATION_CONVOLUTION_FORWARD_ALPHA, 700)                       \
  X(OPERATION_CONVOLUTION_FORWARD_BETA, 701)                        \
  X(OPERATION_CONVOLUTION_FORWARD_CONV_DESC, 702)                   \
  X(OPERATION_CONVOLUTION_FORWARD_W, 703)                           \
  X(OPERATION_CONVOLUTION_FORWARD_X, 704)                           \
  X(OPERATION_CONVOLUTION_FORWARD_Y, 705)                           \
  X(OPERATION_CONVOLUTION_BWD_DATA_ALPHA, 706)                      \
  X(OPERATION_CONVOLUTION_BWD_DATA_BETA, 707)                       \
  X(OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, 708)                  \
  X(OPERATION_CONVOLUTION_BWD_DATA_W, 709)                          \
  X(OPERATION_CONVOLUTION_BWD_DATA_DX, 710)                         \
  X(OPERATION_CONVOLUTION_BWD_DATA_DY, 711)                         \
  X(OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, 712)                    \
  X(OPERATION_CONVOLUTION_BWD_FILTER_BETA, 713)                     \
  X(OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, 714)                \
  X(OPERATION_CONVOLUTION_BWD_FILTER_DW, 715)                       \
  X(OPERATION_CONVOLUTION_BWD_FILTER_X, 716)                        \
  X(OPERATION_CONVOLUTION_BWD_FILTER_DY, 717)                       \
  X(OPERATION_POINTWISE_PW_DESCRIPTOR, 750)                         \
  X(OPERATION_POINTWISE_XDESC, 751)                                 \
  X(OPERATION_POINTWISE_BDESC, 752)                                 \
  X(OPERATION_POINTWISE_YDESC, 753)                                 \
  X(OPERATION_POINTWISE_ALPHA1, 754)                                \
  X(OPERATION_POINTWISE_ALPHA2, 755)                                \
  X(OPERATION_POINTWISE_DXDESC, 756)                                \
  X(OPERATION_POINTWISE_DYDESC, 757)                                \
  X(OPERATION_POINTWISE_TDESC, 758)                                 \
  X(OPERATION_GENSTATS_MODE, 770)                                   \
  X(OPERATION_GENSTATS_MATH_PREC, 771)                              \
  X(OPERATION_GENSTATS_XDESC, 772)                                  \
  X(OPERATION_GENSTATS_SUMDESC, 773)                                \
  X(OPERATION_GENSTATS_SQSUMDESC, 774)                              \
  X(OPERATION_BN_FINALIZE_STATS_MODE, 780)                          \
  X(OPERATION_BN_FINALIZE_MATH_PREC, 781)                           \
  X(OPERATION_BN_FINALIZE_Y_SUM_DESC, 782)                          \
  X(OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC, 783)                       \
  X(OPERATION_BN_FINALIZE_SCALE_DESC, 784)                          \
  X(OPERATION_BN_FINALIZE_BIAS_DESC, 785)                           \
  X(OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC, 786)              \
  X(OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC, 787)               \
  X(OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC, 788)           \
  X(OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC, 789)            \
  X(OPERATION_BN_FINALIZE_SAVED_MEAN_DESC, 790)                     \
  X(OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC, 791)                  \
  X(OPERATION_BN_FINALIZE_EQ_SCALE_DESC, 792)                       \
  X(OPERATION_BN_FINALIZE_EQ_BIAS_DESC, 793)                        \
  X(OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC, 794)                    \
  X(OPERATION_BN_FINALIZE_EPSILON_DESC, 795)                        \
  X(OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC, 796)             \
  X(OPERATIONGRAPH_HANDLE, 800)                                     \
  X(OPERATIONGRAPH_OPS, 801)                                        \
  X(OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, 802)                        \
  X(OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, 803)                   \
  X(OPERATIONGRAPH_IS_SAME_TOPOLOGY, 804)                           \
  X(OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED, 805)                  \
  X(OPERATIONGRAPH_MODE, 806)                                       \
  X(TENSOR_BYTE_ALIGNMENT, 900)                                     \
  X(TENSOR_DATA_TYPE, 901)                                          \
  X(TENSOR_DIMENSIONS, 902)                                         \
  X(TENSOR_STRIDES, 903)                                            \
  X(TENSOR_VECTOR_COUNT, 904)                                       \
  X(TENSOR_VECTORIZED_DIMENSION, 905)                               \
  X(TENSOR_UNIQUE_ID, 906)                                          \
  X(TENSOR_IS_VIRTUAL, 907)                                         \
  X(TENSOR_IS_BY_VALUE, 908)                                        \
  X(TENSOR_REORDERING_MODE, 909)                                    \
  X(TENSOR_CONSTANT_VALUE, 910)                                     \
  X(TENSOR_RAGGED_OFFSET_DESC, 913)                                 \
  X(TENSOR_RAGGED_OFFSET_MULTIPLIER, 914)                           \
  X(VARIANT_PACK_UNIQUE_IDS, 1000)                                  \
  X(VARIANT_PACK_DATA_POINTERS, 1001)                               \
  X(VARIANT_PACK_INTERMEDIATES, 1002)                               \
  X(VARIANT_PACK_WORKSPACE, 1003)                                   \
  X(VARIANT_PACK_OVERRIDE_UNIQUE_IDS, 1010)                         \
  X(VARIANT_PACK_OVERRIDE_SHAPES, 1011)                             \
  X(VARIANT_PACK_OVERRIDE_STRIDES, 1012)                            \
  X(LAYOUT_INFO_TENSOR_UID, 1100)                                   \
  X(LAYOUT_INFO_TYPES, 1101)                                        \
  X(KNOB_INFO_TYPE, 1200)                                           \
  X(KNOB_INFO_MAXIMUM_VALUE, 1201)                                  \
  X(KNOB_INFO_MINIMUM_VALUE, 1202)                                  \
  X(KNOB_INFO_STRIDE, 1203)                                         \
  X(ENGINE_OPERATION_GRAPH, 1300)                                   \
  X(ENGINE_GLOBAL_INDEX, 1301)                                      \
  X(ENGINE_KNOB_INFO, 1302)                                         \
  X(ENGINE_NUMERICAL_NOTE, 1303)                                    \
  X(ENGINE_LAYOUT_INFO, 1304)                                       \
  X(ENGINE_BEHAVIOR_NOTE, 1305)                                     \
  X(ENGINE_SM_COUNT_TARGET, 1306)                                   \
  X(ENGINE_DEVICEPROP, 1307)                                        \
  X(ENGINE_DISABLE_CLUSTER_COOPERATIVE, 1308)                       \
  X(MATMUL_COMP_TYPE, 1500)                                         \
  X(MATMUL_PADDING_VALUE, 1503)                                     \
  X(OPERATION_MATMUL_ADESC, 1520)                                   \
  X(OPERATION_MATMUL_BDESC, 1521)                                   \
  X(OPERATION_MATMUL_CDESC, 1522)                                   \
  X(OPERATION_MATMUL_DESC, 1523)                                    \
  X(OPERATION_MATMUL_IRREGULARLY_STRIDED_BATCH_COUNT, 1524)         \
  X(OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, 1525)                    \
  X(OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, 1526)                    \
  X(OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, 1527)                    \
  X(REDUCTION_OPERATOR, 1600)                                       \
  X(REDUCTION_COMP_TYPE, 1601)                                      \
  X(REDUCTION_IS_DETERMINISTIC, 1602)                               \
  X(OPERATION_REDUCTION_XDESC, 1610)                                \
  X(OPERATION_REDUCTION_YDESC, 1611)                                \
  X(OPERATION_REDUCTION_DESC, 1612)                                 \
  X(OPERATION_REDUCTION_GROUP_OFFSET_DESC, 1613)                    \
  X(OPERATION_BN_BWD_WEIGHTS_MATH_PREC, 1620)                       \
  X(OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, 1621)                       \
  X(OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, 1622)                     \
  X(OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, 1623)                   \
  X(OPERATION_BN_BWD_WEIGHTS_X_DESC, 1624)                          \
  X(OPERATION_BN_BWD_WEIGHTS_DY_DESC, 1625)                         \
  X(OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, 1626)                  \
  X(OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, 1627)                   \
  X(OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, 1628)                \
  X(OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, 1629)                 \
  X(OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, 1630)                         \
  X(RESAMPLE_MODE, 1700)                                            \
  X(RESAMPLE_COMP_TYPE, 1701)                                       \
  X(RESAMPLE_SPATIAL_DIMS, 1702)                                    \
  X(RESAMPLE_POST_PADDINGS, 1703)                                   \
  X(RESAMPLE_PRE_PADDINGS, 1704)                                    \
  X(RESAMPLE_STRIDES, 1705)                                         \
  X(RESAMPLE_WINDOW_DIMS, 1706)                                     \
  X(RESAMPLE_NAN_PROPAGATION, 1707)                                 \
  X(RESAMPLE_PADDING_MODE, 1708)                                    \
  X(OPERATION_RESAMPLE_FWD_XDESC, 1710)                             \
  X(OPERATION_RESAMPLE_FWD_YDESC, 1711)                             \
  X(OPERATION_RESAMPLE_FWD_IDXDESC, 1712)                           \
  X(OPERATION_RESAMPLE_FWD_ALPHA, 1713)                             \
  X(OPERATION_RESAMPLE_FWD_BETA, 1714)                              \
  X(OPERATION_RESAMPLE_FWD_DESC, 1716)                              \
  X(OPERATION_RESAMPLE_BWD_DXDESC, 1720)                            \
  X(OPERATION_RESAMPLE_BWD_DYDESC, 1721)                            \
  X(OPERATION_RESAMPLE_BWD_IDXDESC, 1722)                           \
  X(OPERATION_RESAMPLE_BWD_ALPHA, 1723)                             \
  X(OPERATION_RESAMPLE_BWD_BETA, 1724)                              \
  X(OPERATION_RESAMPLE_BWD_DESC, 1725)                              \
  X(OPERATION_RESAMPLE_BWD_XDESC, 1726)                             \
  X(OPERATION_RESAMPLE_BWD_YDESC, 1727)                             \
  X(OPERATION_CONCAT_AXIS, 1800)                                    \
  X(OPERATION_CONCAT_INPUT_DESCS, 1801)                             \
  X(OPERATION_CONCAT_INPLACE_INDEX, 1802)                           \
  X(OPERATION_CONCAT_OUTPUT_DESC, 1803)                             \
  X(OPERATION_SIGNAL_MODE, 1900)                                    \
  X(OPERATION_SIGNAL_FLAGDESC, 1901)                                \
  X(OPERATION_SIGNAL_VALUE, 1902)                                   \
  X(OPERATION_SIGNAL_XDESC, 1903)                                   \
  X(OPERATION_SIGNAL_YDESC, 1904)                                   \
  X(OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, 1950)                \
  X(OPERATION_PAGED_CACHE_LOAD_YDESC, 1951)                         \
  X(OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, 1952)                 \
  X(OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, 1953)               \
  X(OPERATION_NORM_FWD_MODE, 2000)                                  \
  X(OPERATION_NORM_FWD_PHASE, 2001)                                 \
  X(OPERATION_NORM_FWD_XDESC, 2002)                                 \
  X(OPERATION_NORM_FWD_MEAN_DESC, 2003)                             \
  X(OPERATION_NORM_FWD_INV_VARIANCE_DESC, 2004)                     \
  X(OPERATION_NORM_FWD_SCALE_DESC, 2005)                            \
  X(OPERATION_NORM_FWD_BIAS_DESC, 2006)                             \
  X(OPERATION_NORM_FWD_EPSILON_DESC, 2007)                          \
  X(OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, 2008)                   \
  X(OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, 2009)               \
  X(OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, 2010)                \
  X(OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, 2011)              \
  X(OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, 2012)               \
  X(OPERATION_NORM_FWD_YDESC, 2013)                                 \
  X(OPERATION_NORM_FWD_PEER_STAT_DESCS, 2014)                       \
  X(OPERATION_NORM_BWD_MODE, 2100)                                  \
  X(OPERATION_NORM_BWD_XDESC, 2101)                                 \
  X(OPERATION_NORM_BWD_MEAN_DESC, 2102)                             \
  X(OPERATION_NORM_BWD_INV_VARIANCE_DESC, 2103)                     \
  X(OPERATION_NORM_BWD_DYDESC, 2104)                                \
  X(OPERATION_NORM_BWD_SCALE_DESC, 2105)                            \
  X(OPERATION_NORM_BWD_EPSILON_DESC, 2106)                          \
  X(OPERATION_NORM_BWD_DSCALE_DESC, 2107)                           \
  X(OPERATION_NORM_BWD_DBIAS_DESC, 2108)                            \
  X(OPERATION_NORM_BWD_DXDESC, 2109)                                \
  X(OPERATION_NORM_BWD_PEER_STAT_DESCS, 2110)                       \
  X(OPERATION_RESHAPE_XDESC, 2200)                                  \
  X(OPERATION_RESHAPE_YDESC, 2201)                                  \
  X(OPERATION_RESHAPE_MODE, 2202)                                   \
  X(OPERATION_TRANSPOSE_XDESC, 3200)                                \
  X(OPERATION_TRANSPOSE_YDESC, 3201)                                \
  X(OPERATION_TRANSPOSE_PERMUTATION, 3202)                          \
  X(OPERATION_SLICE_XDESC, 3300)                                    \
  X(OPERATION_SLICE_YDESC, 3301)                                    \
  X(OPERATION_SLICE_START_INDICES, 3302)                            \
  X(OPERATION_SLICE_LIMIT_INDICES, 3303)                            \
  X(OPERATION_SLICE_STRIDES, 3304)                                  \
  X(OPERATION_ROPE_FWD_XDESC, 3400)                                 \
  X(OPERATION_ROPE_FWD_YDESC, 3401)                                 \
  X(OPERATION_ROPE_FWD_FREQSDESC, 3402)                             \
  X(OPERATION_ROPE_FWD_OUTPUT_SCALE, 3403)                          \
  X(OPERATION_ROPE_FWD_ROPE_DIM, 3404)                              \
  X(OPERATION_ROPE_BWD_DYDESC, 3410)                                \
  X(OPERATION_ROPE_BWD_DXDESC, 3411)                                \
  X(OPERATION_ROPE_BWD_FREQSDESC, 3412)                             \
  X(OPERATION_ROPE_BWD_OUTPUT_SCALE, 3413)                          \
  X(OPERATION_ROPE_BWD_ROPE_DIM, 3414)                              \
  X(OPERATION_EXPAND_BAND_MATRIX_XDESC, 2250)                       \
  X(OPERATION_EXPAND_BAND_MATRIX_YDESC, 2251)                       \
  X(OPERATION_EXPAND_BAND_MATRIX_LOWER_BANDWIDTH, 2252)             \
  X(OPERATION_EXPAND_BAND_MATRIX_UPPER_BANDWIDTH, 2253)             \
  X(OPERATION_EXPAND_BAND_MATRIX_AXIS, 2254)                        \
  X(OPERATION_EXPAND_BAND_MATRIX_PAD_VALUE, 2255)                   \
  X(OPERATION_EXPAND_BAND_MATRIX_KV_TOKEN_OFFSET_DESC, 2256)        \
  X(OPERATION_EXPAND_BAND_MATRIX_SPECULATIVE_MASK_DESC, 2257)       \
  X(OPERATION_CONTRACT_BAND_MATRIX_XDESC, 2270)                     \
  X(OPERATION_CONTRACT_BAND_MATRIX_YDESC, 2271)                     \
  X(OPERATION_CONTRACT_BAND_MATRIX_LOWER_BANDWIDTH, 2272)           \
  X(OPERATION_CONTRACT_BAND_MATRIX_UPPER_BANDWIDTH, 2273)           \
  X(OPERATION_CONTRACT_BAND_MATRIX_AXIS, 2274)                      \
  X(OPERATION_CONTRACT_BAND_MATRIX_PAD_VALUE, 2275)                 \
  X(OPERATION_CONTRACT_BAND_MAX_TOKEN_VALUE, 2276)                  \
  X(RNG_DISTRIBUTION, 2300)                                         \
  X(RNG_NORMAL_DIST_MEAN, 2301)                                     \
  X(RNG_NORMAL_DIST_STANDARD_DEVIATION, 2302)                       \
  X(RNG_UNIFORM_DIST_MAXIMUM, 2303)                                 \
  X(RNG_UNIFORM_DIST_MINIMUM, 2304)                                 \
  X(RNG_BERNOULLI_DIST_PROBABILITY, 2305)                           \
  X(OPERATION_RNG_YDESC, 2310)                                      \
  X(OPERATION_RNG_SEED, 2311)                                       \
  X(OPERATION_RNG_DESC, 2312)                                       \
  X(OPERATION_RNG_OFFSET_DESC, 2313)                                \
  X(KERNEL_CACHE_OPERATION_GRAPH, 2400)                             \
  X(KERNEL_CACHE_IS_ENGINECFG_KERNEL_CACHED, 2401)                  \
  X(KERNEL_CACHE_JSON_REPRESENTATION, 2402)                         \
  X(OPERATION_BLOCK_SCALE_QUANTIZE_XDESC, 2500)                     \
  X(OPERATION_BLOCK_SCALE_QUANTIZE_YDESC, 2501)                     \
  X(OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC, 2502)                \
  X(OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC, 2503)                 \
  X(OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE, 2504)                \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC, 2600)                   \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC, 2601)              \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC, 2602)                   \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC, 2603)               \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE, 2604)              \
  X(OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE, 2605)               \
  X(DEVICEPROP_DEVICE_ID, 2700)                                     \
  X(DEVICEPROP_HANDLE, 2701)                                        \
  X(DEVICEPROP_JSON_REPRESENTATION, 2702)                           \
  X(OPERATION_SDPA_FWD_QDESC, 2800)                                 \
  X(OPERATION_SDPA_FWD_KDESC, 2801)                                 \
  X(OPERATION_SDPA_FWD_VDESC, 2802)                                 \
  X(OPERATION_SDPA_FWD_ODESC, 2803)                                 \
  X(OPERATION_SDPA_FWD_STATSDESC, 2804)                             \
  X(OPERATION_SDPA_FWD_SCALEDESC, 2805)                             \
  X(OPERATION_SDPA_FWD_BLOCK_MASK_DESC, 2806)                       \
  X(OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, 2807)                      \
  X(OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, 2808)                      \
  X(OPERATION_SDPA_FWD_SEQ_LEN_QDESC, 2809)                         \
  X(OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, 2810)                        \
  X(OPERATION_SDPA_FWD_SUBGRAPH, 2811)                              \
  X(OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID, 2812)                    \
  X(OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID, 2813)                   \
  X(OPERATION_SDPA_FWD_SOFTMAX_DESC, 2814)                          \
  X(OPERATION_SDPA_FWD_DROPOUT_SEED_DESC, 2815)                     \
  X(OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC, 2816)                   \
  X(OPERATION_SDPA_FWD_DROPOUT_RNG_DUMP_DESC, 2817)                 \
  X(OPERATION_SDPA_FWD_DROPOUT_PROBABILITY, 2818)                   \
  X(OPERATION_SDPA_FWD_UNFUSE_FMA, 2819)                            \
  X(OPERATION_SDPA_FWD_CU_SEQ_LEN_QDESC, 2820)                      \
  X(OPERATION_SDPA_FWD_CU_SEQ_LEN_KVDESC, 2821)                     \
  X(OPERATION_SDPA_BWD_QDESC, 2851)                                 \
  X(OPERATION_SDPA_BWD_KDESC, 2852)                                 \
  X(OPERATION_SDPA_BWD_VDESC, 2853)                                 \
  X(OPERATION_SDPA_BWD_ODESC, 2854)                                 \
  X(OPERATION_SDPA_BWD_STATSDESC, 2855)                             \
  X(OPERATION_SDPA_BWD_SCALEDESC, 2856)                             \
  X(OPERATION_SDPA_BWD_SEQ_LEN_QDESC, 2857)                         \
  X(OPERATION_SDPA_BWD_SEQ_LEN_KVDESC, 2858)                        \
  X(OPERATION_SDPA_BWD_DQDESC, 2859)                                \
  X(OPERATION_SDPA_BWD_DKDESC, 2860)                                \
  X(OPERATION_SDPA_BWD_DVDESC, 2861)                                \
  X(OPERATION_SDPA_BWD_DODDESC, 2862)                               \
  X(OPERATION_SDPA_BWD_SINK_DESC, 2863)                             \
  X(OPERATION_SDPA_BWD_DSINK_DESC, 2864)                            \
  X(OPERATION_SDPA_BWD_MAX_TOTAL_SEQ_LEN_Q, 2865)                   \
  X(OPERATION_SDPA_BWD_MAX_TOTAL_SEQ_LEN_KV, 2866)                  \
  X(OPERATION_SDPA_BWD_SUBGRAPH, 2867)                              \
  X(OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID, 2868)                    \
  X(OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID, 2869)                   \
  X(OPERATION_MOE_GROUPED_MATMUL_MODE, 2900)                        \
  X(OPERATION_MOE_GROUPED_MATMUL_MATH_PREC, 2901)                   \
  X(OPERATION_MOE_GROUPED_MATMUL_TOKEN_DESC, 2902)                  \
  X(OPERATION_MOE_GROUPED_MATMUL_WEIGHT_DESC, 2903)                 \
  X(OPERATION_MOE_GROUPED_MATMUL_FIRST_TOKEN_OFFSET_DESC, 2904)     \
  X(OPERATION_MOE_GROUPED_MATMUL_OUTPUT_DESC, 2905)                 \
  X(OPERATION_MOE_GROUPED_MATMUL_TOKEN_INDEX_DESC, 2906)            \
  X(OPERATION_MOE_GROUPED_MATMUL_TOKEN_KS_DESC, 2907)               \
  X(OPERATION_MOE_GROUPED_MATMUL_TOP_K, 2908)                       \
  X(OPERATION_MOE_GROUPED_MATMUL_BWD_MATH_PREC, 2951)               \
  X(OPERATION_MOE_GROUPED_MATMUL_BWD_TOKEN_DESC, 2952)              \
  X(OPERATION_MOE_GROUPED_MATMUL_BWD_DWEIGHT_DESC, 2953)            \
  X(OPERATION_MOE_GROUPED_MATMUL_BWD_FIRST_TOKEN_OFFSET_DESC, 2954) \
  X(OPERATION_MOE_GROUPED_MATMUL_BWD_DOUTPUT_DESC, 2955)            \
  X(OPERATION_DIAGONAL_BAND_MASK_XDESC, 3000)                       \
  X(OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC, 3001)              \
  X(OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC, 3002)               \
  X(OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC, 3003)             \
  X(OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC, 3004)      \
  X(OPERATION_DIAGONAL_BAND_MASK_BDESC, 3005)                       \
  X(OPERATION_DIAGONAL_BAND_MASK_YDESC, 3006)                       \
  X(OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE, 3007)             \
  X(OPERATION_DIAGONAL_BAND_MASK_CU_SEQ_LEN_KVDESC, 3008)           \
  X(OPERATION_DIAGONAL_BAND_MASK_CU_SEQ_LEN_QDESC, 3009)            \
  X(OPERATION_SOFTMAX_XDESC, 3100)                                  \
  X(OPERATION_SOFTMAX_YDESC, 3101)                                  \
  X(OPERATION_SOFTMAX_STATS_DESC, 3102)                             \
  X(OPERATION_SOFTMAX_MAX_DESC, 3103)                               \
  X(OPERATION_SOFTMAX_SUM_EXP_DESC, 3104)                           \
  X(OPERATION_SOFTMAX_SINK_DESC, 3105)

namespace simgpu::cudnn {

#define SIMGPU_CUDNN_ENUMERATOR(name, value, ...) name = value,
enum class Kind : int { SIMGPU_CUDNN_DESCRIPTOR_TYPES(SIMGPU_CUDNN_ENUMERATOR) };
enum class Type : int { SIMGPU_CUDNN_ATTRIBUTE_TYPES(SIMGPU_CUDNN_ENUMERATOR) };
enum class DataType : int { SIMGPU_CUDNN_DATA_TYPES(SIMGPU_CUDNN_ENUMERATOR) };
enum class NumericalNote : int { SIMGPU_CUDNN_NUMERICAL_NOTES(SIMGPU_CUDNN_ENUMERATOR) };
enum class BehaviorNote : int { SIMGPU_CUDNN_BEHAVIOR_NOTES(SIMGPU_CUDNN_ENUMERATOR) };
enum class HeuristicMode : int { SIMGPU_CUDNN_HEURISTIC_MODES(SIMGPU_CUDNN_ENUMERATOR) };
enum class Status : int { SIMGPU_CUDNN_STATUSES(SIMGPU_CUDNN_ENUMERATOR) };
enum class Attr : int { SIMGPU_CUDNN_ATTRIBUTES(SIMGPU_CUDNN_ENUMERATOR) };
#undef SIMGPU_CUDNN_ENUMERATOR

// NVIDIA's names ("CUDNN_ATTR_TENSOR_DIMENSIONS"), for refusals and the log; nullptr for a
// number the lists do not hold.
const char* attributeName(int attribute);
const char* kindName(int kind);
const char* typeName(int type);
std::string dataTypeName(int data_type);  // "half", "bfloat16": the log's and the table's
// Bytes of one element of an attribute of `type`; 0 for a type the list does not hold.
int64_t elementBytes(int type);

}  // namespace simgpu::cudnn
