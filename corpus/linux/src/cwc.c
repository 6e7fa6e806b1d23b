/* Reads standard input like wc: counts lines, words and bytes, and the most
 * frequent words (a chained hash table of malloc'd entries, sorted with
 * qsort).  Then it exits with status 3 through exit(), on purpose: the
 * corpus needs one program whose nonzero exit status is part of what is
 * recorded. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *word;
    int count;
    struct entry *next;
};

enum { BUCKETS = 256, MAXWORD = 64 };
static struct entry *table[BUCKETS];
static int distinct;

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;  /* FNV-1a */
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static void add_word(const char *w)
{
    struct entry **slot = &table[hash(w) % BUCKETS];
    for (struct entry *e = *slot; e; e = e->next)
        if (strcmp(e->word, w) == 0) { e->count++; return; }
    struct entry *e = malloc(sizeof *e);
    if (!e || !(e->word = strdup(w))) { puts("out of memory"); exit(1); }
    e->count = 1;
    e->next = *slot;
    *slot = e;
    distinct++;
}

/* Most frequent first, then alphabetical: a total order, so the output does
 * not depend on qsort's algorithm. */
static int by_count(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;
    if (x->count != y->count) return y->count - x->count;
    return strcmp(x->word, y->word);
}

int main(void)
{
    long lines = 0, words = 0, bytes = 0, longest = 0, len = 0;
    char word[MAXWORD];
    int wlen = 0, inword = 0, c;

    while ((c = getchar()) != EOF) {
        bytes++;
        len++;
        if (c == '\n') {
            lines++;
            if (len - 1 > longest) longest = len - 1;
            len = 0;
        }
        if (isalpha(c) || c == '\'') {
            if (wlen < MAXWORD - 1) word[wlen++] = (char)tolower(c);
        } else if (wlen) {
            word[wlen] = '\0';
            add_word(word);
            wlen = 0;
        }
        /* wc's words: maximal runs of non-space characters, which is not
         * what the frequency table counts ("don't-stop" is one wc word). */
        if (isspace(c)) inword = 0;
        else if (!inword) { inword = 1; words++; }
    }
    if (wlen) { word[wlen] = '\0'; add_word(word); }

    struct entry **all = malloc((distinct + 1) * sizeof *all); /* +1: never malloc(0) */
    if (!all) return 1;
    int n = 0;
    for (int b = 0; b < BUCKETS; b++)
        for (struct entry *e = table[b]; e; e = e->next) all[n++] = e;
    qsort(all, n, sizeof *all, by_count);

    printf("%ld lines, %ld words, %ld bytes, longest line %ld\n", lines, words, bytes, longest);
    printf("%d distinct words; the most frequent:\n", distinct);
    for (int i = 0; i < n && i < 10; i++) printf("%6d %s\n", all[i]->count, all[i]->word);

    for (int i = 0; i < n; i++) { free(all[i]->word); free(all[i]); }
    free(all);
    fflush(stdout);
    exit(3);
}
