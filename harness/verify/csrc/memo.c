/* WalkMemo: the outer part of each unwinder's walk, kept from one stop to
 * the next (a run that stops at every instruction).
 *
 * Between two consecutive stops one instruction runs; the innermost frame
 * changes, its callers rarely do. A walk's steps from frame 1 on depend on
 * nothing but: the registers of the frame its innermost step gave that
 * they read (sp, lr and pc, a rule's base and index) or compare (those the
 * unwinder restores), whether the stop is inside an IT block (an
 * OUTSIDE_IT rule), the shadow frames they are compared with, the stack
 * bytes they read, the addresses they compared with the stack's low end
 * (the innermost sp, which moves with every push: only where it passes one
 * of them does it matter), and the rules for their pcs, which never change
 * once made. So where all of those are as they were when the outer walk
 * was made, its answer and its chain counts are the walk's again, and the
 * kernel takes them without stepping. The whole walk, innermost step too,
 * holds where besides the innermost rule and its IT state nothing its step
 * reads changed: not the registers it loads from the stack (inputs_read).
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
    for (Py_ssize_t i = 0; i < m->count; i++) {
        PyMem_Free(m->walks[i].outer.bytes);
        PyMem_Free(m->walks[i].first.bytes);
    }
    PyMem_Free(m->walks);
    PyMem_Free(m->expected);
    memset(m, 0, sizeof *m);
}

static void forget_all(WalkMemo *m) {
    for (Py_ssize_t i = 0; i < m->count; i++) m->walks[i].valid = m->walks[i].whole = 0;
}

/* Whether the n bytes at a and b are equal. The walks' compares are small
 * and made for every unwinder at every stop: inlined, word by word, they
 * cost a fraction of a call to memcmp each (a tenth of a generated
 * program's verification went to those calls). */
static inline int same_bytes(const void *a, const void *b, size_t n) {
    if (n > 256) return !memcmp(a, b, n);
    const uint8_t *x = a, *y = b;
    uint64_t differ = 0;
    for (; n >= 8; n -= 8, x += 8, y += 8) {
        uint64_t u, v;
        memcpy(&u, x, 8);
        memcpy(&v, y, 8);
        differ |= u ^ v;
    }
    if (n >= 4) {  /* spans are of whole words: most end here */
        uint32_t u, v;
        memcpy(&u, x, 4);
        memcpy(&v, y, 4);
        differ |= u ^ v;
        n -= 4, x += 4, y += 4;
    }
    for (; n; n--) differ |= (uint64_t)(*x++ ^ *y++);
    return !differ;
}

/* Do the bytes of `kept` hold what they held? */
static int still_holds(const Snapshot *kept, const uint8_t *memory, int64_t base) {
    const uint8_t *was = kept->bytes;
    for (int i = 0; i < kept->reads.count; i++) {
        const size_t size = (size_t)(kept->reads.spans[i].high - kept->reads.spans[i].low);
        if (!same_bytes(memory + (kept->reads.spans[i].low - base), was, size)) return 0;
        was += size;
    }
    return 1;
}

/* Copy what `reads` spans hold into `into`; 0, or -1 if they are too many
 * bytes to keep (or no memory). */
static int snapshot(Snapshot *into, const Track *reads, const uint8_t *memory, int64_t base) {
    size_t bytes = 0;
    for (int i = 0; i < reads->count; i++) bytes += (size_t)(reads->spans[i].high - reads->spans[i].low);
    if (bytes > MEMO_MAX_BYTES) return -1;
    if (bytes > into->capacity) {
        uint8_t *grown = PyMem_Realloc(into->bytes, bytes);
        if (!grown) return -1;  /* not kept: walked again */
        into->bytes = grown;
        into->capacity = bytes;
    }
    uint8_t *out = into->bytes;
    for (int i = 0; i < reads->count; i++) {
        const size_t size = (size_t)(reads->spans[i].high - reads->spans[i].low);
        memcpy(out, memory + (reads->spans[i].low - base), size);
        out += size;
    }
    into->reads = *reads;
    return 0;
}

void memo_begin(WalkMemo *m, const uint8_t *memory, int64_t base, const Expected *expected, Py_ssize_t frames) {
    m->active = m->enabled;
    if (!m->active) return;
    /* The outer steps compare with every shadow frame but the innermost one's caller. */
    const Py_ssize_t outer = frames > 1 ? frames - 1 : 0;
    const int same = frames == m->frames &&
                     (!outer || same_bytes(expected, m->expected, (size_t)outer * sizeof(Expected)));
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
        if (w->valid && !still_holds(&w->outer, memory, base)) w->valid = 0;
        if (w->whole && ((w->whole_needs_outer && !w->valid) || !still_holds(&w->first, memory, base))) w->whole = 0;
    }
}

const OuterWalk *memo_find(const WalkMemo *m, Py_ssize_t unwinder, const KFrame *caller, int in_it, int64_t low) {
    const OuterWalk *w = &m->walks[unwinder];
    if (!m->active || !w->valid || w->in_it != in_it) return NULL;
    /* Guards and reads compare addresses with the stack's low end: where it moved, the walk holds if every
     * address it compared lay at or above both ends, and it reported neither (a guard's failure does). */
    if (w->low != low && (w->answer.kind == ANSWER_GUARD_FAILS || w->lowest < (low > w->low ? low : w->low)))
        return NULL;
    if (caller->d_known != w->caller.d_known || !same_bytes(caller->d, w->caller.d, sizeof caller->d)) return NULL;
    for (uint32_t regs = w->caller_inputs; regs; regs &= regs - 1) {
        const int reg = __builtin_ctz(regs);
        if (caller->r[reg] != w->caller.r[reg]) return NULL;
    }
    return w;
}

void memo_keep(WalkMemo *m, Py_ssize_t unwinder, const KFrame *caller, uint32_t compared, int in_it, int64_t low,
               const Track *track, const Answer *answer, const MethodCounts *counted, const uint8_t *memory,
               int64_t base) {
    if (!m->active) return;
    OuterWalk *w = &m->walks[unwinder];
    w->valid = w->whole = 0;
    if (snapshot(&w->outer, track, memory, base)) return;
    w->valid = 1;
    w->caller = *caller;
    w->caller_inputs = compared;
    w->in_it = in_it;
    w->low = low;
    w->lowest = track->lowest;
    w->answer = *answer;
    w->counted.any = 0;
    counts_add(&w->counted, counted);
}

/* The registers r0-r12 whose values at the stop a rule's step reads, as
 * the base or index of its addresses, or passes to the caller unchanged
 * (r4-r11 it does not load from the stack: the scratch ones, r0-r3 and r12,
 * the walk clears); a chain's are its methods'. A register the step loads
 * is never read first, but where a rule may end before its loads (a leaf
 * unless a record) or passes every register on (a scan). A failing rule
 * reads none. */
static uint32_t inputs_read(const uint8_t *rule, Py_ssize_t size) {
    const uint32_t every = 0x1FFF, callee_saved = 0x0FF0;
    RuleHeader h;
    if (size < (Py_ssize_t)sizeof h) return every;
    memcpy(&h, rule, sizeof h);
    if (h.flags & FAILS) return 0;
    if (h.flags & SCAN) return callee_saved;
    if (!(h.flags & CHAIN)) {
        uint32_t used = callee_saved;
        const Py_ssize_t loads = (Py_ssize_t)h.pre_loads + h.loads;
        if (!(h.flags & LEAF_UNLESS_RECORD) && loads >= 0 &&
            (Py_ssize_t)sizeof h + loads * (Py_ssize_t)sizeof(Load) <= size) {
            for (Py_ssize_t i = 0; i < loads; i++) {
                Load l;
                memcpy(&l, rule + sizeof h + i * sizeof l, sizeof l);
                if (l.reg >= 0 && l.reg < 16) used &= ~(1u << l.reg);
            }
        }
        if (h.base >= 0 && h.base < 16) used |= 1u << h.base;
        if (h.index >= 0 && h.index < 16) used |= 1u << h.index;
        return used & every;
    }
    uint32_t used = 0;
    const uint8_t *at = rule + sizeof h, *end = rule + size;
    for (int m = 0; m < h.highest && at + 4 <= end; m++) {
        int32_t length;
        memcpy(&length, at, sizeof length);
        at += sizeof length;
        if (length < 0 || at + length > end) return every;
        used |= inputs_read(at, length);
        at += length;
    }
    return used;
}

/* Do two frames hold the same sp and lr, d8-d15, and r0-r12 `inputs`? */
static int same_inputs(const KFrame *a, const KFrame *b, uint32_t inputs) {
    if (a->r[SP] != b->r[SP] || a->r[LR] != b->r[LR] || a->d_known != b->d_known ||
        !same_bytes(a->d, b->d, sizeof a->d))
        return 0;
    for (int reg = 0; inputs >> reg; reg++)
        if ((inputs >> reg & 1) && a->r[reg] != b->r[reg]) return 0;
    return 1;
}

const OuterWalk *memo_find_whole(const WalkMemo *m, Py_ssize_t unwinder, PyObject *rule, const KFrame *innermost,
                                 int it, const Expected *top) {
    const OuterWalk *w = &m->walks[unwinder];
    if (!m->active || !w->whole || w->rule != rule || w->it != it) return NULL;
    if (!same_inputs(innermost, &w->innermost, w->inputs) || !same_bytes(top, &w->top, sizeof *top)) return NULL;
    return w;
}

void memo_keep_whole(WalkMemo *m, Py_ssize_t unwinder, PyObject *rule, const KFrame *innermost, int it,
                     const Expected *top, const Track *first, int needs_outer, const Answer *answer,
                     const MethodCounts *counted, const uint8_t *memory, int64_t base) {
    OuterWalk *w = &m->walks[unwinder];
    w->whole = 0;
    if (!m->active || first->pc_read || (needs_outer && !w->valid) || snapshot(&w->first, first, memory, base))
        return;
    w->whole = 1;
    w->whole_needs_outer = needs_outer;
    w->rule = rule;
    w->inputs = rule == Py_None ? 0 : inputs_read((const uint8_t *)PyBytes_AS_STRING(rule), PyBytes_GET_SIZE(rule));
    w->innermost = *innermost;
    w->it = it;
    w->top = *top;
    w->whole_answer = *answer;
    w->whole_counted.any = 0;
    counts_add(&w->whole_counted, counted);
}

void memo_end(WalkMemo *m) { m->active = 0; }
