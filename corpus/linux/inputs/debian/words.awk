# gawk -f words.awk text.txt: word and sentence statistics, sorted arrays,
# a recursive function, printf and string functions.
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }
function commas(n,    s) {
    s = sprintf("%d", n)
    while (s ~ /[0-9]{4}/) sub(/[0-9]{3}($|,)/, ",&", s)
    return s
}
{
    chars += length($0) + 1
    for (i = 1; i <= NF; i++) {
        w = tolower($i)
        gsub(/[^a-z0-9]/, "", w)
        if (w == "") continue
        count[w]++
        words++
        if (length(w) > length(longest)) longest = w
        if (w ~ /^[0-9]+$/) numbers += w
    }
    sentences += gsub(/\./, ".")
}
END {
    printf "%d lines, %s words, %s characters, %d sentences\n", NR, commas(words), commas(chars), sentences
    printf "longest word: %s (%d); sum of the numbers: %s\n", longest, length(longest), commas(numbers)
    PROCINFO["sorted_in"] = "@val_num_desc"
    shown = 0
    for (w in count) {
        if (++shown > 15) break
        printf "%-12s %5d %5.2f%%\n", w, count[w], 100 * count[w] / words
    }
    n = asorti(count, names)
    printf "%d distinct words, first %s, last %s\n", n, names[1], names[n]
    printf "fib(18) = %d\n", fib(18)
    split("", byLength)
    for (w in count) byLength[length(w)] += count[w]
    PROCINFO["sorted_in"] = "@ind_num_asc"
    for (l in byLength) printf "length %2d: %d\n", l, byLength[l]
}
