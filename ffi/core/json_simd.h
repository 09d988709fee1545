// The JSONL reader's 64-byte steps on x86-64 with AVX-512 (BW, VBMI, VBMI2), chosen at run time
// (`use_avx512_vbmi2`): a JSON string's plain bytes and two-byte escapes decoded
// (`copy_plain_512`, for core/json_line.h's copy_plain) and UTF-8 checked (`valid_utf8_512`, for
// its valid_utf8). Elsewhere BBPE_JSON_AVX512 is not defined and json_line.h's SSE2 and
// byte-wise code does all of it.
#pragma once

#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#define BBPE_JSON_AVX512 1
#include <immintrin.h>

namespace bbpe {
namespace jsonl {

// The byte each two-byte escape's letter stands for, by the letter (0: none; \\ is left out, as
// copy_plain_512 leaves a backslash after a backslash to its caller).
struct EscapeLetters {
  alignas(64) uint8_t of[128];
};
constexpr EscapeLetters escape_letters() {
  EscapeLetters t{};
  t.of['"'] = '"', t.of['/'] = '/', t.of['b'] = '\b', t.of['f'] = '\f';
  t.of['n'] = '\n', t.of['r'] = '\r', t.of['t'] = '\t';
  return t;
}
inline constexpr EscapeLetters kEscapes = escape_letters();

// copy_plain's 64-byte steps (AVX-512 with VBMI2's byte compress; the caller checks the CPU):
// plain bytes, non-ASCII bytes as they are (`took_non_ascii` set when it took any: the caller
// checks that they are UTF-8, in bulk), and the two-byte escapes \" \/ \b \f \n \r \t decoded
// in place, up to a byte it leaves to the caller: an unescaped quote, a control byte, or a
// backslash whose escape is not one of those (\\, \u, a bad one) or that is the input's last
// byte. So every backslash a step takes starts an escape whose letter it takes too. (Leaving
// each escape to the byte-wise code, one per ~64 bytes of prose with newlines, cost more than
// the scan itself; so did leaving each non-ASCII character: 64-byte steps restarted for every
// two or three bytes of Cyrillic or CJK.)
// The last step (fewer than 64 bytes left) reads only the bytes left, the lanes past them as
// zeros (control bytes: they stop it), and stores only the bytes it takes: a field's last bytes,
// one run per document, need no 16-byte or byte-wise steps.
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2,popcnt,bmi"))) inline const uint8_t*
copy_plain_512(const uint8_t* p, const uint8_t* end, char*& w, bool& took_non_ascii) {
  const __m512i low = _mm512_load_si512(kEscapes.of), high = _mm512_load_si512(kEscapes.of + 64);
  const __m512i quote = _mm512_set1_epi8('"'), backslash = _mm512_set1_epi8('\\'), space = _mm512_set1_epi8(0x20);
  char* out_at = w;
  while (p < end) {
    const int64_t left = end - p;
    const bool last_step = left < 64;
    const uint64_t here = last_step ? (uint64_t(1) << left) - 1 : ~uint64_t(0);
    const __m512i v = _mm512_maskz_loadu_epi8(here, (const void*)p);
    const uint64_t bs = _mm512_cmpeq_epi8_mask(v, backslash);
    const uint64_t control = _mm512_cmplt_epu8_mask(v, space);
    const uint64_t non_ascii = _mm512_movepi8_mask(v);
    const uint64_t quotes = _mm512_cmpeq_epi8_mask(v, quote);
    // (no shortcut for a plain step: with an escape per 64 bytes the branch is a coin toss)
    const uint64_t letter = bs << 1;  // (each backslash's next byte)
    const __m512i decoded = _mm512_permutex2var_epi8(low, v, high);  // (by each byte's low 7 bits)
    const uint64_t simple = _mm512_test_epi8_mask(decoded, decoded);
    // (a letter >= 0x80 may share its low bits with a real one: it stops there; a backslash in a
    // full step's last byte has its letter in the next step)
    const uint64_t stop = ((quotes | control) & ~letter) | ((letter & (~simple | control | non_ascii)) >> 1) |
                          (bs >> 63 << 63);
    const int n = stop ? __builtin_ctzll(stop) : 64;
    const uint64_t taken = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
    const __m512i out = _mm512_maskz_compress_epi8(taken & ~bs, _mm512_mask_mov_epi8(v, letter, decoded));
    const int kept = __builtin_popcountll(taken & ~bs);
    took_non_ascii |= (non_ascii & taken) != 0;
    // (w has room for every byte left at p, string()'s reserve: 64 or more in a full step)
    if (last_step)
      _mm512_mask_storeu_epi8((void*)out_at, (uint64_t(1) << kept) - 1, out);
    else
      _mm512_storeu_si512((void*)out_at, out);
    out_at += kept;
    p += n;
    if (n < 64) break;
  }
  w = out_at;
  return p;
}

// Whether copy_plain_512 and valid_utf8_512 can run here (and are not turned off:
// BLOCKBPE_JSON_AVX512=0, for A/B runs).
inline bool use_avx512_vbmi2() {
  static const bool use = [] {
    const char* env = std::getenv("BLOCKBPE_JSON_AVX512");
    __builtin_cpu_init();
    return !(env && env[0] == '0') && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
  }();
  return use;
}

// valid_utf8_512's constants. The errors a byte and the one before it can show (Keiser and
// Lemire's classes), looked up by the previous byte's high and low nibble and this byte's high
// nibble, each table in every 128-bit lane (vpshufb looks up within a lane); byte i of the bytes
// k back is index 64 - k + i (this step's byte i - k where that is >= 64, else the step
// before's); the bytes that leave a sequence open at a step's end (the last >= 0xC0, the one
// before >= 0xE0, the one before that >= 0xF0).
struct Utf8Steps {
  alignas(64) uint8_t first_high[64];
  alignas(64) uint8_t first_low[64];
  alignas(64) uint8_t second_high[64];
  alignas(64) uint8_t back[3][64];
  alignas(64) uint8_t open_at_end[64];
};
constexpr Utf8Steps utf8_steps() {
  constexpr uint8_t kShort = 1, kLong = 2, kOver3 = 4, kLarge = 8, kSurrogate = 16, kOver2 = 32,
                    kLarge1000 = 64, kOver4 = 64, kTwoConts = 128, kCarry = kShort | kLong | kTwoConts;
  constexpr uint8_t first_high[16] = {kLong, kLong, kLong, kLong, kLong, kLong, kLong, kLong,
                                      kTwoConts, kTwoConts, kTwoConts, kTwoConts,
                                      kShort | kOver2, kShort, kShort | kOver3 | kSurrogate,
                                      kShort | kLarge | kLarge1000 | kOver4};
  constexpr uint8_t first_low[16] = {
      kCarry | kOver3 | kOver2 | kOver4, kCarry | kOver2, kCarry, kCarry, kCarry | kLarge,
      kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000,
      kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000,
      kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000 | kSurrogate,
      kCarry | kLarge | kLarge1000, kCarry | kLarge | kLarge1000};
  constexpr uint8_t second_high[16] = {
      kShort, kShort, kShort, kShort, kShort, kShort, kShort, kShort,
      kLong | kOver2 | kTwoConts | kOver3 | kLarge1000 | kOver4, kLong | kOver2 | kTwoConts | kOver3 | kLarge,
      kLong | kOver2 | kTwoConts | kSurrogate | kLarge, kLong | kOver2 | kTwoConts | kSurrogate | kLarge,
      kShort, kShort, kShort, kShort};
  Utf8Steps t{};
  for (int i = 0; i < 64; ++i) {
    t.first_high[i] = first_high[i % 16], t.first_low[i] = first_low[i % 16], t.second_high[i] = second_high[i % 16];
    for (int k = 1; k <= 3; ++k) t.back[k - 1][i] = uint8_t(64 - k + i);
    t.open_at_end[i] = i == 61 ? 0xF0 - 1 : i == 62 ? 0xE0 - 1 : i == 63 ? 0xC0 - 1 : 0xFF;
  }
  return t;
}
inline constexpr Utf8Steps kUtf8Steps = utf8_steps();

// valid_utf8 64 bytes a step (AVX-512 with VBMI's byte permutes; the caller checks the CPU): each
// byte classified by its own high nibble and the previous byte's two nibbles, three lookups whose
// AND is the error a pair of bytes can show (Keiser and Lemire's rule: too short, too long, an
// overlong form, a surrogate, past U+10FFFF, a continuation where none belongs); where two or
// three bytes back began a 3- or 4-byte sequence, the byte must be a continuation. A step of
// ASCII only checks that the step before ended no sequence early. The input's last bytes are
// followed by zeros, which end any sequence left open as "too short". (Lines of prose with a
// curly quote or a dash every ~80 bytes left the byte-wise loop at each.)
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline bool valid_utf8_512(const uint8_t* p,
                                                                                 const uint8_t* end) {
  const __m512i t1 = _mm512_load_si512(kUtf8Steps.first_high), t2 = _mm512_load_si512(kUtf8Steps.first_low),
                t3 = _mm512_load_si512(kUtf8Steps.second_high), low_nibble = _mm512_set1_epi8(0x0F);
  const __m512i back1 = _mm512_load_si512(kUtf8Steps.back[0]), back2 = _mm512_load_si512(kUtf8Steps.back[1]),
                back3 = _mm512_load_si512(kUtf8Steps.back[2]), open_limit = _mm512_load_si512(kUtf8Steps.open_at_end);
  __m512i before = _mm512_setzero_si512(), error = _mm512_setzero_si512(), open = _mm512_setzero_si512();
  for (bool last = false; !last;) {
    __m512i v;
    if (end - p >= 64) {
      v = _mm512_loadu_si512((const void*)p);
      p += 64;
    } else {  // (the rest, then zeros: after a full last step, a step of zeros)
      v = _mm512_maskz_loadu_epi8((uint64_t(1) << (end - p)) - 1, p);
      p = end;
      last = true;
    }
    if (!_mm512_movepi8_mask(v)) {
      error = _mm512_or_si512(error, open);
    } else {
      const __m512i prev1 = _mm512_permutex2var_epi8(before, back1, v);
      const __m512i pairs = _mm512_and_si512(
          _mm512_and_si512(_mm512_shuffle_epi8(t1, _mm512_and_si512(_mm512_srli_epi16(prev1, 4), low_nibble)),
                           _mm512_shuffle_epi8(t2, _mm512_and_si512(prev1, low_nibble))),
          _mm512_shuffle_epi8(t3, _mm512_and_si512(_mm512_srli_epi16(v, 4), low_nibble)));
      const __m512i prev2 = _mm512_permutex2var_epi8(before, back2, v);
      const __m512i prev3 = _mm512_permutex2var_epi8(before, back3, v);
      const __m512i third = _mm512_subs_epu8(prev2, _mm512_set1_epi8(char(0xE0 - 0x80)));
      const __m512i fourth = _mm512_subs_epu8(prev3, _mm512_set1_epi8(char(0xF0 - 0x80)));
      const __m512i must_continue = _mm512_and_si512(_mm512_or_si512(third, fourth), _mm512_set1_epi8(char(0x80)));
      error = _mm512_or_si512(error, _mm512_xor_si512(must_continue, pairs));
      open = _mm512_subs_epu8(v, open_limit);
    }
    before = v;
  }
  return !_mm512_test_epi8_mask(error, error);
}

}  // namespace jsonl
}  // namespace bbpe
#endif
