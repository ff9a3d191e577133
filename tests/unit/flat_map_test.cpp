#include "tracer/common/flat_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace memtrace {
namespace {

TEST(FlatMap, AgreesWithUnorderedMapUnderChurn) {
  FlatMap<uint64_t, uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> reference;
  std::mt19937_64 random(1);
  // Addresses from a small range so that inserts, finds and erases collide and probe runs
  // wrap around the table: the backward-shift deletion must keep every key reachable.
  for (int step = 0; step < 400000; ++step) {
    uint64_t key = 1 + random() % 5000 * 256;
    switch (random() % 3) {
      case 0: {
        bool inserted = false;
        uint64_t* value = map.insert(key, step, &inserted);
        ASSERT_NE(value, nullptr);
        ASSERT_EQ(inserted, reference.emplace(key, step).second);
        ASSERT_EQ(*value, reference[key]);
        break;
      }
      case 1: {
        uint64_t removed = 0;
        bool erased = map.erase(key, &removed);
        auto it = reference.find(key);
        ASSERT_EQ(erased, it != reference.end());
        if (erased) {
          ASSERT_EQ(removed, it->second);
          reference.erase(it);
        }
        break;
      }
      default: {
        uint64_t* value = map.find(key);
        auto it = reference.find(key);
        ASSERT_EQ(value != nullptr, it != reference.end());
        if (value) ASSERT_EQ(*value, it->second);
      }
    }
    ASSERT_EQ(map.size(), reference.size());
  }
  size_t visited = 0;
  map.forEach([&](uint64_t key, uint64_t value) {
    ++visited;
    EXPECT_EQ(reference.at(key), value);
  });
  EXPECT_EQ(visited, reference.size());
}

TEST(FlatMap, GrowsAndClears) {
  FlatMap<uint64_t, int> map;
  for (uint64_t i = 1; i <= 100000; ++i) ASSERT_NE(map.insert(i * 4096, int(i)), nullptr);
  EXPECT_EQ(map.size(), 100000u);
  for (uint64_t i = 1; i <= 100000; ++i) ASSERT_EQ(*map.find(i * 4096), int(i));
  map.clear();
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.find(4096), nullptr);
  EXPECT_NE(map.insert(4096, 1), nullptr);
}

}  // namespace
}  // namespace memtrace
