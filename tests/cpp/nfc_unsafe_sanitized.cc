// core/nfc_unsafe.h (whether a text has a code point NFC may change) under AddressSanitizer and
// UndefinedBehaviorSanitizer: random texts of 16-bit and 32-bit units and of UTF-8 bytes (invalid
// ones among them), every length from 0 to 100 and some long ones, each in memory of its exact
// size, mostly safe code points (ASCII, Cyrillic, CJK, punctuation) with now and then one drawn
// from anywhere, against a check of every code point's property in the operand (argv[1]: the
// int32 operand of blockbpe_jax/pretok/nfc_data.py, written by the test). Prints the texts
// checked; exit 0 when all agree.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include "core/nfc_unsafe.h"

namespace {

long with_unsafe = 0;  // texts the check should find one in

bool unsafe(const bbpe::NfcData& d, uint32_t cp) { return (bbpe::nfc_prop(d, cp) & bbpe::kNfcPropUnsafe) != 0; }

// Mostly safe code points (ASCII, Cyrillic letters, CJK, punctuation), one in 60 or so a mark
// (U+0300.., Cyrillic's U+0483.., the symbols' U+20D0..: unsafe, next to safe ones of their
// blocks) or any code point.
uint32_t draw(std::mt19937_64& rng, uint32_t top) {
  if (rng() % 60 == 0) {
    switch (rng() % 4) {
      case 0: return 0x300 + (uint32_t)(rng() % 0x70);
      case 1: return 0x483 + (uint32_t)(rng() % 7);
      case 2: return 0x20D0 + (uint32_t)(rng() % 0x21);
      default: {
        const uint32_t c = (uint32_t)(rng() % (top + 1));
        return c >= 0xD800 && c < 0xE000 ? 0x61 : c;
      }
    }
  }
  switch (rng() % 4) {
    case 0: return (uint32_t)(rng() % 0x80);
    case 1: return 0x430 + (uint32_t)(rng() % 32);
    case 2: return 0x4E00 + (uint32_t)(rng() % 0x5200);
    default: return 0x2010 + (uint32_t)(rng() % 16);
  }
}

template <class Unit>
int check_units(const bbpe::NfcData& d, std::mt19937_64& rng, int64_t n) {
  std::unique_ptr<Unit[]> units(new Unit[n > 0 ? n : 1]);
  bool want = false;
  for (int64_t i = 0; i < n; ++i) {
    units[i] = (Unit)draw(rng, sizeof(Unit) == 2 ? 0xFFFF : 0x10FFFF);
    want |= unsafe(d, units[i]);
  }
  with_unsafe += want;
  bbpe::NfcUnsafeSpans spans(d);
  if (bbpe::units_nfc_unsafe(units.get(), n, spans) != want)
    return std::printf("%zu-byte units, n=%lld: want %d\n", sizeof(Unit), (long long)n, (int)want), 1;
  return 0;
}

int check_utf8(const bbpe::NfcData& d, std::mt19937_64& rng, int64_t n) {
  std::vector<uint8_t> text;
  bool want = false;
  while ((int64_t)text.size() < n) {
    if (rng() % 10 == 0) {  // an invalid byte: no code point
      text.push_back((uint8_t)(0x80 + rng() % 0x80));
      continue;
    }
    const uint32_t c = draw(rng, 0x10FFFF);
    const int len = bbpe::utf8_length(c);
    if ((int64_t)text.size() + len > n) break;
    for (int k = 0; k < len; ++k) text.push_back(bbpe::utf8_byte(c, len, k));
  }
  const int64_t size = (int64_t)text.size();
  std::unique_ptr<uint8_t[]> exact(new uint8_t[size > 0 ? size : 1]);
  for (int64_t i = 0; i < size; ++i) exact[i] = text[i];
  for (int64_t i = 0; i < size; ++i) {  // (every decodable code point, as the executors read them)
    uint32_t cp;
    if (bbpe::utf8_decode(exact.get(), (int)size, nullptr, (int)i, &cp) && cp >= bbpe::kNfcFirstUnsafe) want |= unsafe(d, cp);
  }
  with_unsafe += want;
  bbpe::NfcUnsafeSpans spans(d);
  if (bbpe::utf8_nfc_unsafe(exact.get(), size, spans) != want)
    return std::printf("UTF-8, %lld bytes: want %d\n", (long long)size, (int)want), 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::printf("usage: nfc_unsafe_sanitized OPERAND.bin\n"), 2;
  std::ifstream f(argv[1], std::ios::binary);
  const std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ints(raw.size() / 4);
  for (size_t i = 0; i < ints.size(); ++i)
    ints[i] = (int32_t)((uint32_t)(uint8_t)raw[4 * i] | (uint32_t)(uint8_t)raw[4 * i + 1] << 8 |
                        (uint32_t)(uint8_t)raw[4 * i + 2] << 16 | (uint32_t)(uint8_t)raw[4 * i + 3] << 24);
  bbpe::NfcData d;
  if (!bbpe::nfc_data_view(ints.data(), (int64_t)ints.size(), &d)) return std::printf("the operand does not fit its header\n"), 2;
  std::mt19937_64 rng(29);
  long checked = 0;
  int bad = 0;
  for (int rep = 0; rep < 30; ++rep)
    for (int64_t n = 0; n <= 100; ++n, checked += 3)
      bad += check_units<uint16_t>(d, rng, n) + check_units<uint32_t>(d, rng, n) + check_utf8(d, rng, n);
  for (int64_t n : {1000, 4096, 4099, 70000})
    bad += check_units<uint16_t>(d, rng, n) + check_units<uint32_t>(d, rng, n) + check_utf8(d, rng, n), checked += 3;
  std::printf("%ld texts (%ld with an unsafe code point), %d differ\n", checked, with_unsafe, bad);
  return bad ? 1 : 0;
}
