#!/usr/bin/env bash
# Build our own ARM Linux (armhf, Thumb-2) test programs, corpus/linux/src/*,
# into $CACHE/bin/, and write corpus/linux/own.programs.json, the list that
# record.py runs.  CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux.
#
# Matrix per source: {gcc 12, clang 14} x {-O2, -Os} x {fp, nofp}, linked
# dynamically against the cross toolchain's glibc/libstdc++ (run against the
# bookworm armhf sysroot from sysroot.sh), plus one static gcc -O2 fp build.
# Names: <program>-<compiler>-<opt>-<fp|nofp>[-static].
#
# An output is rebuilt only when its compile command or its source changed
# (a stamp next to it holds both).  Installs the toolchains with apt-get
# when missing (Debian bookworm, root or sudo).
# Usage: build.sh [-j JOBS]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux
BIN=$CACHE/bin
STAMPS=$BIN/.stamps
JOBS=$(nproc 2>/dev/null || echo 2)
if [ "${1:-}" = -j ] && [ -n "${2:-}" ]; then JOBS=$2; fi

export LC_ALL=C TZ=UTC SOURCE_DATE_EPOCH=0

log() { echo "build.sh: $*" >&2; }

# --- toolchains ----------------------------------------------------------
need=()
command -v arm-linux-gnueabihf-gcc >/dev/null 2>&1 || need+=(gcc-arm-linux-gnueabihf)
command -v arm-linux-gnueabihf-g++ >/dev/null 2>&1 || need+=(g++-arm-linux-gnueabihf)
command -v clang-14 >/dev/null 2>&1 || need+=(clang-14)
[ -x /usr/lib/llvm-14/bin/ld.lld ] || need+=(lld-14)   # what clang-14 -fuse-ld=lld runs
command -v qemu-arm >/dev/null 2>&1 || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
    log "installing ${need[*]}"
    # An armhf index that fails to download must not stop a host install.
    $SUDO apt-get update -q >&2 || log "apt-get update reported errors; continuing"
    $SUDO apt-get install -y -q "${need[@]}" >&2
fi

# --- flags ---------------------------------------------------------------
COMMON=(
    -g -fasynchronous-unwind-tables
    -mthumb -march=armv7-a -mfpu=vfpv3-d16 -mfloat-abi=hard
    -Wall -Wextra
    # Relative paths in the debug info: the outputs do not depend on where
    # the repository is checked out.
    "-ffile-prefix-map=$REPO/="
)
LINK=(-Wl,-z,now)
# clang finds the cross gcc's headers, crt files and libraries by itself
# (/usr/lib/gcc-cross/arm-linux-gnueabihf/12, /usr/arm-linux-gnueabihf) for
# this triple; lld links them.
CLANG_FLAGS=(--target=armv7a-linux-gnueabihf -fuse-ld=lld)

compiler_cmd() {  # compiler language -> command words
    case $1-$2 in
        gcc-c) echo arm-linux-gnueabihf-gcc -std=gnu11 ;;
        gcc-c++) echo arm-linux-gnueabihf-g++ -std=gnu++17 ;;
        clang-c) echo clang-14 "${CLANG_FLAGS[*]}" -std=gnu11 ;;
        clang-c++) echo clang++-14 "${CLANG_FLAGS[*]}" -std=gnu++17 ;;
    esac
}

# How each program is run: "args" (JSON list) and "stdin" (repo-relative
# path, or null).  Programs not listed take no arguments and /dev/null.
program_args() { echo '[]'; }
program_stdin() {
    case $1 in
        cwc) echo '"corpus/linux/inputs/own/words.txt"' ;;
        *) echo null ;;
    esac
}

# --- the build list ------------------------------------------------------
mkdir -p "$BIN" "$STAMPS"
mapfile -t SOURCES < <(cd "$HERE" && find src -maxdepth 1 \( -name '*.c' -o -name '*.cpp' \) | sort)
[ ${#SOURCES[@]} -gt 0 ] || { log "no sources in $HERE/src"; exit 1; }

# One line per output: name|source|language|compiler|opt|fp|link
plan=()
for src in "${SOURCES[@]}"; do
    base=$(basename "$src"); prog=${base%.*}
    case $base in *.cpp) lang=c++ ;; *) lang=c ;; esac
    for cc in gcc clang; do
        for opt in O2 Os; do
            for fp in fp nofp; do
                plan+=("$prog-$cc-$opt-$fp|$src|$lang|$cc|$opt|$fp|dynamic")
            done
        done
    done
    plan+=("$prog-gcc-O2-fp-static|$src|$lang|gcc|O2|fp|static")
done

build_one() {  # name src lang cc opt fp link
    local name=$1 src=$2 lang=$3 cc=$4 opt=$5 fp=$6 link=$7
    local -a cmd
    # shellcheck disable=SC2207  # compiler_cmd prints words on purpose
    cmd=($(compiler_cmd "$cc" "$lang"))
    cmd+=("${COMMON[@]}" "-$opt")
    if [ "$fp" = fp ]; then cmd+=(-fno-omit-frame-pointer); else cmd+=(-fomit-frame-pointer); fi
    cmd+=("${LINK[@]}")
    [ "$link" = static ] && cmd+=(-static)
    cmd+=("$HERE/$src" -o "$BIN/$name.tmp")
    local stamp
    stamp="$(printf '%q ' "${cmd[@]}")
$(sha256sum <"$HERE/$src")"
    if [ -f "$BIN/$name" ] && [ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$stamp" ]; then
        return 0
    fi
    if ! "${cmd[@]}" 2>"$BIN/$name.log"; then
        log "FAILED $name:"; cat "$BIN/$name.log" >&2
        return 1
    fi
    # Warnings are shown once, when the program is built.
    [ -s "$BIN/$name.log" ] && { log "$name:"; cat "$BIN/$name.log" >&2; }
    rm -f "$BIN/$name.log"
    mv -f "$BIN/$name.tmp" "$BIN/$name"
    printf '%s\n' "$stamp" >"$STAMPS/$name"
    echo built
}

start=$SECONDS
failed=0 built=0 running=0
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for line in "${plan[@]}"; do
    IFS='|' read -r -a f <<<"$line"
    # A few builds at a time, one per core.
    if [ $running -ge "$JOBS" ]; then wait -n || failed=$((failed + 1)); running=$((running - 1)); fi
    build_one "${f[@]}" >>"$results" &
    running=$((running + 1))
done
while [ $running -gt 0 ]; do wait -n || failed=$((failed + 1)); running=$((running - 1)); done
built=$(grep -c built "$results" || true)
if [ $failed -gt 0 ]; then log "$failed builds failed"; exit 1; fi
log "${#plan[@]} programs in $BIN ($built built, $((${#plan[@]} - built)) up to date) in $((SECONDS - start)) s"

# --- own.programs.json ---------------------------------------------------
printf '%s\n' "${plan[@]}" | while IFS='|' read -r name src lang cc opt fp link; do
    prog=$(basename "${src%.*}")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$lang" "$cc" "$opt" "$fp" "$link" \
        "$(program_args "$prog")" "$(program_stdin "$prog")"
done | python3 -c '
import json, sys
entries = []
for line in sys.stdin:
    name, lang, cc, opt, fp, link, args, stdin = line.rstrip("\n").split("\t")
    entries.append({
        "name": name,
        "path": "bin/" + name,
        "args": json.loads(args),
        "stdin": json.loads(stdin),
        "cwd": None,
        "source": "own",
        "language": lang,
        "compiler": cc,
        "opt": opt,
        "frame_pointer": fp == "fp",
        "link": link,
    })
entries.sort(key=lambda e: e["name"])
out = sys.argv[1]
with open(out + ".tmp", "w") as f:
    json.dump(entries, f, indent=1)
    f.write("\n")
import os
os.replace(out + ".tmp", out)
' "$HERE/own.programs.json"
log "wrote corpus/linux/own.programs.json"
