#!/usr/bin/env bash
# make long-run: a real program of more than a billion instructions verified
# by `verify-elf` with its default options, to its end (docs/robustness.md,
# "Defaults that fit real workloads"). Not part of CI: about five minutes.
#
#  1. Debian's own armhf gzip (the shipped binary of debian.sh, the same
#     .deb, cache file and stamp; downloaded with apt-get when missing).
#  2. Its input, made here and never committed: the English-like text of
#     debian.sh's make_text (the same generator and bytes, text.txt is its
#     first 40 KB), 4 MB of it.
#  3. qemu-user runs `gzip -9 -c -n` on it: the exit status and the stdout
#     digest a correct run has.
#  4. verify-elf runs it with no option but the run's own (sysroot, stdin,
#     program arguments) and the expectations of 3: the first run counts the
#     instructions and the verified one samples (the automatic stride), the
#     instruction budget and the clock are the defaults'. GNU time gives the
#     wall time and the peak resident size of the largest process.
#
# Cache: ${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux, as
# debian.sh's (bin/debian-gzip, debs/, long-run/ for the input and outputs).
# Usage: corpus/linux/long-run.sh [BYTES] (default 4000000)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux
DEBS=$CACHE/debs
BIN=$CACHE/bin
SYSROOT=$CACHE/sysroot
WORK=$CACHE/long-run
BYTES=${1:-4000000}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
APT_USER=(-o APT::Sandbox::User="$(id -un)")

log() { echo "long-run.sh: $*" >&2; }
die() { log "$*"; exit 1; }

. "$HERE/common.sh"  # deb_for

[ -d "$SYSROOT/lib" ] || die "no sysroot in $SYSROOT: make linux-sysroot"
command -v qemu-arm >/dev/null 2>&1 || die "qemu-arm is missing (apt-get install qemu-user)"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"

# shipped PACKAGE PATH-IN-PACKAGE NAME: common.sh's ship_one at the candidate version.
shipped() {
    local ver
    ver=$(apt-cache policy "$1:armhf" 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
    [ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no armhf candidate for $1 (dpkg --add-architecture armhf; apt-get update)"
    ship_one "$1" "$ver" "$2" "$3"
}

shipped gzip bin/gzip debian-gzip
mkdir -p "$WORK"
INPUT=$WORK/text-$BYTES.txt
if [ ! -s "$INPUT" ]; then
    "$PYTHON" "$HERE/long_text.py" "$BYTES" >"$INPUT.tmp"
    mv "$INPUT.tmp" "$INPUT"
fi
head -c 1000 "$REPO/corpus/linux/inputs/debian/text.txt" | cmp -s - <(head -c 1000 "$INPUT") \
    || die "$INPUT does not begin as inputs/debian/text.txt: not make_text's generator"
ARGS=(-9 -c -n)

set +e
qemu-arm -L "$SYSROOT" "$BIN/debian-gzip" "${ARGS[@]}" <"$INPUT" >"$WORK/qemu.out"
QEMU_EXIT=$?
set -e
QEMU_SHA=$(sha256sum <"$WORK/qemu.out" | cut -d' ' -f1)
log "qemu-user: gzip ${ARGS[*]} on $(wc -c <"$INPUT") bytes: exit $QEMU_EXIT, stdout sha256 $QEMU_SHA"

set +e
/usr/bin/time -f "long-run: wall %e s, CPU %U s user + %S s system, peak resident %M KiB (the largest process)" \
    "$PYTHON" -m harness verify-elf "$BIN/debian-gzip" --sysroot "$SYSROOT" --stdin "$INPUT" \
    --expect-exit "$QEMU_EXIT" --expect-stdout-sha256 "$QEMU_SHA" --json "$WORK/report.json" \
    -- "${ARGS[@]}" 2>&1 | tee "$WORK/verify-elf.log" | tail -n 8
STATUS=${PIPESTATUS[0]}
set -e
"$PYTHON" - "$WORK/report.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
program, timing = report["programs"][0], report["timing"]
print(f"long-run: {timing['instructions']:,} instructions, {program['stops']:,} stops verified "
      f"({program['sampling']['why']}), self-check {program['self_check']}, exit {program.get('exit_status')}, "
      f"{timing['seconds']} s")
EOF
[ "$STATUS" = 0 ] || die "verify-elf exited $STATUS (see $WORK/verify-elf.log)"
log "verify-elf ran it to its end: the exit status and stdout are qemu-user's"
