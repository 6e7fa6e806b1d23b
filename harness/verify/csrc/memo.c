/* WalkMemo: the outer part of each unwinder's walk, kept from one stop to
 * the next (a run that stops at every instruction).
 *
 * Between two consecutive stops one instruction runs; the innermost frame
 * changes, its callers rarely do. A walk's steps from frame 1 on depend on
 * nothing but: the frame its innermost step gave (every register of it),
 * whether the stop is inside an IT block (an OUTSIDE_IT rule), the shadow
 * frames they are compared with, the stack bytes they read, the stack's low
 * end (the innermost sp: guards and reads compare addresses with it), and
 * the rules for their pcs, which never change once made (Ranges only grow). So
 * where all of those are as they were when the outer walk was made, its
 * answer and its chain counts are the walk's again, and the kernel takes
 * them without stepping.
 *
 * The stack bytes: the memo keeps a copy of [snap_low, high) as it was at
 * the last stop, snap_low being the lowest byte any kept walk read, and
 * finds at each stop the highest byte that changed since. A kept walk that
 * read a byte at or below that one is dropped; so is every kept walk when
 * the shadow frames changed. Each stop thus checks each kept walk, so one
 * that survives a stop held at every stop since it was made.
 */
#include "kernel.h"

#include <string.h>

/* A kept walk whose reads reach further below the stack's top is not kept:
 * the copy and its comparison at every stop would cost more than a walk. */
#define MEMO_MAX_BYTES (256 * 1024)

int memo_init(WalkMemo *m, Py_ssize_t unwinders) {
    memset(m, 0, sizeof *m);
    m->enabled = 1;
    m->walks = PyMem_Calloc(unwinders + 1, sizeof(OuterWalk));
    if (!m->walks) { PyErr_NoMemory(); return -1; }
    m->count = unwinders;
    m->snap_low = INT64_MAX;
    return 0;
}

void memo_free(WalkMemo *m) {
    PyMem_Free(m->walks);
    PyMem_Free(m->expected);
    PyMem_Free(m->snapshot);
    memset(m, 0, sizeof *m);
}

static void forget_all(WalkMemo *m) {
    for (Py_ssize_t i = 0; i < m->count; i++) m->walks[i].valid = 0;
}

/* The snapshot's byte for guest address a (snap_low <= a < high). */
static inline uint8_t *kept_byte(const WalkMemo *m, int64_t high, int64_t a) {
    return m->snapshot + (m->capacity - (size_t)(high - a));
}

/* The offset of the highest byte at which a and b (n bytes) differ, or -1.
 * Compared from the top down in blocks of 1,024 bytes, then within the
 * block that differs in blocks 8 times smaller, and so on: a stop mostly
 * writes below the frames kept, so most of the bytes compared are equal. */
static Py_ssize_t highest_difference(const uint8_t *a, const uint8_t *b, Py_ssize_t n) {
    Py_ssize_t lo = 0, hi = n;  /* the highest difference, if any, lies in [lo, hi) */
    for (Py_ssize_t block = 1024; block > 1; block /= 8) {
        for (;;) {
            if (hi <= lo) return -1;
            const Py_ssize_t start = hi - block > lo ? hi - block : lo;
            if (memcmp(a + start, b + start, (size_t)(hi - start))) { lo = start; break; }
            hi = start;
        }
    }
    for (Py_ssize_t i = hi - 1; i >= lo; i--)
        if (a[i] != b[i]) return i;
    return -1;
}

void memo_begin(WalkMemo *m, const uint8_t *memory, int64_t base, int64_t high, const Expected *expected,
                Py_ssize_t frames) {
    m->active = m->enabled;
    if (!m->active) return;
    /* The outer steps compare with every shadow frame but the innermost one's caller. */
    const Py_ssize_t outer = frames > 1 ? frames - 1 : 0;
    const int same = frames == m->frames &&
                     (!outer || !memcmp(expected, m->expected, (size_t)outer * sizeof(Expected)));
    if (!same) {
        if ((size_t)outer > m->expected_capacity) {
            Expected *grown = PyMem_Realloc(m->expected, (size_t)outer * sizeof(Expected));
            if (!grown) { forget_all(m); m->frames = -1; m->active = 0; return; }
            m->expected = grown;
            m->expected_capacity = (size_t)outer;
        }
        memcpy(m->expected, expected, (size_t)outer * sizeof(Expected));
        m->frames = frames;
    }
    int64_t changed = INT64_MIN;  /* the highest stack byte that changed since the last stop */
    if (m->snap_low < high) {
        const Py_ssize_t n = (Py_ssize_t)(high - m->snap_low);
        const Py_ssize_t at = highest_difference(memory + (m->snap_low - base), kept_byte(m, high, m->snap_low), n);
        if (at >= 0) {
            changed = m->snap_low + at;
            memcpy(kept_byte(m, high, m->snap_low), memory + (m->snap_low - base), (size_t)at + 1);
        }
    }
    for (Py_ssize_t i = 0; i < m->count; i++) {
        OuterWalk *w = &m->walks[i];
        if (!same || w->min_read <= changed) w->valid = 0;
    }
}

const OuterWalk *memo_find(const WalkMemo *m, Py_ssize_t unwinder, const KFrame *caller, int in_it, int64_t low) {
    const OuterWalk *w = &m->walks[unwinder];
    if (!m->active || !w->valid || w->in_it != in_it) return NULL;
    if (w->low != low) return NULL;  /* a guard or read compares addresses with it */
    if (memcmp(caller->r, w->caller.r, sizeof caller->r) || caller->d_known != w->caller.d_known ||
        memcmp(caller->d, w->caller.d, sizeof caller->d))
        return NULL;
    return w;
}

void memo_keep(WalkMemo *m, Py_ssize_t unwinder, const KFrame *caller, int in_it, int64_t low, const Track *track,
               const Answer *answer, const uint64_t *counted) {
    if (!m->active) return;
    OuterWalk *w = &m->walks[unwinder];
    w->valid = 1;
    w->caller = *caller;
    w->in_it = in_it;
    w->low = low;
    w->min_read = track->min_read;
    w->answer = *answer;
    memcpy(w->counted, counted, sizeof w->counted);
}

void memo_end(WalkMemo *m, const uint8_t *memory, int64_t base, int64_t high) {
    if (!m->active) return;
    m->active = 0;
    int64_t lowest = INT64_MAX;
    for (Py_ssize_t i = 0; i < m->count; i++) {
        OuterWalk *w = &m->walks[i];
        if (w->valid && w->min_read < high - MEMO_MAX_BYTES) w->valid = 0;
        if (w->valid && w->min_read < lowest) lowest = w->min_read;
    }
    if (lowest < base) lowest = base;  /* reads never go below the mapping */
    if (lowest >= high) { m->snap_low = INT64_MAX; return; }
    const size_t needed = (size_t)(high - lowest);
    if (needed > m->capacity) {
        uint8_t *grown = PyMem_Malloc(needed);
        if (!grown) { forget_all(m); m->snap_low = INT64_MAX; return; }
        if (m->snap_low < high)  /* the part kept stays at the top */
            memcpy(grown + needed - (size_t)(high - m->snap_low), kept_byte(m, high, m->snap_low),
                   (size_t)(high - m->snap_low));
        PyMem_Free(m->snapshot);
        m->snapshot = grown;
        m->capacity = needed;
    }
    if (lowest < m->snap_low) {  /* newly read bytes: as they are now */
        const int64_t top = m->snap_low < high ? m->snap_low : high;
        memcpy(kept_byte(m, high, lowest), memory + (lowest - base), (size_t)(top - lowest));
    }
    m->snap_low = lowest;
}
