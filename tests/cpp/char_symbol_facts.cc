// word_starts_between_facts (core/char_symbols.h) against word_starts_between, the rule it
// restates for the SentencePiece piece kernel's ASCII runs: on every pair of ASCII symbols, and
// for every id of the vocabulary (either isolation) before an ASCII symbol, as a run entered
// after the kernel's full walk uses it. Symbols and facts made as char_piece_kernel makes them.
//   char_symbol_facts CHAR_TABLE BYTE_IDS N_IDS   (int32 files: the tables' char_table, byte_ids)
// Prints the counts; exits 1 on a difference (the first ten printed), 2 on unreadable input.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/char_symbols.h"

using namespace bbpe;

static std::vector<int32_t> read_ints(const char* path) {
  std::vector<int32_t> out;
  FILE* f = std::fopen(path, "rb");
  if (!f) return out;
  int32_t v;
  while (std::fread(&v, 4, 1, f) == 1) out.push_back(v);
  std::fclose(f);
  return out;
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const std::vector<int32_t> chars = read_ints(argv[1]), byte_ids = read_ints(argv[2]);
  const long n_ids = std::atol(argv[3]);
  if (chars.size() < size_t(kCharTableHeader) || byte_ids.size() != 256 || n_ids <= 0) return 2;
  const CharView c = char_view(CharTable{chars.data(), 0, 0, 0});
  VocabView v{};
  v.byte_ids = byte_ids.data();
  int32_t symbol[128];
  uint8_t facts[128];
  bool isolated[128];
  for (int b = 0; b < 128; ++b) {
    const int32_t id = c.ascii_ids[b];
    isolated[b] = id >= 0 && is_isolated(c, id);
    symbol[b] = ascii_symbol(v, c, (uint8_t)b);
    facts[b] = symbol_facts(c, symbol[b], isolated[b]);
  }
  long bad = 0, starts = 0, pairs = 0;
  auto check = [&](int32_t before, bool before_isolated, uint8_t before_facts, int at) {
    const bool want = word_starts_between(c, before, symbol[at], before_isolated, isolated[at]);
    const bool got = word_starts_between_facts(before, before_facts, symbol[at], facts[at]);
    starts += want, ++pairs;
    if (want != got && bad++ < 10)
      std::printf("differ: before %d (isolated %d), byte %d: %d, facts say %d\n", before, before_isolated, at, want, got);
  };
  for (int x = 0; x < 128; ++x)
    for (int y = 0; y < 128; ++y) check(symbol[x], isolated[x], facts[x], y);
  for (int32_t before = 0; before < n_ids; ++before)
    for (int iso = 0; iso < 2; ++iso) {
      const uint8_t before_facts = symbol_facts(c, before, iso);
      for (int y = 0; y < 128; ++y) check(before, iso, before_facts, y);
    }
  std::printf("pairs %ld starts %ld differ %ld\n", pairs, starts, bad);
  return bad != 0;
}
