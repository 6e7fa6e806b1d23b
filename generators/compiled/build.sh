#!/usr/bin/env bash
# Build the compiled corpus: every program in src/ linked into one bare-metal
# ARM32 Thumb-2 ELF per (compiler, optimisation level, frame-pointer mode),
# 12 ELFs in all, plus manifest.json with the expected checksums.
#
# The expected checksums do not come from the ARM code: the same sources are
# compiled natively for the host (at -O0 and -O2, which must agree) with
# host/host_main.c, which prints the value of `entry` and of every
# entry_<name>.  check.py then runs the ELFs in Unicorn and compares.
#
# Runnable from any cwd; output is byte-for-byte deterministic.
# Usage: build.sh [OUTPUT_DIR]   (default: <repo>/corpus/elf)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
OUT_ARG="${1:-$REPO/corpus/elf}"
OUT="$(mkdir -p "$OUT_ARG" && cd "$OUT_ARG" && pwd)"
cd "$HERE"

export LC_ALL=C
export TZ=UTC
export SOURCE_DATE_EPOCH=0
export ZERO_AR_DATE=1

GCC=arm-none-eabi-gcc
CLANG=clang
HOSTCC=gcc

bash "$REPO/corpus/toolchains.sh"
PYTHON=python3
[ -x "$REPO/.venv/bin/python" ] && PYTHON="$REPO/.venv/bin/python"

# Sorted inputs: the link order (and so the layout) never depends on readdir.
mapfile -t SOURCES < <(cd "$HERE" && find src -maxdepth 1 -name '*.c' | sort)
HEADERS=(src/common.h)

COMPILERS=(gcc clang)
OPTS=(O0 O2 Os)
FPMODES=(fp nofp)

TARGET_FLAGS=(-mthumb -march=armv7-a -mfloat-abi=hard -mfpu=vfpv3-d16)
COMMON_FLAGS=(
    "${TARGET_FLAGS[@]}"
    -g -fasynchronous-unwind-tables
    -ffreestanding -nostdlib -fno-builtin
    -fno-stack-protector -fno-pic -fno-common -ffp-contract=off
    "-ffile-prefix-map=$HERE=."
    "-fdebug-prefix-map=$HERE=."
    -Wall -Wextra
)
GCC_FLAGS=()
CLANG_FLAGS=(--target=armv7a-none-eabihf -fdebug-compilation-dir=.)
# --nmagic turns off page alignment of the file layout (lld would otherwise
# pad the file to a 64 KiB boundary before .text, GNU ld to 4 KiB).
LINK_FLAGS=(-nostdlib -static -T link.ld -Wl,--build-id=none -Wl,--nmagic)
GCC_LINK_FLAGS=()
CLANG_LINK_FLAGS=(-fuse-ld=lld)
# GCC's runtime helpers (__aeabi_idivmod, __aeabi_uldivmod, ...) for both
# compilers; they come without .debug_frame CFI.
LIBGCC="$("$GCC" "${TARGET_FLAGS[@]}" -print-libgcc-file-name)"
[ -f "$LIBGCC" ] || { echo "build.sh: libgcc not found: $LIBGCC" >&2; exit 1; }

BUILD="$(mktemp -d "${TMPDIR:-/tmp}/compiled-corpus.XXXXXX")"
trap 'rm -rf "$BUILD"' EXIT

# --- expected checksums, from a native host build -------------------------
HOST_FLAGS=(-DCORPUS_HOST -std=gnu11 -fno-builtin -ffp-contract=off -Wall -Wextra -Isrc)
for level in O0 O2; do
    "$HOSTCC" "${HOST_FLAGS[@]}" "-$level" "${SOURCES[@]}" host/host_main.c -o "$BUILD/host-$level"
    "$BUILD/host-$level" >"$BUILD/expected-$level.txt"
done
if ! cmp -s "$BUILD/expected-O0.txt" "$BUILD/expected-O2.txt"; then
    echo "build.sh: host -O0 and -O2 checksums differ:" >&2
    diff "$BUILD/expected-O0.txt" "$BUILD/expected-O2.txt" >&2 || true
    exit 1
fi
HOST_VERSION="$("$HOSTCC" --version | head -n1)"

# --- the ARM builds --------------------------------------------------------
: >"$BUILD/builds.tsv"
for cc in "${COMPILERS[@]}"; do
    for opt in "${OPTS[@]}"; do
        for fp in "${FPMODES[@]}"; do
            name="$cc-$opt-$fp"
            objdir="$BUILD/$name"
            mkdir -p "$objdir"
            if [ "$cc" = gcc ]; then
                driver=$GCC; extra=("${GCC_FLAGS[@]}"); lextra=("${GCC_LINK_FLAGS[@]}")
            else
                driver=$CLANG; extra=("${CLANG_FLAGS[@]}"); lextra=("${CLANG_LINK_FLAGS[@]}")
            fi
            if [ "$fp" = fp ]; then fpflag=-fno-omit-frame-pointer; else fpflag=-fomit-frame-pointer; fi
            flags=("${extra[@]}" "${COMMON_FLAGS[@]}" "-$opt" "$fpflag")
            objs=()
            for src in "${SOURCES[@]}"; do
                obj="$objdir/$(basename "$src" .c).o"
                "$driver" "${flags[@]}" -c "$src" -o "$obj"
                objs+=("$obj")
            done
            "$driver" "${flags[@]}" "${LINK_FLAGS[@]}" "${lextra[@]}" "${objs[@]}" "$LIBGCC" \
                -o "$objdir/$name.elf"
            cp "$objdir/$name.elf" "$OUT/$name.elf"
            version="$("$driver" --version | head -n1)"
            shown=("${flags[@]}" "${LINK_FLAGS[@]}" "${lextra[@]}" "$LIBGCC")
            shown=("${shown[@]//$HERE/<compiled>}")
            # name, compiler, version, sha256, flags (US-separated)
            printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$cc" "$version" \
                "$(sha256sum "$OUT/$name.elf" | cut -d' ' -f1)" \
                "$(IFS=$'\x1f'; echo "${shown[*]}")" >>"$BUILD/builds.tsv"
            echo "built $name.elf ($(stat -c %s "$OUT/$name.elf") bytes)"
        done
    done
done

# --- manifest.json ---------------------------------------------------------
"$PYTHON" - "$BUILD/builds.tsv" "$BUILD/expected-O0.txt" "$OUT/manifest.json" \
    "$HOST_VERSION" "${SOURCES[@]}" "${HEADERS[@]}" host/host_main.c <<'PY'
import json
import sys

builds_tsv, expected_txt, out_path, host_version, *sources = sys.argv[1:]
expected = {}
with open(expected_txt) as f:
    for line in f:
        symbol, value = line.split()
        expected[symbol] = int(value)
programs = [
    {"name": s[len("entry_"):], "entry_symbol": s, "expected_checksum": v}
    for s, v in expected.items() if s.startswith("entry_")
]
builds = []
with open(builds_tsv) as f:
    for line in f:
        name, compiler, version, sha, flags = line.rstrip("\n").split("\t")
        builds.append({
            "file": f"{name}.elf",
            "compiler": compiler,
            "compiler_version": version,
            "flags": flags.split("\x1f"),
            "sha256": sha,
            "entry": "entry",
            "expected_checksum": expected["entry"],
            "programs": programs,
        })
manifest = {
    "generator": "generators/compiled/build.sh",
    "expected_checksums_from": f"native host build ({host_version}), -O0 and -O2 agree",
    "sources": [f"generators/compiled/{s}" for s in sources],
    "builds": builds,
}
with open(out_path, "w") as f:
    json.dump(manifest, f, indent=2, sort_keys=True)
    f.write("\n")
PY
echo "wrote manifest.json"
