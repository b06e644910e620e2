#!/usr/bin/env bash
# Builds the attention library's base twice into BUILD_DIR/a and BUILD_DIR/b so that the two .so
# files differ in bytes while their machine code cannot: b is compiled from a copy of
# kernels/attention/attention.cu behind one comment line (every line number in the embedded
# -lineinfo tables moves), in another folder, and linked with another build id. Both use
# kernels/attention/Makefile unchanged. Usage: build_pair.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$(mkdir -p "$1" && cd "$1" && pwd)"
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
mkdir -p "$dir/src"
{ echo "// identical-code benchmark: this comment moves every line below it, and nothing else"
  cat "$root/kernels/attention/attention.cu"; } > "$dir/src/attention.cu"
cp "$root/kernels/attention/Makefile" "$dir/src/Makefile"
make -s -C "$root/kernels/attention" NVCC="$nvcc -Xlinker --build-id=0xa0" BUILD="$dir/a" "$dir/a/libattention_base.so"
make -s -C "$dir/src" NVCC="$nvcc -Xlinker --build-id=0xb0" BUILD="$dir/b" "$dir/b/libattention_base.so"
if cmp -s "$dir/a/libattention_base.so" "$dir/b/libattention_base.so"; then
  echo "build_pair.sh: the two builds are byte-identical; the benchmark needs them to differ" >&2
  exit 1
fi
