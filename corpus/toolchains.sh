#!/usr/bin/env bash
# Install the cross toolchains (and a host gcc) with apt when any is missing:
# bare-metal arm-none-eabi, the armhf Linux cross compilers and qemu-user
# (the reference the Linux programs' outputs are checked against), csmith
# with its headers (random C programs for `make synth-fuzz` and its test)
# and creduce (`make synth-reduce`: a finding's program made small).
# Used by `make toolchains` and by the corpus build scripts.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
# One bookworm-security armhf index may fail to download ("File has
# unexpected size ... Mirror sync in progress?"): apt still has the others,
# so a failing update is reported and the install goes on, as in the other
# corpus scripts.
UPDATED=no
apt_update() {
    [ $UPDATED = yes ] && return 0
    $SUDO apt-get update -q || echo "toolchains.sh: apt-get update reported errors; continuing with the indexes it has" >&2
    UPDATED=yes
}
for tool in arm-none-eabi-gcc clang ld.lld gcc arm-linux-gnueabihf-gcc arm-linux-gnueabihf-g++ qemu-arm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        apt_update
        $SUDO apt-get install -y -q gcc-arm-none-eabi clang lld gcc gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf \
            qemu-user >/dev/null
        break
    fi
done
if ! command -v csmith >/dev/null 2>&1 || [ ! -f /usr/include/csmith/csmith.h ] || ! command -v creduce >/dev/null 2>&1
then
    apt_update
    $SUDO apt-get install -y -q csmith libcsmith-dev creduce >/dev/null
fi
