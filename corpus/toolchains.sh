#!/usr/bin/env bash
# Install the cross toolchains (and a host gcc) with apt when any is missing.
# Used by `make toolchains` and by the corpus build scripts.
set -euo pipefail
for tool in arm-none-eabi-gcc clang ld.lld gcc; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        SUDO=""
        if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
        $SUDO apt-get update -q
        $SUDO apt-get install -y -q gcc-arm-none-eabi clang lld gcc >/dev/null
        break
    fi
done
