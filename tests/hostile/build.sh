#!/usr/bin/env bash
# Build the hostile guest programs (tests/hostile/*.c, one class of attack
# on the host each; tests/test_hostile_guests.py runs them) into
# $CACHE/hostile/, CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}:
# static armhf Thumb-2 executables, the name of the source without .c.
#
# An output is rebuilt only when its compile command or its source changed
# (a stamp beside it holds both), so a second run builds nothing.  The cross
# compiler comes from corpus/toolchains.sh, which installs it with apt-get
# when it is missing; nothing else is installed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
OUT=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/hostile
STAMPS=$OUT/.stamps

export LC_ALL=C TZ=UTC SOURCE_DATE_EPOCH=0
log() { echo "hostile/build.sh: $*" >&2; }

command -v arm-linux-gnueabihf-gcc >/dev/null 2>&1 || bash "$REPO/corpus/toolchains.sh"

# -g and unwind tables as the corpus programs have them: the verifier
# checks its unwinders at the programs' stops, and wants their CFI.
FLAGS=(-static -O1 -g -fasynchronous-unwind-tables -mthumb -march=armv7-a -mfpu=vfpv3-d16 -mfloat-abi=hard
       -Wall -Wextra)
# Relative paths in the debug info: the output does not depend on where the
# repository is checked out, and neither does the stamp, so checkouts that
# share the cache do not rebuild each other's programs.
PREFIX_MAP="-ffile-prefix-map=$REPO/="

mkdir -p "$OUT" "$STAMPS"
built=0 total=0
for source in "$HERE"/*.c; do
    name=$(basename "$source" .c)
    total=$((total + 1))
    command=(arm-linux-gnueabihf-gcc "${FLAGS[@]}" "$PREFIX_MAP" -o "$OUT/$name.tmp" "$source")
    stamp="$(printf '%q ' arm-linux-gnueabihf-gcc "${FLAGS[@]}") $name.c
$(sha256sum <"$source")"
    if [ -f "$OUT/$name" ] && [ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$stamp" ]; then
        continue
    fi
    "${command[@]}"
    mv -f "$OUT/$name.tmp" "$OUT/$name"
    printf '%s\n' "$stamp" >"$STAMPS/$name"
    built=$((built + 1))
done
log "$total programs in $OUT ($built built, $((total - built)) up to date)"
