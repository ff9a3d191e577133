#include "simulator/core/attributes.h"

#include <cuda.h>
#include <string.h>

#include <algorithm>

#include "simulator/core/device.h"

namespace simgpu {

bool deviceAttribute(int attribute, int device, int* value) {
  const Profile* card = profile();
  if (!card || device < 0 || device >= deviceCount()) return false;
  const int sm = card->major * 10 + card->minor;
  switch (static_cast<CUdevice_attribute>(attribute)) {
    // The profile's own figures.
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = card->multiprocessors;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = card->major;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = card->minor;
      return true;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = card->l2_cache_bytes;
      return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = card->memory_bus_width_bits;
      return true;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = card->clock_khz;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = card->memory_clock_khz;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = card->shared_memory_per_block_optin;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *value = card->shared_memory_per_multiprocessor;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = card->max_threads_per_multiprocessor;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *value = card->max_blocks_per_multiprocessor;
      return true;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      *value = card->max_cluster_size > 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
      *value = sm >= 90;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
      *value = card->l2_cache_bytes / 4 * 3;
      return true;
    // The same on every card since compute capability 3.0 (the CUDA C++ Programming Guide's
    // technical specifications).
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      *value = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *value = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *value = 64;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *value = 2147483647;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      *value = 65535;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *value = 65535;
      return true;
    case CU_DEVICE_ATTRIBUTE_SHARED_MEMORY_PER_BLOCK:
      *value = 49152;
      return true;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *value = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *value = 2147483647;
      return true;
    case CU_DEVICE_ATTRIBUTE_REGISTERS_PER_BLOCK:
      *value = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *value = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      *value = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *value = 512;
      return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *value = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      *value = 512;
      return true;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *value = 2;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
      *value = sm >= 90 ? 4 : 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      *value = sm == 89 ? 64 : 2;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
      *value = 134213632;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      *value = CU_COMPUTEMODE_DEFAULT;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *value = 0x10 + device;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *value = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *value = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
      *value = device;
      return true;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      *value = -1;
      return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
      *value = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
      *value = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      *value = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      return true;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
      *value = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
      *value = 0;
      return true;
    // Yes on a discrete data-center or desktop card of these generations.
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
      *value = 1;
      return true;
    // Multicast (NVLink SHARP): a property of the machine, not the card (multicastSupported).
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
      *value = multicastSupported() ? 1 : 0;
      return true;
    // No: an integrated part, a watchdog, TCC, multi-GPU boards, host page tables, fabric
    // handles, MPS, Windows handles, DMA-BUF.
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK:
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:
      *value = 0;
      return true;
    default:
      break;
  }
  // Texture and surface limits: the same on every card profiled (compute capability 8.0 to
  // 9.0); nothing PyTorch allocates depends on them.
  if (attribute >= CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH &&
      attribute <= CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH) {
    *value = 32768;
    return true;
  }
  return false;
}

int activeBlocksPerMultiprocessor(int block_size, size_t dynamic_shared) {
  const Profile* card = profile();
  if (!card || block_size <= 0) return 0;
  int by_threads = card->max_threads_per_multiprocessor / block_size;
  int by_registers = 65536 / (kRegistersPerThread * block_size);
  // Each block also takes the 1 KiB of shared memory the system reserves for it.
  int by_shared =
      dynamic_shared
          ? static_cast<int>(card->shared_memory_per_multiprocessor / (dynamic_shared + 1024))
          : card->max_blocks_per_multiprocessor;
  return std::min({by_threads, by_registers, by_shared, card->max_blocks_per_multiprocessor});
}

void deviceUuid(unsigned char uuid[16], int device) {
  memset(uuid, 0, 16);
  memcpy(uuid, "memtrace", 8);
  const Profile* card = profile();
  unsigned hash = 2166136261u;
  if (card)
    for (char c : card->name) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  memcpy(uuid + 8, &hash, 4);
  uuid[12] = static_cast<unsigned char>(device);
}

void deviceProperties(cudaDeviceProp* p, int device) {
  memset(p, 0, sizeof(*p));
  const Profile* card = profile();
  if (!card) return;
  snprintf(p->name, sizeof(p->name), "%s", card->device_name.c_str());
  deviceUuid(reinterpret_cast<unsigned char*>(p->uuid.bytes), device);
  auto get = [device](CUdevice_attribute attribute) {
    int value = 0;
    deviceAttribute(attribute, device, &value);
    return value;
  };
  p->totalGlobalMem = totalBytes(device);
  p->sharedMemPerBlock = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_SHARED_MEMORY_PER_BLOCK));
  p->regsPerBlock = get(CU_DEVICE_ATTRIBUTE_REGISTERS_PER_BLOCK);
  p->warpSize = 32;
  p->memPitch = static_cast<size_t>(get(CU_DEVICE_ATTRIBUTE_MAX_PITCH));
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = card->major;
  p->minor = card->minor;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = card->multiprocessors;
  p->integrated = 0;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->ECCEnabled = 1;
  p->pciBusID = get(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = card->memory_bus_width_bits;
  p->l2CacheSize = card->l2_cache_bytes;
  p->persistingL2CacheMaxSize = get(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE);
  p->maxThreadsPerMultiProcessor = card->max_threads_per_multiprocessor;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = static_cast<size_t>(card->shared_memory_per_multiprocessor);
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->multiGpuBoardGroupID = device;
  p->concurrentManagedAccess = 1;
  p->computePreemptionSupported = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = static_cast<size_t>(card->shared_memory_per_block_optin);
  p->accessPolicyMaxWindowSize = get(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE);
  p->reservedSharedMemPerBlock = 1024;
  p->hostRegisterSupported = 1;
  p->sparseCudaArraySupported = 1;
  p->hostRegisterReadOnlySupported = 1;
  p->memoryPoolsSupported = 1;
  p->memoryPoolSupportedHandleTypes = get(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES);
  p->deferredMappingCudaArraySupported = 1;
  p->ipcEventSupported = 1;
  p->clusterLaunch = card->max_cluster_size > 0;
  p->unifiedFunctionPointers = 1;
  p->maxBlocksPerMultiProcessor = card->max_blocks_per_multiprocessor;
  p->gpuDirectRDMAWritesOrdering = 0;
  p->hostNativeAtomicSupported = 0;
  p->pageableMemoryAccess = 0;
}

}  // namespace simgpu
