/* WalkMemo: the outer part of each unwinder's walk, kept from one stop to
 * the next (a run that stops at every instruction).
 *
 * Between two consecutive stops one instruction runs; the innermost frame
 * changes, its callers rarely do. A walk's steps from frame 1 on depend on
 * nothing but: the frame its innermost step gave (every register of it),
 * whether the stop is inside an IT block (an OUTSIDE_IT rule), the shadow
 * frames they are compared with, the stack bytes they read, the stack's low
 * end (the innermost sp: guards and reads compare addresses with it), and
 * the rules for their pcs, which never change once made. So where all of
 * those are as they were when the outer walk was made, its answer and its
 * chain counts are the walk's again, and the kernel takes them without
 * stepping.
 *
 * The stack bytes: each kept walk records the spans it read (Track) and
 * what they held. At each stop a kept walk whose bytes differ is dropped:
 * one that survives a stop held at every stop since it was made. Comparing
 * only what was read keeps the cost to the few words each frame's rules
 * load, whatever lies between them (a 64 KiB frame's locals, say, which the
 * stops of its function write to while its callers' records stay).
 */
#include "kernel.h"

#include <string.h>

/* A walk that read more bytes than this is not kept: comparing them at every
 * stop would cost more than walking again. */
#define MEMO_MAX_BYTES (64 * 1024)

int memo_init(WalkMemo *m, Py_ssize_t unwinders) {
    memset(m, 0, sizeof *m);
    m->enabled = 1;
    m->walks = PyMem_Calloc(unwinders + 1, sizeof(OuterWalk));
    if (!m->walks) { PyErr_NoMemory(); return -1; }
    m->count = unwinders;
    return 0;
}

void memo_free(WalkMemo *m) {
    for (Py_ssize_t i = 0; i < m->count; i++) PyMem_Free(m->walks[i].bytes);
    PyMem_Free(m->walks);
    PyMem_Free(m->expected);
    memset(m, 0, sizeof *m);
}

static void forget_all(WalkMemo *m) {
    for (Py_ssize_t i = 0; i < m->count; i++) m->walks[i].valid = 0;
}

/* Do the bytes walk `w` read hold what they held? */
static int still_holds(const OuterWalk *w, const uint8_t *memory, int64_t base) {
    const uint8_t *kept = w->bytes;
    for (int i = 0; i < w->reads.count; i++) {
        const size_t size = (size_t)(w->reads.spans[i].high - w->reads.spans[i].low);
        if (memcmp(memory + (w->reads.spans[i].low - base), kept, size)) return 0;
        kept += size;
    }
    return 1;
}

void memo_begin(WalkMemo *m, const uint8_t *memory, int64_t base, const Expected *expected, Py_ssize_t frames) {
    m->active = m->enabled;
    if (!m->active) return;
    /* The outer steps compare with every shadow frame but the innermost one's caller. */
    const Py_ssize_t outer = frames > 1 ? frames - 1 : 0;
    const int same = frames == m->frames &&
                     (!outer || !memcmp(expected, m->expected, (size_t)outer * sizeof(Expected)));
    if (!same) {
        forget_all(m);
        if ((size_t)outer > m->expected_capacity) {
            Expected *grown = PyMem_Realloc(m->expected, (size_t)outer * sizeof(Expected));
            if (!grown) { m->frames = -1; m->active = 0; return; }
            m->expected = grown;
            m->expected_capacity = (size_t)outer;
        }
        memcpy(m->expected, expected, (size_t)outer * sizeof(Expected));
        m->frames = frames;
        return;
    }
    for (Py_ssize_t i = 0; i < m->count; i++) {
        OuterWalk *w = &m->walks[i];
        if (w->valid && !still_holds(w, memory, base)) w->valid = 0;
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
               const Answer *answer, const MethodCounts *counted, const uint8_t *memory, int64_t base) {
    if (!m->active) return;
    OuterWalk *w = &m->walks[unwinder];
    w->valid = 0;
    size_t bytes = 0;
    for (int i = 0; i < track->count; i++) bytes += (size_t)(track->spans[i].high - track->spans[i].low);
    if (bytes > MEMO_MAX_BYTES) return;
    if (bytes > w->capacity) {
        uint8_t *grown = PyMem_Realloc(w->bytes, bytes);
        if (!grown) return;  /* not kept: walked again */
        w->bytes = grown;
        w->capacity = bytes;
    }
    uint8_t *out = w->bytes;
    for (int i = 0; i < track->count; i++) {
        const size_t size = (size_t)(track->spans[i].high - track->spans[i].low);
        memcpy(out, memory + (track->spans[i].low - base), size);
        out += size;
    }
    w->valid = 1;
    w->caller = *caller;
    w->in_it = in_it;
    w->low = low;
    w->reads = *track;
    w->answer = *answer;
    w->counted.any = 0;
    counts_add(&w->counted, counted);
}

void memo_end(WalkMemo *m) { m->active = 0; }
