// A minimal writer of Python pickles (protocol 2): dicts, lists, tuples, str, int, bool
// and None, with the memo so that an object written once (a stack's frame list) is shared
// rather than repeated. Enough for PyTorch's memory snapshot; pickle.load reads it.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tracer/report/escape.h"

namespace memtrace::report {

class PickleWriter {
 public:
  explicit PickleWriter(std::ostream& out) : out_(out) {
    put(kProto);
    put(2);
  }

  // A dict: beginDict(), then key, value, key, value..., then endDict().
  void beginDict() { put(kEmptyDict), put(kMark); }
  void endDict() { put(kSetItems); }
  void beginList() { put(kEmptyList), put(kMark); }
  void endList() { put(kAppends); }
  void beginTuple() { put(kMark); }
  void endTuple() { put(kTuple); }

  void none() { put(kNone); }
  void boolean(bool value) { put(value ? kNewTrue : kNewFalse); }
  void integer(int64_t value) {
    if (value >= 0 && value < 256) {
      put(kBinInt1), put(static_cast<uint8_t>(value));
    } else if (value >= 0 && value < 65536) {
      put(kBinInt2), little(static_cast<uint64_t>(value), 2);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
      put(kBinInt), little(static_cast<uint64_t>(value), 4);
    } else {
      // LONG1: the shortest little-endian two's complement.
      uint8_t bytes[9];
      uint8_t length = 0;
      int64_t rest = value;
      do {
        bytes[length++] = static_cast<uint8_t>(rest & 0xff);
        rest >>= 8;
      } while (!((rest == 0 && !(bytes[length - 1] & 0x80)) ||
                 (rest == -1 && (bytes[length - 1] & 0x80))));
      put(kLong1), put(length);
      out_.write(reinterpret_cast<const char*>(bytes), length);
    }
  }
  void unsignedInteger(uint64_t value) {
    if (value <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(value));
    put(kLong1), put(9);  // needs a ninth byte, zero, to stay positive
    little(value, 8);
    put(0);
  }
  // A str; bytes that are not UTF-8 become U+FFFD, as Python could not decode them.
  void string(std::string_view text) {
    std::string valid = validUtf8(text);
    put(kBinUnicode), little(valid.size(), 4);
    out_.write(valid.data(), static_cast<std::streamsize>(valid.size()));
  }
  // A str that recurs (a dict key): written once, then fetched from the memo.
  void name(std::string_view text) {
    auto it = names_.find(std::string(text));
    if (it != names_.end()) return get(it->second);
    string(text);
    names_.emplace(std::string(text), memoize());
  }

  // Stores the object on top of the stack in the memo; get() pushes it again.
  uint32_t memoize() {
    uint32_t index = next_memo_++;
    if (index < 256)
      put(kBinPut), put(static_cast<uint8_t>(index));
    else
      put(kLongBinPut), little(index, 4);
    return index;
  }
  void get(uint32_t index) {
    if (index < 256)
      put(kBinGet), put(static_cast<uint8_t>(index));
    else
      put(kLongBinGet), little(index, 4);
  }

  void finish() { put(kStop); }

 private:
  // The opcodes used, from CPython's Lib/pickle.py.
  static constexpr uint8_t kMark = '(', kStop = '.', kNone = 'N', kBinInt = 'J', kBinInt1 = 'K',
                           kBinInt2 = 'M', kBinUnicode = 'X', kAppends = 'e', kBinGet = 'h',
                           kLongBinGet = 'j', kEmptyList = ']', kBinPut = 'q', kLongBinPut = 'r',
                           kSetItems = 'u', kEmptyDict = '}', kTuple = 't', kProto = 0x80,
                           kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a;

  void put(uint8_t byte) { out_.put(static_cast<char>(byte)); }
  void little(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) put(static_cast<uint8_t>(value >> (8 * i)));
  }

  std::ostream& out_;
  uint32_t next_memo_ = 0;
  std::unordered_map<std::string, uint32_t> names_;
};

}  // namespace memtrace::report
