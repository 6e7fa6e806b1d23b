#!/usr/bin/env bash
# Install the cross toolchains (and a host gcc) with apt when any is missing:
# bare-metal arm-none-eabi, the armhf Linux cross compilers and qemu-user
# (the reference the Linux programs' outputs are checked against), and csmith
# with its headers (random C programs for `make synth-fuzz` and its test).
# Used by `make toolchains` and by the corpus build scripts.
set -euo pipefail
for tool in arm-none-eabi-gcc clang ld.lld gcc arm-linux-gnueabihf-gcc arm-linux-gnueabihf-g++ qemu-arm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        SUDO=""
        if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
        $SUDO apt-get update -q
        $SUDO apt-get install -y -q gcc-arm-none-eabi clang lld gcc gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf \
            qemu-user >/dev/null
        break
    fi
done
if ! command -v csmith >/dev/null 2>&1 || [ ! -f /usr/include/csmith/csmith.h ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q csmith libcsmith-dev >/dev/null
fi
