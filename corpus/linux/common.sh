# Shell functions the Linux corpus scripts share (sourced; DEBS must be set).

# The .deb of armhf package $1 at version $2 in $DEBS, if downloaded.
# apt-get download names files with the epoch's colon escaped
# (zlib1g_1%3a1.2.13...), so the file is found by what it holds, not by a
# guessed name.
deb_for() {
    local f
    for f in "$DEBS/$1"_*_armhf.deb; do
        [ -s "$f" ] || continue
        if [ "$(dpkg-deb -f "$f" Package Version | awk '{print $2}' | paste -sd' ')" = "$1 $2" ]; then
            echo "$f"; return 0
        fi
    done
    return 1
}

# Install PATH of armhf package PKG at version VER as $BIN/NAME (downloaded
# into $DEBS, unpacked with dpkg -x, never installed), unless its stamp says
# it is there already. Needs CACHE, DEBS, BIN, APT_USER, log and die.
ship_one() {
    local pkg=$1 ver=$2 path=$3 name=$4 deb tmp stamp="shipped $1 $2 $3"
    if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/.stamps/$name" 2>/dev/null)" = "$stamp" ]; then
        return 0
    fi
    mkdir -p "$DEBS" "$BIN/.stamps"
    if ! deb=$(deb_for "$pkg" "$ver"); then
        log "downloading $pkg:armhf $ver"
        (cd "$DEBS" && apt-get download -q "${APT_USER[@]}" "$pkg:armhf=$ver" >&2)
        deb=$(deb_for "$pkg" "$ver") || die "apt-get download gave no .deb for $pkg $ver"
    fi
    tmp=$(mktemp -d "$CACHE/shipped.XXXXXX")
    dpkg -x "$deb" "$tmp"
    [ -f "$tmp/$path" ] || { rm -rf "$tmp"; die "$deb has no $path"; }
    install -m 755 "$tmp/$path" "$BIN/.$name.tmp"
    mv -f "$BIN/.$name.tmp" "$BIN/$name"
    rm -rf "$tmp"
    printf '%s' "$stamp" >"$BIN/.stamps/$name"
    log "shipped $name from $pkg $ver"
}

# Make the unpacked tree DIR a root of its own for `qemu-arm -L DIR` and the
# harness's loader: absolute symlinks (lib/ld-linux-armhf.so.3 ->
# /lib/arm-linux-gnueabihf/ld-linux-armhf.so.3) would point into the host's
# filesystem, so each is rewritten to the same target relative to DIR, and a
# link that still leaves DIR is refused. qemu-arm -L looks a path up in DIR
# first and falls back to the host's file when DIR has none: without the two
# files below the guest's ld.so would read the host's /etc/ld.so.cache (and
# try the x86 libraries it lists) and any host /etc/ld.so.preload. Empty
# files mean "no cache, nothing preloaded": ld.so then searches its default
# directories, which exist only in DIR. Needs log.
self_contained_root() {
    local dir=$1 link target rel root resolved
    while IFS= read -r -d '' link; do
        target=$(readlink "$link")
        case $target in
            /*)
                rel=$(realpath -m --relative-to="$(dirname "$link")" "$dir$target")
                ln -sfn "$rel" "$link"
                ;;
        esac
    done < <(find "$dir" -type l -print0)
    root=$(realpath "$dir")
    while IFS= read -r -d '' link; do
        resolved=$(realpath -m "$link")
        case $resolved in
            "$root"|"$root"/*) ;;
            *) log "symlink ${link#"$dir"} leaves the root ($(readlink "$link"))"; return 1 ;;
        esac
    done < <(find "$dir" -type l -print0)
    mkdir -p "$dir/etc"
    : >"$dir/etc/ld.so.cache"
    : >"$dir/etc/ld.so.preload"
}

# Download into $DEBS the packages of WANT ("package version" lines, armhf)
# not there yet, and unpack every one of them into DIR (dpkg -x: never
# installed). The cache is usually under /root, where apt's _apt user cannot
# write: apt downloads as the calling user instead of warning about it.
# Needs DEBS and log.
unpack_packages() {
    local want=$1 dir=$2 p v f missing=()
    mkdir -p "$DEBS"
    while read -r p v; do
        deb_for "$p" "$v" >/dev/null || missing+=("$p:armhf=$v")
    done <<<"$want"
    if [ ${#missing[@]} -gt 0 ]; then
        log "downloading ${#missing[@]} packages"
        (cd "$DEBS" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "${missing[@]}" >&2)
    fi
    while read -r p v; do
        f=$(deb_for "$p" "$v") || { log "no .deb for $p $v in $DEBS"; return 1; }
        dpkg -x "$f" "$dir"
    done <<<"$want"
}
