// LD_PRELOAD'ed before libmemtrace.so: makes the writes to one file fail as a full disk
// does, without root. Writes to a file whose path contains $FAILING_WRITE_MATCH succeed
// until $FAILING_WRITE_BYTES bytes have gone to it (the last one short, as a file system
// fills), then fail with ENOSPC. With FAILING_WRITE_CHAOS=1 every write before that is
// also interrupted (EINTR) or cut short at random, as slow devices and signals do.
// fallocate, which a mapped trace extends its file with before it writes into the mapping
// (tracer/recorder/trace_file.h), fails with ENOSPC past the same number of bytes.
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>

namespace {

long g_written = 0;
unsigned g_random = 12345;

bool matches(int fd) {
  const char* match = getenv("FAILING_WRITE_MATCH");
  if (!match || !*match) return false;
  char link[64], path[4096];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t size = readlink(link, path, sizeof(path) - 1);
  if (size <= 0) return false;
  path[size] = '\0';
  return strstr(path, match) != nullptr;
}

// How many of `wanted` bytes this call may write; -1 (errno set) to fail it.
ssize_t allowance(size_t wanted) {
  const char* budget_text = getenv("FAILING_WRITE_BYTES");
  long budget = budget_text ? atol(budget_text) : 0;
  const char* chaos = getenv("FAILING_WRITE_CHAOS");
  if (chaos && *chaos == '1') {
    g_random = g_random * 1103515245u + 12345u;
    unsigned roll = (g_random >> 16) % 4;
    if (roll == 0) {
      errno = EINTR;
      return -1;
    }
    if (roll == 1 && wanted > 1) wanted /= 2;
  }
  if (g_written >= budget) {
    errno = ENOSPC;
    return -1;
  }
  size_t left = static_cast<size_t>(budget - g_written);
  return static_cast<ssize_t>(wanted < left ? wanted : left);
}

// Cuts `iov` to `bytes` in total; returns the count of entries used.
int cut(const iovec* iov, int count, size_t bytes, iovec* out) {
  int used = 0;
  for (int i = 0; i < count && bytes > 0; ++i, ++used) {
    out[i] = iov[i];
    if (out[i].iov_len > bytes) out[i].iov_len = bytes;
    bytes -= out[i].iov_len;
  }
  return used;
}

template <typename Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

size_t total(const iovec* iov, int count) {
  size_t sum = 0;
  for (int i = 0; i < count; ++i) sum += iov[i].iov_len;
  return sum;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) ssize_t pwritev(int fd, const iovec* iov,
                                                                  int count, off_t offset) {
  static auto next = real<ssize_t (*)(int, const iovec*, int, off_t)>("pwritev");
  if (!matches(fd) || count > 64) return next(fd, iov, count, offset);
  ssize_t allowed = allowance(total(iov, count));
  if (allowed < 0) return -1;
  iovec part[64];
  ssize_t written = next(fd, part, cut(iov, count, static_cast<size_t>(allowed), part), offset);
  if (written > 0) g_written += written;
  return written;
}

extern "C" __attribute__((visibility("default"))) ssize_t writev(int fd, const iovec* iov,
                                                                 int count) {
  static auto next = real<ssize_t (*)(int, const iovec*, int)>("writev");
  if (!matches(fd) || count > 64) return next(fd, iov, count);
  ssize_t allowed = allowance(total(iov, count));
  if (allowed < 0) return -1;
  iovec part[64];
  ssize_t written = next(fd, part, cut(iov, count, static_cast<size_t>(allowed), part));
  if (written > 0) g_written += written;
  return written;
}

extern "C" __attribute__((visibility("default"))) ssize_t write(int fd, const void* data,
                                                                size_t size) {
  static auto next = real<ssize_t (*)(int, const void*, size_t)>("write");
  if (!matches(fd)) return next(fd, data, size);
  ssize_t allowed = allowance(size);
  if (allowed < 0) return -1;
  ssize_t written = next(fd, data, static_cast<size_t>(allowed));
  if (written > 0) g_written += written;
  return written;
}

extern "C" __attribute__((visibility("default"))) int fallocate(int fd, int mode, off_t offset,
                                                                off_t length) {
  static auto next = real<int (*)(int, int, off_t, off_t)>("fallocate");
  if (matches(fd)) {
    const char* budget_text = getenv("FAILING_WRITE_BYTES");
    long budget = budget_text ? atol(budget_text) : 0;
    if (offset + length > budget) {
      errno = ENOSPC;
      return -1;
    }
  }
  return next(fd, mode, offset, length);
}

extern "C" __attribute__((visibility("default"))) int fallocate64(int fd, int mode, off_t offset,
                                                                  off_t length) {
  return fallocate(fd, mode, offset, length);
}
