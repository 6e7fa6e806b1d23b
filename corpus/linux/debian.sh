#!/usr/bin/env bash
# The Debian part of the Linux corpus: real programs, armhf, run under
# qemu-arm (and the harness's loader) against the sysroot of sysroot.sh.
#
#  1. Our builds of Debian source packages (apt-get source, dpkg-source -x,
#     Debian's patches applied), compiled directly with the cross compilers,
#     no configure: the sqlite3 shell (amalgamation made from the source
#     tree with the package's own tclsh tools), the lua5.4 interpreter, zlib's
#     example and minigzip, and bzip2.  Library code (zlib, libbz2, sqlite,
#     liblua) is compiled into each program, so all of it carries our CFI.
#     Each program is built with {gcc 12, clang 14} x {-O2, -Os} x
#     {-fno-omit-frame-pointer, -fomit-frame-pointer}, linked dynamically with
#     -z now, plus one static build (gcc -O2 with frame pointer).
#  2. Debian's own armhf binaries, unchanged: lua5.4, gzip, bzip2, xz (and
#     xz -T2: threads), sqlite3, and command-line tools nobody here built:
#     sort, sha256sum, od, ls, factor (coreutils), sed, grep, gawk, bc, diff
#     (diffutils), tar, find (findutils), python3.11 (python3.11-minimal),
#     each with a real input of inputs/debian/ (from `apt-get download
#     PKG:armhf`, unpacked with dpkg -x; their libraries are sysroot.sh's).
#  3. corpus/linux/debian.programs.json: every program, its arguments, its
#     standard input and working directory (inputs/debian/), its provenance.
#  4. Every program is run twice under qemu-arm: its exit status (0, or the
#     one EXPECT_EXIT gives) and the same standard output both times.
#
# Cache (never in the repository): CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux
#   $CACHE/src/    Debian source packages and their unpacked trees
#   $CACHE/debs/   the shipped armhf .debs
#   $CACHE/bin/    the programs (and bin/.stamps/, what each was built from)
#   $CACHE/log/    compiler output, one file a program
# The sysroot is sysroot.sh's ($CACHE/sysroot); it is made first when missing.
#
# Usage: corpus/linux/debian.sh [--no-verify] [--count] [--jobs N]
#   --count     also count each program's instructions (from qemu-arm's
#               translation and execution log; a few minutes for all)
# Idempotent: a program whose sources, compiler and flags have not changed is
# not rebuilt; nothing armhf is ever installed on the host.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${UNWIND_HARNESS_CACHE:-$HOME/.cache/unwind-harness}/linux
SRC=$CACHE/src
DEBS=$CACHE/debs
BIN=$CACHE/bin
LOGS=$CACHE/log
SYSROOT=$CACHE/sysroot
INPUTS=corpus/linux/inputs/debian           # repository-relative
JSON=$HERE/debian.programs.json

VERIFY=yes
COUNT=no
JOBS=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
    case $1 in
        --no-verify) VERIFY=no ;;
        --count) COUNT=yes ;;
        --jobs) JOBS=$2; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "debian.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

log() { echo "debian.sh: $*" >&2; }
die() { log "$*"; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
APT_USER=(-o APT::Sandbox::User="$(id -un)")

# ---------------------------------------------------------------- host tools

# One bookworm-security armhf index may fail to download: report and go on.
UPDATED=no
apt_update() {
    [ $UPDATED = yes ] && return 0
    $SUDO apt-get update -q >&2 || log "apt-get update reported errors; continuing with the indexes it has"
    UPDATED=yes
}

host_tools() {
    local need=() t pkg
    # command  package
    while read -r t pkg; do
        command -v "$t" >/dev/null 2>&1 || need+=("$pkg")
    done <<'EOF'
dpkg-source dpkg-dev
arm-linux-gnueabihf-gcc gcc-arm-linux-gnueabihf
arm-linux-gnueabihf-ld binutils-arm-linux-gnueabihf
clang-14 clang-14
qemu-arm qemu-user
tclsh tcl
gcc gcc
make make
bzip2 bzip2
xz xz-utils
python3 python3
sha256sum coreutils
EOF
    # Static links need libc.a of the cross libc.
    [ -e /usr/arm-linux-gnueabihf/lib/libc.a ] || need+=(libc6-dev-armhf-cross)
    if [ ${#need[@]} -gt 0 ]; then
        log "installing host tools: ${need[*]}"
        apt_update
        $SUDO apt-get install -y -q "${need[@]}" >&2
    fi
    if ! dpkg --print-foreign-architectures | grep -qx armhf; then
        log "adding the armhf architecture"
        $SUDO dpkg --add-architecture armhf
        UPDATED=no; apt_update
    fi
    # apt-get source needs deb-src entries: add deb-src to the Types: lines
    # of the deb822 sources when missing.
    local sources=/etc/apt/sources.list.d/debian.sources
    if [ -f "$sources" ] && grep -E '^Types:' "$sources" | grep -qvw 'deb-src'; then
        log "adding deb-src to $sources"
        $SUDO sed -i -E '/^Types:/{/(^|[[:space:]])deb-src([[:space:]]|$)/!s/$/ deb-src/}' "$sources"
        UPDATED=no; apt_update
    fi
    # An older one-line /etc/apt/sources.list: a deb-src line for each deb line.
    local list=/etc/apt/sources.list
    if [ -f "$list" ] && grep -qE '^deb[[:space:]]' "$list" && ! grep -qE '^deb-src[[:space:]]' "$list"; then
        log "adding deb-src lines to $list"
        sed -nE 's/^deb([[:space:]])/deb-src\1/p' "$list" | $SUDO tee -a "$list" >/dev/null
        UPDATED=no; apt_update
    fi
}

# --------------------------------------------------------------- versions

# The source version `apt-get source` would fetch now: the highest known.
source_version() {
    local best="" v
    for v in $(apt-cache showsrc --only-source "$1" 2>/dev/null | awk '/^Version:/ {print $2}'); do
        if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$best"; then best=$v; fi
    done
    echo "$best"
}

# The armhf binary package version `apt-get download` would fetch now.
binary_version() {
    apt-cache policy "$1:armhf" 2>/dev/null | awk '/Candidate:/ {print $2; exit}'
}

# ---------------------------------------------------------------- sources

# fetch_source PKG -> sets SRCDIR (unpacked, patched tree) and SRCVER.
fetch_source() {
    local pkg=$1 ver dsc dir
    ver=$(source_version "$pkg")
    if [ -z "$ver" ]; then apt_update; ver=$(source_version "$pkg"); fi
    [ -n "$ver" ] || die "no source package $pkg (are deb-src entries set up?)"
    dir=$SRC/${pkg}_${ver//:/%3a}
    if [ ! -f "$dir/.unpacked" ]; then
        dsc=$SRC/${pkg}_${ver#*:}.dsc
        if [ ! -f "$dsc" ]; then
            log "downloading source $pkg $ver"
            (cd "$SRC" && apt-get source -q --download-only "${APT_USER[@]}" "$pkg=$ver" >&2)
        fi
        [ -f "$dsc" ] || die "apt-get source gave no $dsc"
        rm -rf "$dir"
        # The .dsc signatures cannot be checked without Debian's keyring; apt
        # checked the files' hashes against the signed Release already.
        dpkg-source -q -x "$dsc" "$dir" >"$SRC/${pkg}.unpack.log" 2>&1 \
            || { cat "$SRC/${pkg}.unpack.log" >&2; die "dpkg-source -x $dsc failed"; }
        touch "$dir/.unpacked"
    fi
    SRCDIR=$dir
    SRCVER=$ver
}

# The sqlite3 amalgamation (sqlite3.c, sqlite3.h, shell.c), made from the
# source tree by its own main.mk: host gcc builds lemon, mkkeywordhash and
# mksourceid, tclsh runs the generator scripts.  No configure.
sqlite_amalgamation() {
    local top=$1 out=$1/.amalgamation
    if [ ! -f "$out/.done" ]; then
        log "making the sqlite3 amalgamation"
        rm -rf "$out"; mkdir -p "$out"
        (cd "$out" && make -f ../main.mk TOP=.. BCC="gcc -O1" TCC=gcc TCCX=gcc \
            NAWK=awk TCLSH_CMD=tclsh sqlite3.c shell.c >make.log 2>&1) \
            || { tail -30 "$out/make.log" >&2; die "sqlite3 amalgamation failed"; }
        touch "$out/.done"
    fi
}

# ----------------------------------------------------------------- builds

COMMON_FLAGS="-g -fasynchronous-unwind-tables -mthumb -march=armv7-a -mfpu=vfpv3-d16 -mfloat-abi=hard"

cc_for() {
    case $1 in
        gcc) echo "arm-linux-gnueabihf-gcc" ;;
        clang) echo "clang-14 --target=armv7a-linux-gnueabihf --gcc-toolchain=/usr --ld-path=/usr/bin/arm-linux-gnueabihf-ld" ;;
    esac
}

# What a build depends on besides its command line: the compiler's version.
compiler_id() {
    case $1 in
        gcc) arm-linux-gnueabihf-gcc --version | head -1 ;;
        clang) clang-14 --version | head -1 ;;
    esac
}

# Per-program sources and flags; set by prepare_sources.
declare -A P_DIR P_VER P_PKG P_SRCS P_DEFS P_LIBS P_ARGS P_STDIN P_CWD

prepare_sources() {
    mkdir -p "$SRC"
    local z b l s
    fetch_source zlib; z=$SRCDIR; ZLIB_VER=$SRCVER
    fetch_source bzip2; b=$SRCDIR; BZIP2_VER=$SRCVER
    fetch_source lua5.4; l=$SRCDIR; LUA_VER=$SRCVER
    fetch_source sqlite3; s=$SRCDIR; SQLITE_VER=$SRCVER
    sqlite_amalgamation "$s"

    local zlib_lib="adler32.c compress.c crc32.c deflate.c gzclose.c gzlib.c gzread.c gzwrite.c infback.c inffast.c inflate.c inftrees.c trees.c uncompr.c zutil.c"
    # What zlib's configure finds on Linux, given by hand.
    local zlib_defs="-D_LARGEFILE64_SOURCE=1 -DHAVE_UNISTD_H -DHAVE_STDARG_H"

    P_PKG[zlib-example]=zlib; P_DIR[zlib-example]=$z; P_VER[zlib-example]=$ZLIB_VER
    P_SRCS[zlib-example]="test/example.c $zlib_lib"
    P_DEFS[zlib-example]="-I. $zlib_defs"; P_LIBS[zlib-example]=""

    P_PKG[minigzip]=zlib; P_DIR[minigzip]=$z; P_VER[minigzip]=$ZLIB_VER
    P_SRCS[minigzip]="test/minigzip.c $zlib_lib"
    P_DEFS[minigzip]="-I. $zlib_defs"; P_LIBS[minigzip]=""

    P_PKG[bzip2]=bzip2; P_DIR[bzip2]=$b; P_VER[bzip2]=$BZIP2_VER
    P_SRCS[bzip2]="bzip2.c blocksort.c huffman.c crctable.c randtable.c compress.c decompress.c bzlib.c"
    P_DEFS[bzip2]="-D_FILE_OFFSET_BITS=64"; P_LIBS[bzip2]=""

    # lua.c and the library, not luac.c; LUA_USE_LINUX as upstream's "linux".
    # Debian's luaconf.h includes a header that debian/rules writes.
    if [ ! -f "$l/src/lua5.4-deb-multiarch.h" ]; then
        printf '#ifndef _LUA_DEB_MULTIARCH_\n#define _LUA_DEB_MULTIARCH_\n#define DEB_HOST_MULTIARCH "arm-linux-gnueabihf"\n#endif\n' \
            >"$l/src/lua5.4-deb-multiarch.h"
    fi
    local lua_srcs=""
    local f
    for f in "$l"/src/*.c; do
        case ${f##*/} in luac.c) ;; *) lua_srcs+=" src/${f##*/}" ;; esac
    done
    P_PKG[lua]=lua5.4; P_DIR[lua]=$l; P_VER[lua]=$LUA_VER
    P_SRCS[lua]=${lua_srcs# }
    P_DEFS[lua]="-DLUA_COMPAT_5_3 -DLUA_USE_LINUX"; P_LIBS[lua]="-Wl,-E -lm -ldl"

    # The shell without readline or extension loading: only libc and libm
    # (glibc 2.34+ has the pthread functions in libc).
    P_PKG[sqlite3]=sqlite3; P_DIR[sqlite3]=$s/.amalgamation; P_VER[sqlite3]=$SQLITE_VER
    P_SRCS[sqlite3]="shell.c sqlite3.c"
    P_DEFS[sqlite3]="-I. -DSQLITE_OMIT_LOAD_EXTENSION -DHAVE_USLEEP=1"
    P_LIBS[sqlite3]="-lm"
}

# build_one NAME PROGRAM COMPILER OPT FP LINK: compile PROGRAM's sources into
# $BIN/NAME unless the stamp of the last build says nothing changed.
build_one() {
    local name=$1 prog=$2 comp=$3 opt=$4 fp=$5 link=$6
    local dir=${P_DIR[$prog]} fpflag linkflags cc flags stamp
    case $fp in fp) fpflag=-fno-omit-frame-pointer ;; nofp) fpflag=-fomit-frame-pointer ;; esac
    case $link in dynamic) linkflags="-Wl,-z,now" ;; static) linkflags="-static" ;; esac
    cc=$(cc_for "$comp")
    flags="$COMMON_FLAGS -$opt $fpflag -ffile-prefix-map=$SRC=/usr/src/debian ${P_DEFS[$prog]} ${P_SRCS[$prog]} $linkflags ${P_LIBS[$prog]}"
    stamp="$cc $flags"$'\n'"in $dir"$'\n'"package ${P_PKG[$prog]} ${P_VER[$prog]}"$'\n'"compiler $(compiler_id "$comp")"
    if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/.stamps/$name" 2>/dev/null)" = "$stamp" ]; then
        return 0
    fi
    log "building $name"
    local out=$BIN/.$name.tmp t0=$SECONDS
    # shellcheck disable=SC2086  # flags are words
    if (cd "$dir" && $cc $flags -o "$out") >"$LOGS/$name.log" 2>&1; then
        mv -f "$out" "$BIN/$name"
        printf '%s' "$stamp" >"$BIN/.stamps/$name"
        log "built $name ($((SECONDS - t0)) s)"
    else
        rm -f "$out"
        log "FAILED $name (see $LOGS/$name.log)"; tail -20 "$LOGS/$name.log" >&2
        return 1
    fi
}

# All builds: NAME PROGRAM COMPILER OPT FP LINK, one a line.
build_list() {
    local prog c o f
    for prog in bzip2 lua minigzip sqlite3 zlib-example; do
        for c in gcc clang; do
            for o in O2 Os; do
                for f in fp nofp; do
                    echo "$prog-$c-$o-$f $prog $c $o $f dynamic"
                done
            done
        done
        echo "$prog-gcc-O2-fp-static $prog gcc O2 fp static"
    done
}

build_all() {
    mkdir -p "$BIN/.stamps" "$LOGS"
    local failed=0 running=0 line
    local -a pids=()
    # The biggest first (sqlite3.c), so that the cores stay busy to the end.
    while read -r line; do
        # shellcheck disable=SC2086
        build_one $line &
        pids+=($!)
        running=$((running + 1))
        if [ $running -ge "$JOBS" ]; then
            wait -n || failed=1
            running=$((running - 1))
        fi
    done < <(build_list | awk '$2 == "sqlite3"'; build_list | awk '$2 != "sqlite3"')
    while [ $running -gt 0 ]; do
        wait -n || failed=1
        running=$((running - 1))
    done
    [ $failed = 0 ] || die "some builds failed"
}

# ---------------------------------------------------------- shipped binaries

# PACKAGE  PATH-IN-PACKAGE  NAME
# The tools' shared libraries (libselinux1, libacl1, libpcre2-8-0, libgmp10,
# libmpfr6, libsigsegv2, libexpat1) and python3.11's standard library
# (libpython3.11-minimal) are in sysroot.sh's PACKAGES.
SHIPPED="lua5.4 usr/bin/lua5.4 debian-lua5.4
gzip bin/gzip debian-gzip
bzip2 bin/bzip2 debian-bzip2
xz-utils usr/bin/xz debian-xz
xz-utils usr/bin/xz debian-xz-T2
sqlite3 usr/bin/sqlite3 debian-sqlite3
coreutils usr/bin/sort debian-sort
coreutils usr/bin/sha256sum debian-sha256sum
coreutils usr/bin/od debian-od
coreutils bin/ls debian-ls
coreutils usr/bin/factor debian-factor
sed bin/sed debian-sed
grep bin/grep debian-grep
gawk usr/bin/gawk debian-gawk
bc usr/bin/bc debian-bc
diffutils usr/bin/diff debian-diff
tar bin/tar debian-tar
findutils usr/bin/find debian-find
python3.11-minimal usr/bin/python3.11 debian-python3.11"
declare -A SHIP_VER

# A program whose exit status is not 0 by design (diff: the files differ).
declare -A EXPECT_EXIT=([debian-diff]=1)

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # deb_for

shipped_all() {
    local pkg path name ver
    while read -r pkg path name; do
        ver=$(binary_version "$pkg")
        if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then apt_update; ver=$(binary_version "$pkg"); fi
        [ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no armhf candidate for $pkg"
        SHIP_VER[$name]=$ver
        ship_one "$pkg" "$ver" "$path" "$name"
    done <<<"$SHIPPED"
}

# ----------------------------------------------------------------- inputs

# A deterministic English-like text of about 40 KB (Park-Miller generator in
# awk: every product stays below 2^53, so any awk gives the same bytes).
make_text() {
    awk 'BEGIN {
        n = split("the of and to in is was that for on with as by at from it his an were are " \
                  "which this be or has had not but one all their they there been its new " \
                  "river stone winter harbour engine signal market letter garden window " \
                  "morning distance question village station pattern frame stack return " \
                  "program compiler register table unwind instruction memory value function " \
                  "simple quiet early narrow heavy bright careful common ordinary northern " \
                  "carried opened measured followed crossed noticed gathered answered " \
                  "slowly often again nearly always rather almost perhaps", w, " ")
        x = 12345; out = 0; line = ""; sentence = 0
        while (out < 40000) {
            x = (x * 16807) % 2147483647; len = 6 + x % 14
            s = ""
            for (i = 0; i < len; i++) {
                x = (x * 16807) % 2147483647; word = w[1 + x % n]
                if (i == 0) word = toupper(substr(word, 1, 1)) substr(word, 2)
                if (x % 23 == 0) word = word ","
                if (x % 97 == 0) { x = (x * 16807) % 2147483647; word = word " " (x % 2000) }
                s = s (i ? " " : "") word
            }
            s = s "."
            sentence++
            m = split(s, t, " ")
            for (j = 1; j <= m; j++) {
                if (length(line) + 1 + length(t[j]) > 72) { print line; out += length(line) + 1; line = t[j] }
                else line = line (line == "" ? "" : " ") t[j]
            }
            if (sentence % 7 == 0) { print line; print ""; out += length(line) + 2; line = "" }
        }
        if (line != "") print line
    }'
}

# The tools' inputs are committed files of inputs/debian/ (text.txt apart):
# packages.csv, edit.sed, words.awk, calc.bc, old.txt and new.txt,
# workload.py, and tree/ (for ls, find and tar).
TOOL_INPUTS="packages.csv edit.sed words.awk calc.bc old.txt new.txt workload.py
tree/README.txt tree/src/main.c tree/src/util.c tree/src/util.h tree/docs/guide/intro.txt"

inputs() {
    local f
    for f in $TOOL_INPUTS; do
        [ -f "$REPO/$INPUTS/$f" ] || die "$INPUTS/$f is missing (a committed input)"
    done
    mkdir -p "$REPO/$INPUTS/work"
    if [ ! -s "$REPO/$INPUTS/text.txt" ]; then
        make_text >"$REPO/$INPUTS/text.txt.tmp"
        mv "$REPO/$INPUTS/text.txt.tmp" "$REPO/$INPUTS/text.txt"
        log "wrote $INPUTS/text.txt"
    fi
    [ -f "$REPO/$INPUTS/work/.gitignore" ] || printf '*\n!.gitignore\n' >"$REPO/$INPUTS/work/.gitignore"
}

# What each program is run with: ARGS (JSON list), STDIN, CWD (repo-relative
# or null).  zlib's example writes its test file (a per-program name, so that
# builds can run side by side) into inputs/debian/work.
#
# The tools run in inputs/debian with arguments that make their output the
# same on any machine: no dates, owners, modes or directory order (a
# directory's order is the host filesystem's under qemu-user, sorted in the
# harness): ls sorts; tar gets --sort=name and fixed metadata; find walks
# only tree/docs, whose directories hold one entry each, and is given the
# other files as starting points; diff -u gets --label (no mtimes).
# python3.11 runs isolated (-I), without site (-S) and without writing
# bytecode (-B: under qemu-user it would write __pycache__ into the
# sysroot), on a script that prints only what it computes.
workload() {
    local name=$1 base
    base=${name#debian-}; base=${base%%-gcc-*}; base=${base%%-clang-*}
    case $base in
        sqlite3) W_ARGS='[":memory:"]'; W_STDIN="\"$INPUTS/workload.sql\""; W_CWD=null ;;
        lua|lua5.4) W_ARGS='["-"]'; W_STDIN="\"$INPUTS/workload.lua\""; W_CWD=null ;;
        zlib-example) W_ARGS="[\"$name.gz\"]"; W_STDIN=null; W_CWD="\"$INPUTS/work\"" ;;
        minigzip) W_ARGS='[]'; W_STDIN="\"$INPUTS/text.txt\""; W_CWD=null ;;
        bzip2) W_ARGS='["-c"]'; W_STDIN="\"$INPUTS/text.txt\""; W_CWD=null ;;
        gzip) W_ARGS='["-c", "-n"]'; W_STDIN="\"$INPUTS/text.txt\""; W_CWD=null ;;
        xz) W_ARGS='["-c", "-1"]'; W_STDIN="\"$INPUTS/text.txt\""; W_CWD=null ;;
        # Two worker threads: with 16 KiB blocks the 40 KB text is three
        # blocks (at -1's default block size it is one, and one worker).
        # The .xz is the same for any -T of 2 or more.
        xz-T2) W_ARGS='["-T2", "--block-size=16KiB", "-c", "-1"]'; W_STDIN="\"$INPUTS/text.txt\""; W_CWD=null ;;
        sort) W_ARGS='["-t", ",", "-k", "2,2", "-k", "4,4nr", "-k", "1,1", "packages.csv"]' ;;
        sha256sum) W_ARGS='["text.txt", "packages.csv", "workload.py", "workload.sql"]' ;;
        od) W_ARGS='["-A", "x", "-t", "x1z", "-v", "packages.csv"]' ;;
        ls) W_ARGS='["-R", "-p", "tree"]' ;;
        factor) W_ARGS='["2147483647", "600851475143", "12345678901234567890", "18446744073709551617",
                         "1267650600228229401496703205377",
                         "515377520732011331036461129765621272702107522001"]' ;;
        sed) W_ARGS='["-E", "-f", "edit.sed", "text.txt"]' ;;
        grep) W_ARGS='["-n", "-i", "-E", "-e", "\\b(signal|frame) (stack|register|table)", "-e", "[0-9]{4}", "text.txt"]' ;;
        gawk) W_ARGS='["-f", "words.awk", "text.txt"]' ;;
        bc) W_ARGS='["-l", "calc.bc"]' ;;
        diff) W_ARGS='["-u", "--label", "old.txt", "--label", "new.txt", "old.txt", "new.txt"]' ;;
        tar) W_ARGS='["-c", "-f", "-", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
                      "--mode=a=rX,u+w", "tree"]' ;;
        find) W_ARGS='["tree/docs", "tree/src/main.c", "tree/src/util.c", "tree/src/util.h", "tree/README.txt",
                       "(", "-type", "d", "-printf", "dir %d %p\\n", ")",
                       "-o", "(", "-name", "*.[ch]", "-size", "-2k", "-printf", "source %s %f\\n", ")",
                       "-o", "-printf", "other %s %h/%f\\n"]' ;;
        python3.11) W_ARGS='["-I", "-S", "-B", "workload.py", "40"]' ;;
        *) die "no workload for $name" ;;
    esac
    case $base in
        sort|sha256sum|od|ls|factor|sed|grep|gawk|bc|diff|tar|find|python3.11)
            W_STDIN=null; W_CWD="\"$INPUTS\"" ;;
    esac
    W_ARGS=${W_ARGS//$'\n'/ }  # one line of the table write_json makes
}

# ------------------------------------------------------------------- JSON

write_json() {
    local rows=$CACHE/.debian.programs.tsv name prog c o f l
    : >"$rows"
    while read -r name prog c o f l; do
        workload "$name"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "debian-build" \
            "${P_PKG[$prog]}" "${P_VER[$prog]}" "$c" "$o" "$f" "$l" "$W_ARGS" "$W_STDIN" "$W_CWD" \
            "$(file_link "$BIN/$name")" >>"$rows"
    done < <(build_list)
    local pkg path
    while read -r pkg path name; do
        workload "$name"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "debian-shipped" \
            "$pkg" "${SHIP_VER[$name]}" - - - - "$W_ARGS" "$W_STDIN" "$W_CWD" \
            "$(file_link "$BIN/$name")" >>"$rows"
    done <<<"$SHIPPED"
    python3 - "$rows" "$JSON" <<'EOF'
import json, os, sys
rows, out = sys.argv[1], sys.argv[2]
entries = []
for line in open(rows, encoding="utf-8"):
    (name, source, package, version, comp, opt, fp, link, args, stdin, cwd,
     real_link) = line.rstrip("\n").split("\t")
    built = source == "debian-build"
    entries.append({
        "name": name,
        "path": "bin/" + name,
        "args": json.loads(args),
        "stdin": json.loads(stdin),
        "cwd": json.loads(cwd),
        "source": source,
        "package": package,
        "package_version": version,
        "language": "c",
        "compiler": comp if built else None,
        "opt": opt if built else None,
        "frame_pointer": (fp == "fp") if built else None,
        "link": real_link,
    })
entries.sort(key=lambda e: e["name"])
text = json.dumps(entries, indent=2) + "\n"
old = open(out, encoding="utf-8").read() if os.path.exists(out) else None
if text != old:
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(out + ".tmp", out)
    print("debian.sh: wrote", os.path.relpath(out), f"({len(entries)} programs)", file=sys.stderr)
EOF
    rm -f "$rows"
}

# "static" or "dynamic", from the ELF itself (a PT_INTERP program header).
file_link() {
    if arm-linux-gnueabihf-readelf -lW "$1" 2>/dev/null | grep -q 'INTERP'; then echo dynamic; else echo static; fi
}

# ----------------------------------------------------------------- verify

# run_prog NAME [qemu options...]: run the program as the corpus describes it;
# standard output to stdout.
run_prog() {
    local name=$1; shift
    python3 - "$JSON" "$name" "$REPO" "$CACHE" "$SYSROOT" "$@" <<'EOF'
import json, os, subprocess, sys
jpath, name, repo, cache, sysroot, *qopts = sys.argv[1:]
e = next(e for e in json.load(open(jpath)) if e["name"] == name)
stdin = open(os.path.join(repo, e["stdin"]), "rb") if e["stdin"] else subprocess.DEVNULL
cwd = os.path.join(repo, e["cwd"]) if e["cwd"] else repo
env = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C"}
cmd = ["qemu-arm", *qopts, "-L", sysroot, os.path.join(cache, e["path"]), *e["args"]]
sys.exit(subprocess.run(cmd, stdin=stdin, cwd=cwd, env=env).returncode)
EOF
}

verify_all() {
    local names name rc1 rc2 h1 h2 t0 ms want bad=0 out=$CACHE/.verify.out
    names=$(python3 -c 'import json,sys; print("\n".join(e["name"] for e in json.load(open(sys.argv[1]))))' "$JSON")
    printf '%-30s %8s  %s\n' program "ms/run" "stdout: bytes sha256" >&2
    for name in $names; do
        t0=$(date +%s%N)
        rc1=0; run_prog "$name" >"$out" 2>"$LOGS/$name.run.err" || rc1=$?
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        h1=$(sha256sum <"$out" | cut -c1-64)
        rc2=0; run_prog "$name" 2>/dev/null >"$out" || rc2=$?
        h2=$(sha256sum <"$out" | cut -c1-64)
        want=${EXPECT_EXIT[$name]:-0}
        if [ $rc1 != "$want" ] || [ $rc2 != "$want" ]; then
            log "FAIL $name: exit status $rc1, $rc2, not $want (stderr in $LOGS/$name.run.err)"; bad=1
        elif [ "$h1" != "$h2" ]; then
            log "FAIL $name: standard output differs between two runs"; bad=1
        fi
        printf '%-30s %8d  %s %s\n' "$name" "$ms" "$(wc -c <"$out")" "${h1:0:16}" >&2
    done
    rm -f "$out"
    [ $bad = 0 ] || die "verification failed"
    log "verified $(echo "$names" | wc -l) programs: the exit status expected, the same output twice"
}

# Instructions executed, from qemu's log: the size of each translation block
# (in_asm) times the times it ran (exec, with chaining off so that every run
# is logged).  Agrees with a -singlestep count, ten times faster.
count_all() {
    local names name n
    names=$(python3 -c 'import json,sys; print("\n".join(e["name"] for e in json.load(open(sys.argv[1]))))' "$JSON")
    printf '%-30s %12s\n' program instructions >&2
    for name in $names; do
        n=$(run_prog "$name" -d in_asm,nochain,exec -D /dev/stderr 2>&1 >/dev/null | python3 -c '
import re, sys
size, count, cur = {}, 0, None
insn = re.compile(r"^0x([0-9a-f]+):")
for line in sys.stdin:
    if line.startswith("Trace "):
        count += size[int(line.split("[", 1)[1].split("/", 2)[1], 16)]
    elif line.startswith("IN:"):
        cur = None
    else:
        m = insn.match(line)
        if m:
            if cur is None:
                cur = int(m.group(1), 16)
                size[cur] = 0
            size[cur] += 1
print(count)')
        printf '%-30s %12d\n' "$name" "$n" >&2
    done
}

# ------------------------------------------------------------------- main

host_tools
[ -e "$SYSROOT/lib/ld-linux-armhf.so.3" ] || bash "$HERE/sysroot.sh"
inputs
prepare_sources
start=$(date +%s)
build_all
shipped_all
log "builds done in $(( $(date +%s) - start )) s"
write_json
[ $VERIFY = no ] || verify_all
[ $COUNT = no ] || count_all
