#include "tracer/recorder/python_stack.h"

#include <dlfcn.h>
#include <stdio.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tracer/common/flat_map.h"
#include "tracer/recorder/arena.h"
#include "tracer/recorder/config.h"
#include "tracer/recorder/python_layouts.h"
#include "tracer/recorder/recorder_state.h"

namespace memtrace::python {
namespace {

using Api = PythonState::Api;
using Walker = PythonState::Walker;
using RawFrameHash = PythonState::RawFrameHash;
using DirectWalk = PythonState::DirectWalk;
constexpr size_t kDeathSlots = PythonState::kDeathSlots;
constexpr size_t kMaxHiddenCodes = PythonState::kMaxHiddenCodes;

// The Python side's state is the recorder's (Recorder::python; Note [One recorder state]).
inline PythonState& state() {
  return detail::g_recorder.python;
}

// Note [Python frames without the GIL]
// PyTorch's Python bindings release the GIL around every ATen op, so the allocations a model
// makes reach us on a thread that holds its Python frames but not the GIL. We read that
// thread's own frame chain directly, from its thread state, with the layout of the running
// CPython (python_layouts.h, checked against every CPython's headers by the tests), and
// never call into the interpreter. Why that is safe:
//  - The thread is ours for the length of the hook: it is inside a C call (the op), so its
//    chain cannot change. Its thread state is found without the GIL: PyGILState's
//    thread-specific key holds it (PyGILState_GetThisThreadState reads the key, nothing else).
//    Frames other threads push or pop are on their own chains; a frame object another thread
//    materializes for one of ours (sys._current_frames, a profiler) only writes a field we do
//    not read. A generator or coroutine running on this thread is in this chain, kept alive
//    by its caller's reference, and no other thread can resume it while it runs.
//  - Every frame's code object is a strong reference of the frame (f_code / f_executable), so
//    it lives until the frame is gone: after the hook. The fields we read of it (file name,
//    name, first line, line table) and the str and bytes objects they point to are
//    immutable; the specializing interpreter and sys.monitoring rewrite the bytecode, never
//    them. The GC moves nothing; it cannot free what a live frame holds.
//  - A code object's address can be reused once it is freed, and we do not own a reference
//    (taking one without the GIL would race the interpreter's own, non-atomic counts). So a
//    frame is known by its code object's address together with an identity that changes when
//    a code object at that address dies (Note [Code objects that die]).
//  - The file:line:function of a new (code, instruction) is resolved right there, under the
//    recorder's lock, from those immutable fields: the strings are copied out of the str
//    objects' own characters (never their cached UTF-8, which another thread may be
//    writing), and the line comes from CPython's _PyCode_CheckLineNumber over the line table,
//    which reads the table and nothing else (PyCode_Addr2Line would be the same call, but
//    3.11's reads a lazily built line array another thread may be filling).
//  - Finalization: once Py_IsFinalizing() says so, no walk starts (the thread states of
//    daemon threads are freed then). A walk already under way when another thread starts
//    finalizing finishes within microseconds on memory freed no earlier than after that
//    thread has deleted every other thread state: the one race left, as in PyTorch's own
//    frame capture.
//  - Sub-interpreters: a thread's key holds the thread state it first had (the main
//    interpreter's); while it runs code of another interpreter, the walk reads the frames that
//    entered it, which are alive and suspended.
//  - Free-threaded builds (3.13t) have no GIL to release: every thread runs at once, but still
//    only the thread itself pushes and pops its frames, and code objects, str and bytes stay
//    immutable; their objects have a longer header, so they have layouts of their own
//    (python_layouts.h), told apart by a function only they export. --with-trace-refs builds
//    lay objects out differently too: the check of PyCode_Type's type below tells them apart,
//    and on them, as on a CPython whose layout we do not know, the walker says so once and only
//    walks threads that hold the GIL, through the public API.
// Every frame's code object is checked to be a code object (its type) before anything else
// of it is read; a frame that fails the check means the layout is wrong: the walk returns
// nothing, says so once, and later stacks are walked through the public API.
// Frames are skipped exactly as PyFrame_GetBack skips them (_PyFrame_IsIncomplete: owned by
// the C stack, or not yet past the code's first traceable instruction), and the position is
// PyFrame_GetLasti's (2 * code units from the start; 3.10: f_lasti * 2).

constexpr MemtracePythonLayout kLayouts[] = {MEMTRACE_PYTHON_LAYOUTS};
constexpr size_t kLayoutCount = sizeof(kLayouts) / sizeof(kLayouts[0]);

template <typename Fn>
bool lookUp(Fn* slot, const char* name) {
  *slot = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  return *slot != nullptr;
}

template <typename T>
T field(const void* base, int32_t offset) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + offset, sizeof(T));
  return value;
}

// Note [Code objects that die]
// The frame cache, and each thread's cache of its last stack, know a frame by its code
// object's address (RawFrame): an address the next code object often gets once the first one
// dies. Programs make and drop code objects all day (torch.compile and dynamo's recompiles,
// torch.fx's generated forwards, exec, code.replace): seen before this, 1,999 of 2,000
// allocations of a code.replace() loop were named after its first function. A reference to
// each code object would keep its address from being reused, but one cannot be taken without
// the GIL (the counts are not atomic; a lost update frees a live object), nor dropped on the
// allocating thread without it. Instead the recorder is told when a code object dies:
// PyCode_Type's tp_dealloc is replaced, once, by codeDeallocCountingDeath, which bumps the
// counter of the code object's address slot (state().code_deaths, one of kDeathSlots) and then
// calls CPython's own code_dealloc with the same argument on the same thread. The identity of a
// frame (RawFrame::identity) is its slot's count when it was walked, so a code object born at
// a dead one's address has another identity than every frame cached for the dead one: the
// count was raised before the memory was freed, and the new object can only run (and be
// walked) after it was allocated again, under the GIL, which orders the two. A live code
// object's count also moves when another one of its slot dies: its next event misses the
// cache and resolves it once more (correct, a few hundred ns). One load per frame, as the
// line table's address it replaces (bench/python_walk_instructions.py, docs/performance.md).
// Nothing the program can see changes: the slot of a static type that no Python code can read
// or set, called with the same object; the library is never unloaded (-z nodelete), so the
// pointer stays valid for the life of the process. Deaths are counted wherever frames are
// walked directly (the same layout condition); the public API's walk keeps every code object
// it names alive instead (resolveFrame), which it may: it holds the GIL.

inline size_t deathSlotOf(const void* code) {
  // Code objects are 16-byte aligned, a few hundred bytes each: the address bits above the
  // alignment tell apart every code object of a 256 KiB stretch of the heap.
  return (reinterpret_cast<uintptr_t>(code) >> 4) & (kDeathSlots - 1);
}

void codeDeallocCountingDeath(void* code) {
  state().code_deaths[deathSlotOf(code)].fetch_add(1, std::memory_order_release);
  state().code_deaths_total.fetch_add(1, std::memory_order_release);
  state().code_dealloc(code);
}

const MemtracePythonLayout* layoutOf(unsigned long version_hex, bool free_threaded) {
  if ((version_hex >> 24) != 3) return nullptr;
  uint32_t minor = (version_hex >> 16) & 0xff;
  for (const MemtracePythonLayout& layout : kLayouts)
    if (layout.minor == minor && (layout.free_threaded != 0) == free_threaded) return &layout;
  return nullptr;
}

// Whether the running build lays objects out as `layout` says: a static type object's type is
// PyType_Type at its ob_type offset (8 in the default build; 24 free-threaded, and in a
// --with-trace-refs build, which no layout describes).
bool objectsLaidOutAs(const MemtracePythonLayout& layout) {
  return state().api.PyCode_Type && state().api.PyType_Type &&
         field<const void*>(state().api.PyCode_Type, layout.object_type) == state().api.PyType_Type;
}

// "3.9.18", from Py_GetVersion (a string made once, at start-up); "?" without it.
void pythonVersion(char* out, size_t size) {
  auto get_version = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "Py_GetVersion"));
  const char* text = get_version ? get_version() : "?";
  size_t length = strcspn(text, " ");
  snprintf(out, size, "%.*s", static_cast<int>(length < size ? length : size - 1), text);
}

void sayLayoutUnknownOnce(const char* why) {
  if (state().layout_failed_said.exchange(true)) return;
  char version[32], line[320];
  pythonVersion(version, sizeof(version));
  snprintf(line, sizeof(line),
           "CPython %s: %s (3.10-3.13 and 3.13t are known): Python lines are recorded only for "
           "allocations made while holding the GIL, and PyTorch's ops release it",
           version, why);
  warn(line);
}

// A Python too old for the API the walkers use (before 3.9): said once, when it runs.
void sayUnsupportedOnce() {
  if (!state().unsupported_python_initialized || !state().unsupported_python_initialized() ||
      state().layout_failed_said.exchange(true))
    return;
  char version[32], line[200];
  pythonVersion(version, sizeof(version));
  snprintf(line, sizeof(line),
           "CPython %s is not supported (3.10-3.13 are): no Python line is recorded", version);
  warn(line);
}

// Note [Code objects that die]: from now on every code object's death is counted. Done once,
// when the API is loaded: before Python starts (LD_PRELOAD), or by a thread that holds the GIL
// (the package's dlopen), so that every thread that frees a code object later (with the GIL)
// sees state().code_dealloc set before it calls through the new slot.
bool countCodeDeaths() {
  if (!state().layout || !objectsLaidOutAs(*state().layout)) return false;
  using Dealloc = void (*)(void*);
  auto* slot = reinterpret_cast<Dealloc*>(
      const_cast<char*>(static_cast<const char*>(state().api.PyCode_Type)) +
      state().layout->type_dealloc);
  Dealloc current = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!current) return false;
  if (current != &codeDeallocCountingDeath) {
    state().code_dealloc = current;
    __atomic_store_n(slot, &codeDeallocCountingDeath, __ATOMIC_RELEASE);
  }
  return true;
}

bool isCode(const void* object, const MemtracePythonLayout& layout) {
  return object && field<const void*>(object, layout.object_type) == state().api.PyCode_Type;
}

// What tells a code object from a dead one that had its address (Note [Code objects that
// die]): the deaths counted at its address slot. Never 0: 0 is a frame the API walked. One load
// a frame: the walk's cost is in loads (bench/python_walk_instructions.py).
inline uint32_t identityOf(const void* code) {
  return (state().code_deaths[deathSlotOf(code)].load(std::memory_order_relaxed) << 1) | 1;
}

// Note [Frames memtrace hides]
// memtrace's own Python code can run between the program's line and the allocation it causes:
// on the simulated card every ATen op goes through the dispatch mode of Note [Known values on
// the simulated card] (python/mem_tracer/simulated_gpu/values.py), whose __torch_dispatch__ calls
// the op through torch's OpOverload.__call__. Those frames are not the program's: with them,
// the innermost frame of every allocation would be torch/_ops.py's. So the package names their
// code objects (memtrace_hide_python_code) and every stack captured leaves them out, as if the
// program had called the op itself; a thread left with no frame of its own (autograd's) then
// borrows its lent stack as before (Note [Stacks lent to threads without Python]). The table is
// small and read without a lock: entries are only added, each before the count that shows it.

// Whether `code` is one of the first `hidden` hidden code objects.
inline bool isHidden(const void* code, size_t hidden) {
  for (size_t j = 0; j < hidden; ++j)
    if (code == state().hidden_codes[j].load(std::memory_order_relaxed)) return true;
  return false;
}

// `frames` less the hidden ones, in order; returns how many are left.
size_t dropHidden(RawFrame* frames, size_t count) {
  size_t hidden = state().hidden_count.load(std::memory_order_acquire);
  if (hidden == 0) return count;
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i)
    if (!isHidden(frames[i].code, hidden)) frames[kept++] = frames[i];
  return kept;
}

// Note [Python stacks flat in depth]
// A thread's stack between two of its events mostly differs in its innermost frames: the outer
// ones are the callers of the last capture, still suspended where they were. Walking them again
// cost ~43 instructions a frame, and the writer ~17 more comparing them with its cached stack
// (bench/cost.py's depth table, docs/performance.md). So each thread keeps the chain of its last
// walk (WalkCache), and a walk stops at the first frame from which the chain out to the
// outermost frame is the cached one, reusing the frames the last walk made of it.
// What identifies a frame? Nothing CPython keeps, on any layout: a frame is freed when it
// returns, and the next frame pushed at the same depth gets its memory (3.11 on: the thread's
// data stack; 3.10: the frame free list and each code object's zombie frame), with the same
// code and, if called from the same line, the same instruction. A caller that returned to a
// loop and called again from another line leaves its callee's frame at the same address and
// instruction as before, with a changed caller (tests/preload/scripts/stack_reuse.py: a walk
// that stopped there named the old caller's line). So no frame alone proves the frames outside
// it unchanged; the walk instead compares the whole rest of the chain with the cached one, frame
// by frame, out to the outermost: each frame's address and instruction (3.11 on, a pointer into
// its code object's own bytecode, which tells the code object too while it lives; 3.10, f_lasti
// and f_code), until both chains end together. Equal instructions all the way out give equal
// output: a frame's position and its code object are functions of them, and whether it is
// skipped (an entry frame of the C stack; a frame before its first traceable instruction) of its
// code and position, as no caller's frame is still before RESUME. Where to try is a guess
// (height_of_address: a frame's height in the cached chain, by its address; past a frame that is
// not there or whose own instruction moved the walk tries again; past a deeper difference it
// walks on untried to the frame where the two chains parted, and tries again from there: a call
// from another line of a caller further out, the next module after a sibling, stops at that
// caller instead of walking the whole stack, and each frame is compared by one try at most, the
// one a try starts at twice), so a freed and reused frame, a generator resumed from another
// caller, recursion at another depth, or another thread can only make the try fail, never pass.
// The cached output also holds each frame's identity (Note [Code objects that die]) and leaves
// out the hidden frames (Note [Frames memtrace hides]): the tail is reused only if no code object
// died and no code object was hidden since it was made.
// The comparison costs instructions a frame, not none, for the reason above: 5.0 a frame beyond
// 10 in all on 3.11, all of it the comparison (7.0 while it compared the two words apart and
// counted its frames, 8.7 while the reused frames were copied, Note [The reused tail read in
// place] in python_stack.h; 10.7 when it indexed three arrays a frame in a loop counted frame by
// frame; Note [The chain compared a frame at a time]; docs/performance.md's depth table): issue
// 52's goal, 5, is met on 3.11 (6 a frame on 3.12 and 3.13, about 9 on 3.10: read from the
// instructions GCC emits, not counted; the bench runs 3.11).
// Native stacks have no such cache: Note [Native stacks walked whole] (native_stack.cpp). The
// public API's walk (a thread that holds the GIL, an unknown layout) keeps none.
inline uint32_t addressSlot(const void* frame) {
  return static_cast<uint32_t>((reinterpret_cast<uintptr_t>(frame) * 0x9E3779B97F4A7C15ull) >> 56);
}

// What a frame's output is made of besides its code object (which tells the code object too
// from 3.11 on): its instruction pointer, or f_lasti (3.10).
template <size_t index>
inline uintptr_t instructionOf(const void* frame) {
  constexpr const MemtracePythonLayout& layout = kLayouts[index];
  if constexpr (layout.frame_is_object)
    return static_cast<uint32_t>(field<int>(frame, layout.frame_instruction));
  else
    return field<uintptr_t>(frame, layout.frame_instruction);
}

enum class Chain { kUnchanged, kFrameMoved, kChanged };

// Whether the layout keeps a frame's caller and its instruction pointer side by side, in that
// order, as the cached chain keeps them (WalkCache::Link): 3.11's _PyInterpreterFrame.
template <size_t index>
constexpr bool kLinkAdjacent =
    kLayouts[index].frame_is_object == 0 &&
    kLayouts[index].frame_instruction == kLayouts[index].frame_previous + 8;

// After a frame of the chain differed from its cached link (Note [The chain compared a frame at
// a time]): what compareChain answers. `link` is the cached link of `frame`'s height.
// `first` is the frame tried (at `height`); every frame outside it is its height + 1's cached
// caller, compared equal to the walked one.
template <size_t index>
[[gnu::noinline, gnu::cold]] Chain chainPartedAt(const void* first, const WalkCache::Link* link,
                                                 size_t height, const WalkCache& cache,
                                                 const void** parted) {
  constexpr const MemtracePythonLayout& layout = kLayouts[index];
  size_t k = static_cast<size_t>(link - cache.chain);
  const void* frame = k == height ? first : cache.chain[k + 1].previous;
  bool instruction_differs = instructionOf<index>(frame) != link->instruction;
  bool code_differs = false;
  if constexpr (layout.frame_is_object)
    code_differs = field<const void*>(frame, layout.frame_code) != cache.chain_code[k];
  const void* previous = field<const void*>(frame, layout.frame_previous);
  if (k == height) {
    if (instruction_differs) return Chain::kFrameMoved;  // the frame tried went on: try its caller
  } else if (instruction_differs || code_differs) {
    *parted = frame;
    return Chain::kChanged;
  }
  if (!code_differs && k == 0 && !previous) return Chain::kUnchanged;  // both chains end here
  *parted = previous;
  return Chain::kChanged;
}

// One frame of the chain against its cached link: whether its caller, its instruction and (3.10)
// its code object differ.
template <size_t index>
inline bool linkDiffers(const void* frame, const WalkCache::Link* link, const void* code) {
  constexpr const MemtracePythonLayout& layout = kLayouts[index];
  if (instructionOf<index>(frame) != link->instruction) return true;
  if constexpr (layout.frame_is_object)
    if (field<const void*>(frame, layout.frame_code) != code) return true;
  return field<const void*>(frame, layout.frame_previous) != link->previous;
}

// Whether the chain from `frame` out is the cached chain from `height` down to the outermost
// frame (Note [Python stacks flat in depth]): kFrameMoved when `frame` itself is not the cached
// frame at that height or went on to another instruction (an inner frame: cheap, try its
// caller), kChanged when a frame outside it differs; *parted is then the frame of the walked
// chain where the two parted (the first that differs, or its caller: where to try again).
// Note [The chain compared a frame at a time]
// The loop is the cost a frame of a capture whose outer frames have not changed, so it is
// written for the fewest instructions. Each frame is compared with its height's cached link
// (WalkCache::Link: its caller's address and its instruction) before anything is read through
// its caller (every cached caller but the outermost frame's is a live frame's address, so a chain
// that ends early, or differs, is caught before it could be followed); then the walk goes on to
// the caller. The loop has no count: the outermost link's caller is stored as kChainEnd, which no
// frame's caller is (a frame's caller is a frame or nullptr), so the outermost frame always
// differs from its link and leaves the loop; that end (its caller nullptr, its instruction the
// cached one) differs from the link by exactly (kChainEnd, 0), which no other link can (cached
// callers are aligned), and is told so inline; any other difference goes to chainPartedAt, out
// of line, which finds the frame that differed from the link's height (the frame tried, or the
// cached caller of the height above: equal to the walked one, or the loop would have left
// before). The frame tried is checked for a moved instruction before the loop (the common miss
// of the inner frames, without a call). The body is unrolled at constant offsets
// from one pointer into the links, so a chain shorter than a block pays no loop control at all,
// a taller one two instructions a block. On x86-64 with SSE4.1 (checked at load; every x86-64 CPU
// since 2008 has it) the frame's two words are gathered into one 16-byte register and compared
// with the link in one (compareChainPairs, 128 frames a block, inlined into a walk compiled for
// SSE4.1, walkDirectlyPairs): where the layout keeps them side
// by side as the link does (3.11's previous and prev_instr) one load, the xor with the link, the
// test, the branch, and the caller moved into the register the next frame is read through: 5
// instructions a frame (GCC 12, -O2, counted: docs/performance.md's depth table); where they are
// apart (3.12, 3.13: previous at 8, instr_ptr at 56) two loads, 6. Elsewhere (3.10, whose frames
// compare their code object too; other CPUs) each word is a load, a compare and a branch
// (compareChain, 16 frames a block). Comparing only the instructions (each names its code object
// from 3.11 on) would leave the caller to be tested for nullptr before it is read through, a
// test and a branch: as many instructions as comparing it with the cached caller, which also
// keeps the proof of Note [Python stacks flat in depth] as it was: the same frames, at the same
// instructions, all the way out, the same words compared as when the loop counted its frames
// (only their order within a frame changed).
constexpr size_t kChainBlock = 128;
constexpr size_t kScalarChainBlock = 16;

template <size_t index>
Chain compareChain(const void* frame, size_t height, const WalkCache& cache, const void** parted) {
  if (frame != cache.chain_frame[height] ||
      instructionOf<index>(frame) != cache.chain[height].instruction)
    return Chain::kFrameMoved;  // inner frames moved on: the common miss, without a call
  const void* first = frame;
  const WalkCache::Link* link = cache.chain + height;
  const void* const* code = cache.chain_code + height;
  for (;;) {
#pragma GCC unroll 16
    for (size_t j = 0; j < kScalarChainBlock; ++j) {
      if (linkDiffers<index>(frame, link - j, code[-static_cast<ptrdiff_t>(j)]))
        return chainPartedAt<index>(first, link - j, height, cache, parted);
      frame = link[-static_cast<ptrdiff_t>(j)].previous;
    }
    link -= kScalarChainBlock;
    code -= kScalarChainBlock;
  }
}

#if defined(__x86_64__)
// compareChain where the layout's caller and instruction are side by side (kLinkAdjacent): each
// frame's two words loaded and compared with its link at once.
template <size_t index>
[[gnu::target("sse4.1")]] inline Chain compareChainPairs(const void* frame, size_t height,
                                                         const WalkCache& cache,
                                                         const void** parted) {
  constexpr const MemtracePythonLayout& layout = kLayouts[index];
  static_assert(layout.frame_is_object == 0);
  if (frame != cache.chain_frame[height] ||
      instructionOf<index>(frame) != cache.chain[height].instruction)
    return Chain::kFrameMoved;  // inner frames moved on: the common miss, without a call
  const void* first = frame;
  const WalkCache::Link* link = cache.chain + height;
  const WalkCache::Link* at;
  __m128i differ;
  for (;;) {
#pragma GCC unroll 128
    for (size_t j = 0; j < kChainBlock; ++j) {
      const char* base = static_cast<const char*>(frame);
      __m128i words;
      if constexpr (kLinkAdjacent<index>)
        words = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + layout.frame_previous));
      else
        words = _mm_castpd_si128(_mm_loadh_pd(
            _mm_castsi128_pd(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(base + layout.frame_previous))),
            reinterpret_cast<const double*>(base + layout.frame_instruction)));
      // The caller taken before the words are compared, so that the compare may overwrite them.
      frame = reinterpret_cast<const void*>(_mm_cvtsi128_si64(words));
      differ = _mm_xor_si128(words, _mm_load_si128(reinterpret_cast<const __m128i*>(link - j)));
      if (!_mm_testz_si128(differ, differ)) {
        at = link - j;
        goto differs;
      }
    }
    link -= kChainBlock;
  }
differs:
  // Both chains end here: the outermost link (caller kChainEnd, 1) against a frame whose caller
  // is nullptr at the same instruction differs by exactly (1, 0); no other link can (a frame's
  // caller is aligned or nullptr, a cached caller aligned).
  differ = _mm_xor_si128(differ, _mm_cvtsi64_si128(1));
  if (_mm_testz_si128(differ, differ)) return Chain::kUnchanged;
  return chainPartedAt<index>(first, at, height, cache, parted);
}
#endif

// After a direct walk with a cache (`walked` frames made of `visits` frames visited): the cached
// tail appended when the walk stopped at `tail_height` of the cached chain, and the chain
// remembered for the next walk when this one reached the outermost frame. Returns the count.
// `with_code`: the layout's frames name their code object apart from their instruction (3.10).
template <bool with_code>
size_t rememberWalk(WalkCache* cache, RawFrame* frames, size_t max, size_t walked, size_t visits,
                    size_t tail_height, bool reached_outermost, uint64_t deaths, size_t hidden) {
  ++cache->serial;
  cache->frames_serial = cache->serial;
  cache->same_outer = 0;
  size_t total = walked;
  size_t reused = 0;
  size_t top = visits - 1;  // the height of the innermost frame visited (the outermost's is 0)
  bool tail_in_place = false;
  if (tail_height != SIZE_MAX) {
    size_t tail = cache->chain_outputs_through[tail_height];
    size_t room = max - walked;
    size_t copied = tail < room ? tail : room;
    total = walked + copied;
    reached_outermost = copied == tail;  // else the outermost frames were left out
    top = tail_height + visits;
    // The reused tail is where it was in the cached output when the inner part kept its length:
    // left there (Note [The reused tail read in place]) when the chain is kept below.
    tail_in_place =
        reached_outermost && cache->output_count - tail == walked && top < kMaxWalkVisits;
    if (tail_in_place)
      cache->tail_pending = tail;
    else
      std::memcpy(frames + walked, cache->output + cache->output_count - tail,
                  copied * sizeof(RawFrame));
    if (reached_outermost) cache->same_outer = reused = tail;
  }
  if (!reached_outermost || top + 1 == 0 || top >= kMaxWalkVisits) {
    cache->chain_count = 0;
    return total;
  }
  // Each visited frame's caller is the next frame visited, or below the last one the frame the
  // walk stopped at (visit_frame[visits]): the cached frame at tail_height, compared equal, or
  // none past the outermost.
  for (size_t v = 0; v < visits; ++v) {
    size_t height = top - v;
    const void* frame = cache->visit_frame[v];
    cache->chain_frame[height] = frame;
    cache->chain[height] = WalkCache::Link{cache->visit_frame[v + 1], cache->visit_instruction[v]};
    if constexpr (with_code) cache->chain_code[height] = cache->visit_code[v];
    cache->chain_outputs_through[height] =
        static_cast<uint16_t>(total - cache->visit_outputs_before[v]);
    cache->height_of_address[addressSlot(frame)] = static_cast<uint16_t>(height + 1);
  }
  cache->chain[0].previous = kChainEnd;  // the walk reached the outermost frame: its caller
  cache->chain_count = top + 1;
  std::memcpy(cache->output, frames, (tail_in_place ? walked : total) * sizeof(RawFrame));
  cache->output_count = total;
  cache->code_deaths = deaths;
  cache->hidden = hidden;
  return total;
}

// Note [Python frames without the GIL]: the calling thread's frames, innermost first, less the
// hidden ones (Note [Frames memtrace hides]). Returns the count, or SIZE_MAX when the innermost
// frame does not hold a code object where the layout says (a layout that is wrong fails there;
// resolveFrame checks each new frame again before it reads anything through it). One instance
// per CPython version, so that every offset is a constant of the code (the walk costs ~25
// instructions a frame). With `cache`, the frames outside the first one met again are the last
// walk's (Note [Python stacks flat in depth]).
// `pairs`: compareChainPairs compares the chain (SSE4.1: walkDirectlyPairs, which inlines it).
template <size_t index, bool pairs>
[[gnu::always_inline]] inline size_t walkDirectly(const void* thread_state, RawFrame* frames,
                                                  size_t max, WalkCache* cache) {
  constexpr const MemtracePythonLayout& layout = kLayouts[index];
  const void* frame = thread_state;
  if constexpr (layout.thread_cframe >= 0) {
    frame = field<const void*>(thread_state, layout.thread_cframe);
    if (!frame) return 0;
  }
  frame = field<const void*>(frame, layout.current_frame);
  size_t walked = 0;
  // Frames skipped (entry frames of the C stack, frames not started yet) are visited too, and
  // bounded: at most one of each per recorded frame, and one at the top. A chain that goes on
  // past that (a layout that lies, a cycle) ends the walk rather than looping.
  if (max == 0) return 0;
  size_t hidden = state().hidden_count.load(std::memory_order_acquire);
  uint64_t deaths = state().code_deaths_total.load(std::memory_order_relaxed);
  bool try_cache =
      cache && cache->chain_count > 0 && cache->code_deaths == deaths && cache->hidden == hidden;
  size_t tail_height = SIZE_MAX;  // the cached chain's height where the rest was met again
  // After a deep try failed: the walked frame where the chains parted, where tries start again
  // (nullptr: none; never a frame of the loop until a try has set it).
  const void* parted = nullptr;
  size_t visits = 0;
  size_t visits_left = 2 * max + 2;
  for (; frame && visits_left > 0;
       frame = field<const void*>(frame, layout.frame_previous), --visits_left) {
    if (!try_cache && frame == parted) try_cache = true;
    if (try_cache) {
      uint32_t height = cache->height_of_address[addressSlot(frame)];
      if (height != 0 && height <= cache->chain_count) {
        Chain chain;
#if defined(__x86_64__)
        if constexpr (pairs)
          chain = compareChainPairs<index>(frame, height - 1, *cache, &parted);
        else
#endif
          chain = compareChain<index>(frame, height - 1, *cache, &parted);
        if (chain == Chain::kUnchanged) {
          tail_height = height - 1;
          break;
        }
        // A failed deep try compared the frames out to where the chains parted: the walk tries
        // again only from there, so that tries compare each frame once (and the one they start
        // at twice), never the chain's length again and again.
        try_cache = chain == Chain::kFrameMoved;
      }
    }
    if (cache) {
      cache->visit_frame[visits] = frame;
      cache->visit_instruction[visits] = instructionOf<index>(frame);
      if constexpr (layout.frame_is_object)
        cache->visit_code[visits] = field<const void*>(frame, layout.frame_code);
      cache->visit_outputs_before[visits] = static_cast<uint16_t>(walked);
      ++visits;
    }
    int position;
    const char* code;
    if constexpr (layout.frame_is_object) {
      code = field<const char*>(frame, layout.frame_code);
      if (walked == 0 && !isCode(code, layout)) return SIZE_MAX;
      int lasti = field<int>(frame, layout.frame_instruction);
      position = lasti < 0 ? -1 : 2 * lasti;
    } else {
      char owner = field<char>(frame, layout.frame_owner);
      if (owner == layout.owned_by_c_stack) continue;
      code = field<const char*>(frame, layout.frame_code);
      if (walked == 0 && !isCode(code, layout)) return SIZE_MAX;
      const char* units = code + layout.code_units;
      const char* instruction = field<const char*>(frame, layout.frame_instruction);
      if (owner != layout.owned_by_generator &&
          instruction < units + 2 * field<int>(code, layout.code_first_traceable))
        continue;  // not started yet: PyFrame_GetBack skips it too
      ptrdiff_t bytes_in = instruction - units;
      position = bytes_in < 0 ? -1 : static_cast<int32_t>(bytes_in & ~ptrdiff_t{1});
    }
    if (hidden != 0 && isHidden(code, hidden)) continue;
    frames[walked] = RawFrame{code, position, identityOf(code)};
    if (++walked == max) break;
  }
  if (!cache) return walked;
  cache->visit_frame[visits] = frame;  // the last visited frame's caller, when the chain is kept
  constexpr bool with_code = layout.frame_is_object != 0;
  return rememberWalk<with_code>(cache, frames, max, walked, visits, tail_height,
                                 tail_height == SIZE_MAX && !frame, deaths, hidden);
}

template <size_t index>
size_t walkDirectlyPlain(const void* thread_state, RawFrame* frames, size_t max, WalkCache* cache) {
  return walkDirectly<index, false>(thread_state, frames, max, cache);
}

#if defined(__x86_64__)
template <size_t index>
[[gnu::target("sse4.1")]] size_t walkDirectlyPairs(const void* thread_state, RawFrame* frames,
                                                   size_t max, WalkCache* cache) {
  return walkDirectly<index, true>(thread_state, frames, max, cache);
}
#endif

// The walk for kLayouts[index]: comparing each frame's two words at once where they are side by
// side and the CPU has SSE4.1 (Note [The chain compared a frame at a time]).
template <size_t index>
DirectWalk directWalkAt() {
#if defined(__x86_64__)
  // __builtin_cpu_supports reads what libgcc's constructor of priority 101 filled, before any
  // of memtrace's (default priority) can find the layout.
  if constexpr (kLayouts[index].frame_is_object == 0)
    if (__builtin_cpu_supports("sse4.1")) return &walkDirectlyPairs<index>;
#endif
  return &walkDirectlyPlain<index>;
}

template <size_t... index>
DirectWalk directWalkOf(const MemtracePythonLayout* layout, std::index_sequence<index...>) {
  DirectWalk walk = nullptr;
  ((&kLayouts[index] == layout ? (walk = directWalkAt<index>()) : walk), ...);
  return walk;
}

// The public API's walk, from the thread's top frame object, which it releases. The GIL is
// held. The code objects it names are kept alive by resolveFrame (identity 0).
size_t walkWithApi(void* frame, RawFrame* frames, size_t max) {
  size_t count = 0;
  while (frame && count < max) {
    void* code = state().api.PyFrame_GetCode(frame);  // a new reference
    int position = state().api.PyFrame_GetLasti ? state().api.PyFrame_GetLasti(frame)
                                                : state().api.PyFrame_GetLineNumber(frame);
    // The frame keeps its code object alive until resolveFrame takes its own reference.
    state().api.Py_DecRef(code);
    frames[count++] = RawFrame{code, position, 0};
    void* back = state().api.PyFrame_GetBack(frame);  // a new reference, or null
    state().api.Py_DecRef(frame);
    frame = back;
  }
  if (frame) state().api.Py_DecRef(frame);  // deeper than `max`: the outermost frames are dropped
  return count;
}

// Whether the calling thread holds the GIL. PyGILState_Check answers 1 when it cannot tell: no
// thread state machinery yet, and on 3.10 and 3.11 ever after a sub-interpreter was made
// (Py_NewInterpreter turns its check off for good). And there the current thread state
// (_PyThreadState_UncheckedGet) is the process's, the one of whichever thread holds the GIL,
// not the caller's: so on those the holder must be the caller's own thread state. From 3.12 the
// current thread state is the calling thread's own (a thread-local), set only while it holds
// the GIL (its interpreter's).
bool holdsGil() {
  void* current = state().api.PyThreadState_UncheckedGet();
  if (!current || !state().api.PyGILState_Check()) return false;
  return state().thread_state_is_thread_local ||
         current == state().api.PyGILState_GetThisThreadState();
}

bool pythonRunning() {
  return state().api_loaded.load(std::memory_order_acquire) && state().api.Py_IsInitialized() &&
         !(state().api.Py_IsFinalizing && state().api.Py_IsFinalizing());
}

// The UTF-8 of a str object, read from its own characters (Note [Python frames without the
// GIL]), copied into the arena; "?" when it is not a compact string.
void copyString(const void* text, const char** out, uint32_t* size) {
  *out = "?";
  *size = 1;
  const MemtracePythonLayout& layout = *state().layout;
  if (!text) return;
  uint32_t bits = field<uint32_t>(text, layout.unicode_state);
  uint32_t kind = (bits >> 2) & 7, compact = (bits >> 5) & 1, ascii = (bits >> 6) & 1;
  if (!compact || (kind != 1 && kind != 2 && kind != 4)) return;
  auto length = field<ssize_t>(text, layout.unicode_length);
  if (length < 0 || length > (1 << 16)) return;
  const char* characters = static_cast<const char*>(text) +
                           (ascii ? layout.ascii_object_size : layout.compact_object_size);
  if (ascii) {
    if (const char* copy =
            state().frame_arena.copyString(characters, static_cast<size_t>(length))) {
      *out = copy;
      *size = static_cast<uint32_t>(length);
    }
    return;
  }
  auto* utf8 =
      static_cast<char*>(state().frame_arena.allocate(4 * static_cast<size_t>(length) + 1));
  if (!utf8) return;
  size_t used = 0;
  for (ssize_t i = 0; i < length; ++i) {
    uint32_t c = kind == 1   ? field<uint8_t>(characters, static_cast<int32_t>(i))
                 : kind == 2 ? field<uint16_t>(characters, static_cast<int32_t>(2 * i))
                             : field<uint32_t>(characters, static_cast<int32_t>(4 * i));
    if (c < 0x80) {
      utf8[used++] = static_cast<char>(c);
    } else if (c < 0x800) {
      utf8[used++] = static_cast<char>(0xc0 | (c >> 6));
      utf8[used++] = static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      utf8[used++] = static_cast<char>(0xe0 | (c >> 12));
      utf8[used++] = static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      utf8[used++] = static_cast<char>(0x80 | (c & 0x3f));
    } else {
      utf8[used++] = static_cast<char>(0xf0 | (c >> 18));
      utf8[used++] = static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      utf8[used++] = static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      utf8[used++] = static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  *out = utf8;
  *size = static_cast<uint32_t>(used);
}

// The line of a byte offset, from the code object's line table (Note [Python frames without
// the GIL]); 0 where the instruction has none.
int lineOf(const void* code, int position) {
  const MemtracePythonLayout& layout = *state().layout;
  int first_line = field<int>(code, layout.code_first_line);
  if (position < 0) return first_line;  // PyCode_Addr2Line's answer too
  const void* table = field<const void*>(code, layout.code_line_table);
  if (!table) return 0;
  auto length = field<ssize_t>(table, layout.bytes_size);
  const auto* bytes = static_cast<const uint8_t*>(table) + layout.bytes_data;
  MemtraceAddressRange range{-1, 0, -1, {first_line, bytes, bytes + length}};
  int line = state().api.PyCode_CheckLineNumber(position, &range);
  return line < 0 ? 0 : line;
}

void resolveDirectly(const RawFrame& frame, FrameInfo* info) {
  const MemtracePythonLayout& layout = *state().layout;
  if (!isCode(frame.code, layout)) {  // never seen: the walk names only code objects' frames
    *info = FrameInfo{"?", "?", 1, 1, 0, 0, 0};
    return;
  }
  copyString(field<const void*>(frame.code, layout.code_filename), &info->file, &info->file_size);
  copyString(field<const void*>(frame.code, layout.code_name), &info->function,
             &info->function_size);
  info->line = lineOf(frame.code, frame.position);
}

void resolveWithApi(const RawFrame& frame, FrameInfo* info) {
  auto* code = const_cast<void*>(frame.code);
  auto copyAttribute = [&](const char* name, const char** out, uint32_t* size) {
    *out = "?";
    *size = 1;
    void* value = state().api.PyObject_GetAttrString(code, name);
    if (!value) {
      state().api.PyErr_Clear();
      return;
    }
    ssize_t length = 0;
    const char* utf8 = state().api.PyUnicode_AsUTF8AndSize(value, &length);
    if (utf8) {
      if (const char* copy = state().frame_arena.copyString(utf8, static_cast<size_t>(length))) {
        *out = copy;
        *size = static_cast<uint32_t>(length);
      }
    } else {
      state().api.PyErr_Clear();
    }
    state().api.Py_DecRef(value);
  };
  copyAttribute("co_filename", &info->file, &info->file_size);
  copyAttribute("co_name", &info->function, &info->function_size);
  if (state().api.PyFrame_GetLasti) {
    // An instruction without a line (some generated code) reports line 0.
    int line = frame.position >= 0 ? state().api.PyCode_Addr2Line(code, frame.position) : -1;
    info->line = line < 0 ? 0 : line;
  } else {
    info->line = frame.position;  // Python 3.10's public API gives the line itself
  }
}

}  // namespace

bool loadApi() {
  if (state().api_loaded.load(std::memory_order_acquire)) return true;
  Api api{};
  bool ok = lookUp(&api.Py_IsInitialized, "Py_IsInitialized") &&
            lookUp(&api.PyGILState_Check, "PyGILState_Check") &&
            lookUp(&api.PyGILState_GetThisThreadState, "PyGILState_GetThisThreadState") &&
            (lookUp(&api.PyThreadState_UncheckedGet, "PyThreadState_GetUnchecked") ||
             lookUp(&api.PyThreadState_UncheckedGet, "_PyThreadState_UncheckedGet")) &&
            lookUp(&api.PyThreadState_GetFrame, "PyThreadState_GetFrame") &&
            lookUp(&api.PyFrame_GetBack, "PyFrame_GetBack") &&
            lookUp(&api.PyFrame_GetCode, "PyFrame_GetCode") &&
            lookUp(&api.PyFrame_GetLineNumber, "PyFrame_GetLineNumber") &&
            lookUp(&api.PyObject_GetAttrString, "PyObject_GetAttrString") &&
            lookUp(&api.PyUnicode_AsUTF8AndSize, "PyUnicode_AsUTF8AndSize") &&
            lookUp(&api.PyErr_Clear, "PyErr_Clear") && lookUp(&api.Py_IncRef, "Py_IncRef") &&
            lookUp(&api.Py_DecRef, "Py_DecRef");
  if (!ok) {
    state().unsupported_python_initialized = api.Py_IsInitialized;  // null where no Python runs
    return false;
  }
  // Optional: with PyFrame_GetLasti frames are told apart by instruction and the line is
  // looked up once (PyCode_Addr2Line); without it (Python < 3.11) by line number.
  if (lookUp(&api.PyFrame_GetLasti, "PyFrame_GetLasti") &&
      !lookUp(&api.PyCode_Addr2Line, "PyCode_Addr2Line"))
    api.PyFrame_GetLasti = nullptr;
  lookUp(&api.PyGC_Disable, "PyGC_Disable");
  lookUp(&api.PyGC_Enable, "PyGC_Enable");
  if (!lookUp(&api.Py_IsFinalizing, "Py_IsFinalizing"))
    lookUp(&api.Py_IsFinalizing, "_Py_IsFinalizing");
  lookUp(&api.Py_Version, "Py_Version");
  lookUp(&api.PyCode_CheckLineNumber, "_PyCode_CheckLineNumber");
  lookUp(&api.PyCode_Type, "PyCode_Type");
  lookUp(&api.PyType_Type, "PyType_Type");
  // Py_Version came with 3.11; 3.10 is told by what only it lacks (PyFrame_GetLasti) and
  // has (PyGC_Enable, new in 3.10).
  unsigned long version = api.Py_Version ? *api.Py_Version
                          : !api.PyFrame_GetLasti && dlsym(RTLD_DEFAULT, "PyGC_Enable") ? 0x030A0000
                                                                                        : 0;
  state().api = api;
  state().thread_state_is_thread_local = version >= 0x030C0000;
  // Only the free-threaded build has it (Objects/object.c, under Py_GIL_DISABLED).
  bool free_threaded = dlsym(RTLD_DEFAULT, "_Py_MergeZeroLocalRefcount") != nullptr;
  state().layout = layoutOf(version, free_threaded);
  if (state().layout)
    state().direct_walk = directWalkOf(state().layout, std::make_index_sequence<kLayoutCount>());
  // Frames are walked directly only where code objects' deaths are counted (Note [Code objects
  // that die]): their identity rests on it.
  if (state().direct_walk && api.PyCode_CheckLineNumber && countCodeDeaths())
    state().walker.store(Walker::kDirect, std::memory_order_relaxed);
  state().api_loaded.store(true, std::memory_order_release);
  return true;
}

bool canWalk(bool* holds_gil) {
  *holds_gil = false;
  if (!state().api_loaded.load(std::memory_order_acquire)) {
    sayUnsupportedOnce();
    return false;
  }
  if (!pythonRunning()) return false;
  if (state().walker.load(std::memory_order_relaxed) == Walker::kDirect) return true;
  *holds_gil = holdsGil();
  if (!*holds_gil && !state().layout_failed_said.load(std::memory_order_relaxed))
    sayLayoutUnknownOnce(state().layout ? "this build lays objects out unlike the default build"
                                        : "no known frame layout");
  return *holds_gil;
}

void GcPause::pause() {
  if (state().api.PyGC_Disable) reenable_ = state().api.PyGC_Disable() == 1;
}

void GcPause::resume() {
  state().api.PyGC_Enable();
}

bool hideCode(const void* code) {
  std::lock_guard<std::mutex> lock(state().hiding);
  size_t count = state().hidden_count.load(std::memory_order_relaxed);
  for (size_t i = 0; i < count; ++i)
    if (state().hidden_codes[i].load(std::memory_order_relaxed) == code) return true;
  if (count == kMaxHiddenCodes) return false;
  state().hidden_codes[count].store(code, std::memory_order_relaxed);
  state().hidden_count.store(count + 1, std::memory_order_release);
  return true;
}

size_t captureStack(RawFrame* frames, size_t max, WalkCache* cache) {
  if (cache) {
    cache->frames_serial = 0;  // until a walk says what the frames are
    cache->tail_pending = 0;   // the buffer is written anew
  }
  if (state().walker.load(std::memory_order_relaxed) == Walker::kDirect) {
    const void* thread_state = state().api.PyGILState_GetThisThreadState();
    if (!thread_state) return 0;  // a thread that never ran Python
    size_t count = state().direct_walk(thread_state, frames, max, cache);
    if (count != SIZE_MAX) return count;
    state().walker.store(Walker::kPublicApi, std::memory_order_relaxed);
    sayLayoutUnknownOnce("a frame did not hold a code object where its layout says");
    return 0;
  }
  void* thread_state = state().api.PyThreadState_UncheckedGet();
  if (!thread_state) return 0;
  void* top = state().api.PyThreadState_GetFrame(thread_state);  // a new reference, or null
  return top ? dropHidden(frames, walkWithApi(top, frames, max)) : 0;
}

void usePublicApiOnly() {
  state().walker.store(Walker::kPublicApi, std::memory_order_relaxed);
  state().layout_failed_said.store(true);  // asked for: nothing to say
}

const char* walkerName() {
  return state().walker.load(std::memory_order_relaxed) == Walker::kDirect ? "direct"
                                                                           : "public-api";
}

// Note [Python frame cache]
// Turning a frame into file:line:function costs a few hundred ns, so it is done once per
// distinct RawFrame and kept for the life of the process (PythonState::frame_cache and
// frame_arena, never destroyed: Note [The recorder's state outlives every thread]); trace files
// come and go (fork, reopen) but the meaning of a frame does not. Guarded by the recorder's lock.
FrameInfo* resolveFrame(const RawFrame& frame, bool holds_gil) {
  if (FrameInfo** cached = state().frame_cache.find(frame)) return *cached;
  bool walked_directly = frame.identity != 0;
  // A frame the API walked, not resolved when it was (out of memory), and met again on a thread
  // without the GIL (a lent stack's): the API is not called there; the frame stays unknown.
  if (!walked_directly && !holds_gil) return nullptr;
  auto* info = static_cast<FrameInfo*>(state().frame_arena.allocate(sizeof(FrameInfo)));
  if (!info) return nullptr;
  if (walked_directly)
    resolveDirectly(frame, info);
  else
    resolveWithApi(frame, info);
  if (!state().frame_cache.insert(frame, info)) return nullptr;
  // A frame the API walked is known by its code object's address alone: keep the code object
  // alive (we hold the GIL), so that the address can never be reused by another.
  if (!walked_directly) state().api.Py_IncRef(const_cast<void*>(frame.code));
  return info;
}

}  // namespace memtrace::python
