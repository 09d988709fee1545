// The native JSONL reader (core/jsonl.h: split_block, then join_block) over a file's blocks,
// built with AddressSanitizer and UndefinedBehaviorSanitizer by tests/test_jsonl_sanitized.py:
// every block as JSONL and as plain lines on 1 and 4 threads, then copies of it cut short and
// with bytes changed (the parse's give-up paths). Each block is copied into memory of exactly
// its size, so a read past it is reported. Prints "documents <n>" (of the unchanged blocks as
// JSONL, one thread).
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/jsonl.h"

namespace {

int64_t split_and_join(const std::string& block, int threads, const std::string* field, const std::string& sep) {
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[block.size() + 1]);
  std::memcpy(bytes.get(), block.data(), block.size());
  bbpe::jsonl::Split split;
  if (!bbpe::jsonl::split_block(bytes.get(), (int64_t)block.size(), field, threads, sep, split)) return -1;
  std::unique_ptr<uint8_t[]> data(new uint8_t[split.bytes + 1]);
  std::vector<int64_t> offsets(split.docs + 1), lines(split.docs + 1);
  bbpe::jsonl::join_block(split, data.get(), offsets.data(), lines.data(), threads);
  return split.docs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  std::ifstream in(argv[1], std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), {});
  const int64_t block_bytes = std::stoll(argv[2]);
  const std::string field = "text", sep = "<|endoftext|>";
  std::mt19937 rng(7);
  int64_t documents = 0;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.rfind('\n', std::min(all.size(), at + (size_t)block_bytes) - 1);
    end = end == std::string::npos || end < at ? all.size() : end + 1;  // (a line longer than a block: to the end)
    const std::string block = all.substr(at, end - at);
    at = end;
    documents += std::max<int64_t>(0, split_and_join(block, 1, &field, sep));
    split_and_join(block, 4, &field, sep);
    split_and_join(block, 1, nullptr, "");
    split_and_join(block, 4, nullptr, sep);
    const char changes[] = "\"\\u{}\n\xc3\xff \x01\xed";
    for (int m = 0; m < 16; ++m) {
      std::string changed = block.substr(0, std::uniform_int_distribution<size_t>(0, block.size())(rng));
      for (int k = 0; k < m % 4 && !changed.empty(); ++k)
        changed[std::uniform_int_distribution<size_t>(0, changed.size() - 1)(rng)] =
            changes[std::uniform_int_distribution<size_t>(0, sizeof(changes) - 2)(rng)];
      split_and_join(changed, 1 + m % 4, &field, sep);
    }
  }
  std::printf("documents %lld\n", (long long)documents);
  return 0;
}
