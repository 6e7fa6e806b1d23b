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
