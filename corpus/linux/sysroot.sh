#!/usr/bin/env bash
# Build the armhf runtime sysroot that the Linux corpus programs run against
# (under qemu-arm -L, and later in the harness's own loader).
#
# Debian bookworm armhf .debs are fetched with `apt-get download` and unpacked
# with `dpkg -x`: nothing armhf is ever installed on the host.  The result is
#   $CACHE/debs/      the downloaded .debs
#   $CACHE/sysroot/   the unpacked tree, with VERSIONS ("package version" lines)
# where CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux.
#
# Idempotent: when the sysroot already holds exactly this package list at the
# versions apt offers now, nothing is done.  Must work as root on a fresh
# bookworm machine, so it adds the armhf architecture and qemu-user when missing.
set -euo pipefail

CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux
DEBS=$CACHE/debs
SYSROOT=$CACHE/sysroot

# Runtime libraries: the C/C++ runtime for our own programs, and what the
# Debian-built corpus programs (corpus/linux/debian*) link against.  Add a
# package here when a program needs one more shared library.  The Debian
# command-line tools (debian.sh's SHIPPED) need, by `readelf -d`:
#   sed, tar, find, ls: libselinux1 (which needs libpcre2-8-0), sed and tar
#   libacl1; grep libpcre2-8-0; gawk libsigsegv2, libmpfr6, libgmp10 (and
#   libreadline8); bc libreadline8; factor libgmp10; python3.11 libexpat1,
#   zlib1g, and its standard library (/usr/lib/python3.11, the modules of
#   libpython3.11-minimal; its _hashlib and _ssl would need libssl3, which
#   nothing here imports).  libacl1 2.3 no longer links libattr1.
PACKAGES=(
    libacl1
    libbz2-1.0
    libc6
    libexpat1
    libgcc-s1
    libgmp10
    liblua5.4-0
    liblzma5
    libmpfr6
    libncursesw6
    libpcre2-8-0
    libpython3.11-minimal
    libreadline8
    libselinux1
    libsigsegv2
    libsqlite3-0
    libstdc++6
    libtinfo6
    zlib1g
)

# Packages added for programs of one's own (`unwind-harness sysroot add PKG`,
# which runs this script with SYSROOT_ADD="PKG ..."), kept in EXTRA once the
# sysroot holds them: each with every armhf package it reaches through
# Depends and Pre-Depends.
EXTRA=$CACHE/extra-packages

# Bump when this script changes what it puts in the sysroot, so that a
# sysroot made by an older version is rebuilt.
LAYOUT=3

log() { echo "sysroot.sh: $*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi

# One bookworm-security armhf index may fail to download; apt still has the
# main index, so a failing update is reported and then ignored.
apt_update() { $SUDO apt-get update -q >&2 || log "apt-get update reported errors; continuing with the indexes it has"; }

updated=no
if ! dpkg --print-foreign-architectures | grep -qx armhf; then
    log "adding the armhf architecture"
    $SUDO dpkg --add-architecture armhf
    apt_update
    updated=yes
fi

# qemu-user runs the programs (record.py); install it here, with the sysroot.
if ! command -v qemu-arm >/dev/null 2>&1; then
    [ $updated = yes ] || { apt_update; updated=yes; }
    $SUDO apt-get install -y -q qemu-user >&2
fi

# The added packages and what they depend on (armhf packages only: apt lists
# virtual ones in <angle brackets>).
added=()
[ -f "$EXTRA" ] && mapfile -t added <"$EXTRA"
# shellcheck disable=SC2206  # one package name a word
added+=(${SYSROOT_ADD:-})
reach() {
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances "${added[@]/%/:armhf}" 2>/dev/null | grep -E '^[^ <].*:armhf$' | sed 's/:armhf$//'
}
unknown() {
    for p in "${added[@]}"; do
        printf '%s\n' "${reached[@]}" | grep -qx -- "$p" || echo "$p"
    done
}
if [ ${#added[@]} -gt 0 ]; then
    mapfile -t reached < <(reach)
    if [ -n "$(unknown)" ] && [ $updated = no ]; then
        apt_update; updated=yes
        mapfile -t reached < <(reach)
    fi
    if [ -n "$(unknown)" ]; then
        log "no armhf package named $(unknown | paste -sd' ') (apt-cache knows none)"; exit 1
    fi
    mapfile -t PACKAGES < <(printf '%s\n' "${PACKAGES[@]}" "${reached[@]}" | LC_ALL=C sort -u)
fi

# "package version" for each package, the version apt would download now
# ("(none)" when apt knows none).  One apt-cache call: each one reads the
# whole package cache, which takes a second.
candidates() {
    apt-cache policy "${PACKAGES[@]/%/:armhf}" 2>/dev/null | awk '
        /^[^ ].*:$/   { pkg = $1; sub(/:armhf:$/, "", pkg) }
        /Candidate:/  { print pkg, $2 }'
}
# The added packages kept for the next rebuild, once the sysroot holds them.
keep_added() {
    [ ${#added[@]} -gt 0 ] || return 0
    printf '%s\n' "${added[@]}" | LC_ALL=C sort -u >"$EXTRA.tmp"
    mv "$EXTRA.tmp" "$EXTRA"
}
want=$(candidates | LC_ALL=C sort)
if ! echo "$want" | grep -q '^libc6 [0-9]'; then
    [ $updated = yes ] || { apt_update; updated=yes; }
    want=$(candidates | LC_ALL=C sort)
fi
for p in "${PACKAGES[@]}"; do
    if ! echo "$want" | grep -q "^$p [0-9]"; then
        log "no armhf candidate for $p (is 'apt-get update' done?)"; exit 1
    fi
done

if [ -f "$SYSROOT/VERSIONS" ] && [ "$(cat "$SYSROOT/VERSIONS")" = "$want" ] \
   && [ "$(cat "$SYSROOT/.layout" 2>/dev/null)" = "$LAYOUT" ] \
   && [ -e "$SYSROOT/lib/ld-linux-armhf.so.3" ]; then
    log "up to date: $SYSROOT ($(echo "$want" | wc -l) packages)"
    keep_added
    exit 0
fi

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # unpack_packages, self_contained_root

# Unpack into a fresh directory and swap it in at the end, so that an
# interrupted run never leaves a half sysroot that looks complete.
mkdir -p "$DEBS"  # and the cache above it
tmp=$(mktemp -d "$CACHE/sysroot.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unpack_packages "$want" "$tmp" || exit 1

self_contained_root "$tmp" || exit 1

echo "$want" >"$tmp/VERSIONS"
echo "$LAYOUT" >"$tmp/.layout"
if [ ! -e "$tmp/lib/ld-linux-armhf.so.3" ]; then
    log "lib/ld-linux-armhf.so.3 does not resolve inside the sysroot"; exit 1
fi
chmod 755 "$tmp"
rm -rf "$SYSROOT"
mv "$tmp" "$SYSROOT"
trap - EXIT
keep_added
log "unpacked $(echo "$want" | wc -l) packages into $SYSROOT"
