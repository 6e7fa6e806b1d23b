#!/usr/bin/env bash
# Debian's armhf Chromium (chromium:armhf, clang-built, 32-bit Thumb-2) and
# its library closure, fetched with `apt-get download` and unpacked with
# `dpkg -x` into a root of their own: nothing armhf is ever installed on the
# host, nothing lands in the repository. The result is
#   $CACHE/debs/   the downloaded .debs
#   $CACHE/root/   the unpacked tree (usr/lib/chromium/chromium and every
#                  library it loads), with VERSIONS ("package version" lines)
# where CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/chromium.
#
# The closure is every armhf package `apt-cache depends --recurse` reaches
# from chromium:armhf through Depends (recommends and the like left out):
# about 380 packages, 240 MB of downloads, 700 MB unpacked. Idempotent: when
# the root holds exactly this list at the versions apt offers now, nothing is
# done. One bookworm-security index may fail to download: reported, and the
# indexes apt has are used.
#
# Usage: corpus/chromium/fetch.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/chromium
DEBS=$CACHE/debs
ROOT=$CACHE/root

log() { echo "chromium/fetch.sh: $*" >&2; }
. "$HERE/../linux/common.sh"  # unpack_packages, self_contained_root

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
UPDATED=no
apt_update() {
    [ $UPDATED = yes ] && return 0
    $SUDO apt-get update -q >&2 || log "apt-get update reported errors; continuing with the indexes it has"
    UPDATED=yes
}
if ! dpkg --print-foreign-architectures | grep -qx armhf; then
    log "adding the armhf architecture"
    $SUDO dpkg --add-architecture armhf
    apt_update
fi
if ! command -v qemu-arm >/dev/null 2>&1; then
    apt_update
    $SUDO apt-get install -y -q qemu-user >&2
fi

closure() {
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances chromium:armhf 2>/dev/null | grep -E '^[^ <].*:armhf$' | LC_ALL=C sort -u
}
# "package version" for each, the version apt would download now.
candidates() {
    apt-cache policy "$@" 2>/dev/null | awk '
        /^[^ ].*:$/   { pkg = $1; sub(/:armhf:$/, "", pkg) }
        /Candidate:/  { print pkg, $2 }' | LC_ALL=C sort
}
packages=$(closure)
if [ -z "$packages" ]; then
    apt_update
    packages=$(closure)
fi
[ -n "$packages" ] || { log "apt knows no chromium:armhf (is the armhf architecture's index there?)"; exit 1; }
# shellcheck disable=SC2086  # one name a word
want=$(candidates $packages)
if grep -v ' [0-9]' <<<"$want" | grep -q .; then
    log "no armhf candidate for: $(grep -v ' [0-9]' <<<"$want" | cut -d' ' -f1 | paste -sd' ')"; exit 1
fi
if [ -f "$ROOT/VERSIONS" ] && [ "$(cat "$ROOT/VERSIONS")" = "$want" ] \
   && [ -x "$ROOT/usr/lib/chromium/chromium" ]; then
    log "up to date: $ROOT ($(wc -l <<<"$want") packages)"
    exit 0
fi

# Unpacked into a fresh directory and swapped in at the end: an interrupted
# run never leaves a half root that looks complete.
mkdir -p "$DEBS"  # and the cache above it
tmp=$(mktemp -d "$CACHE/root.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unpack_packages "$want" "$tmp" || exit 1
self_contained_root "$tmp" || exit 1
[ -x "$tmp/usr/lib/chromium/chromium" ] || { log "no usr/lib/chromium/chromium in the packages"; exit 1; }
echo "$want" >"$tmp/VERSIONS"
chmod 755 "$tmp"
rm -rf "$ROOT"
mv "$tmp" "$ROOT"
trap - EXIT
log "unpacked $(wc -l <<<"$want") packages into $ROOT"
