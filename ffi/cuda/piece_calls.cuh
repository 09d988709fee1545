// Which calls the piece kernels take, and their launches (host side): piece_eligible and
// launch_pieces for the byte-level kernel (cuda/piece_kernel.cuh), char_piece_eligible and
// launch_char_pieces for the SentencePiece-style one (cuda/char_piece_kernel.cuh); what each
// leaves to the block-per-string kernels is said at the top of its kernel's file. The handler
// (encode_cuda.cu) asks these, then launches the block kernel with pending_only.
// Part of the one CUDA translation unit, encode_cuda.cu (an unnamed namespace).
#pragma once

#include "binding/encode_params.h"
#include "cuda/char_piece_kernel.cuh"
#include "cuda/piece_kernel.cuh"
#include "cuda/piece_launch.cuh"

namespace bbpe {
namespace {

// Whether a call's shape suits either piece kernel: rows of 1 .. kPieceMaxLen bytes, not tiled.
inline bool piece_shape(const EncodeParams& p) {
  return p.max_len >= 1 && p.max_len <= kPieceMaxLen && !tiled_rows(p.batch, p.max_len, p.pretok_stages, p.symbols);
}

// Whether a call can run the piece kernel (the top of cuda/piece_kernel.cuh says what it leaves).
inline bool piece_eligible(const EncodeParams& p) {
  return p.pretok_stages >= 1 && p.symbols == kSymbolsBytes && !p.pretok.nfc && piece_shape(p);
}

// The piece kernel over the call (piece_eligible(p) must hold); the rows it leaves pending
// are then encode_kernel's (the caller's launch with pending_only).
template <bool kStaged, bool kSpecials>
cudaError_t launch_pieces_with(const EncodeParams& p, cudaStream_t stream) {
  return at_piece_chunk(p, [&](auto chunk) {
    constexpr int kChunk = decltype(chunk)::value;
    return launch_chunk_rows<piece_kernel<kChunk, kStaged, kSpecials>, kChunk>(p, sizeof(PieceSmem<kChunk>), stream);
  });
}
inline cudaError_t launch_pieces(const EncodeParams& p, cudaStream_t stream) {
  const bool staged = p.pretok_stages > 1, specials = p.special.count > 0;
  if (specials) return staged ? launch_pieces_with<true, true>(p, stream) : launch_pieces_with<false, true>(p, stream);
  return staged ? launch_pieces_with<true, false>(p, stream) : launch_pieces_with<false, false>(p, stream);
}

// Whether a call can run char_piece_kernel (the top of cuda/char_piece_kernel.cuh says what it
// leaves).
inline bool char_piece_eligible(const EncodeParams& p) { return p.symbols == kSymbolsChars && piece_shape(p); }

// char_piece_kernel over the call (char_piece_eligible(p) must hold); the rows it leaves
// pending are then encode_chars_kernel's (the caller's launch with pending_only).
template <bool kSpecials>
cudaError_t launch_char_pieces_with(const EncodeParams& p, cudaStream_t stream) {
  return at_piece_chunk(p, [&](auto chunk) {
    constexpr int kChunk = decltype(chunk)::value;
    return launch_chunk_rows<char_piece_kernel<kChunk, kSpecials>, kChunk>(p, sizeof(CharPieceSmem<kChunk>), stream);
  });
}
inline cudaError_t launch_char_pieces(const EncodeParams& p, cudaStream_t stream) {
  return p.special.count > 0 ? launch_char_pieces_with<true>(p, stream) : launch_char_pieces_with<false>(p, stream);
}

}  // namespace
}  // namespace bbpe
