// Runs the fuzz harness once on each file named, or on each file of each directory named:
// the committed corpus and crashes, replayed in every build (a libFuzzer build replays
// them itself). Exits non-zero if an input escapes the harness (an exception other than a
// refusal); a crash or a sanitizer report ends the process as it would under libFuzzer.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path))
        if (entry.is_regular_file() && entry.path().filename() != "README.md")
          inputs.push_back(entry.path());
    } else {
      inputs.push_back(path);
    }
  }
  int failures = 0;
  for (const std::filesystem::path& path : inputs) {
    std::ifstream file(path, std::ios::binary);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
    try {
      LLVMFuzzerTestOneInput(data.data(), data.size());
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), error.what());
      ++failures;
    }
  }
  std::printf("replayed %zu inputs, %d failures\n", inputs.size(), failures);
  return inputs.empty() || failures ? 1 : 0;
}
