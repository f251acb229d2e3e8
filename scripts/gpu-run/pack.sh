#!/bin/bash
# Build what the GPU run carries, on this machine (no device time):
#   scripts/gpu-run/pack.sh DEST
# DEST is an ignored folder of the checkout that the device tool sends (e.g. .gpu in the checkout,
# listed in that checkout's .git/info/exclude). It gets:
#   payload/site.tar.xz.part-*  SGLang 0.5.16 and its wheels (wheels.txt) installed for CPython 3.12
#                               with pip --target, slimmed to fit one call (below), xz, in 50 MiB parts
#   payload/extra.tar.xz        ans/: ansible-core and what it needs beyond the device image
#   payload/SHA256SUMS
#   tree/                       this project's tracked files (git ls-files), which device.sh runs
# Slimming (about 1.6 GB to 360 MB, 48 MiB as xz): sgl_kernel's FA3 library flash_ops.abi3.so
# (1.1 GB; tiny.yml sets --attention-backend triton instead), its sm100/ ops (the H200 is sm90),
# xgrammar's static library and headers, and debug sections of shared libraries
# (strip --strip-debug). Nothing of sglang's own files changes: RECORD still matches the gate.
set -euo pipefail
DEST=$(realpath -m "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${GPU_RUN_CACHE:-$HOME/.cache/sglang-deploy/gpu-run}
TAGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)
mkdir -p "$CACHE/wheels" "$DEST/payload"
python3 -m pip download -q --no-deps "${TAGS[@]}" -d "$CACHE/wheels" -r "$HERE/wheels.txt"
names() { grep -v '^#' "$HERE/wheels.txt" | sed 's/==.*//; s/[-_.]/_/g' | tr 'A-Z' 'a-z'; }
wheels=()
for name in $(names); do
  found=$(ls "$CACHE/wheels" | awk -v n="$name" '{ w = tolower($0); split(w, p, "-"); gsub(/[-_.]/, "_", p[1]); if (p[1] == n) print }')
  [ "$(echo "$found" | wc -w)" = 1 ] || { echo "expected one wheel for $name in $CACHE/wheels, found: $found" >&2; exit 1; }
  wheels+=("$CACHE/wheels/$found")
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
site=() ans=()
for w in "${wheels[@]}"; do
  case $(basename "$w") in ansible_core-*|resolvelib-*|cryptography-*) ans+=("$w") ;; *) site+=("$w") ;; esac
done
python3 -m pip install -q --no-deps --no-index --no-compile "${TAGS[@]}" --target "$work/site" "${site[@]}"
python3 -m pip install -q --no-deps --no-index --no-compile "${TAGS[@]}" --target "$work/ans" "${ans[@]}"
rm -rf "$work/site/sgl_kernel/flash_ops.abi3.so" "$work/site/sgl_kernel/sm100" \
       "$work/site/xgrammar/lib/libxgrammar.a" "$work/site/xgrammar/include" "$work/site/bin"
find "$work/site" -name '*.so*' -type f | while read -r lib; do
  if file "$lib" | grep -q 'with debug_info'; then strip --strip-debug "$lib"; fi
done
rm -f "$DEST"/payload/*
tar -C "$work/site" -cf - . | xz -T2 -6 | split -b 50M -d - "$DEST/payload/site.tar.xz.part-"
tar -C "$work" -cf - ans | xz -T2 -6 > "$DEST/payload/extra.tar.xz"
(cd "$DEST/payload" && sha256sum site.tar.xz.part-* extra.tar.xz > SHA256SUMS)
rm -rf "$DEST/tree" && mkdir -p "$DEST/tree"
(cd "$ROOT" && git ls-files -z | xargs -0 cp --parents -t "$DEST/tree")
du -sh "$DEST"/payload/* "$DEST/tree"
