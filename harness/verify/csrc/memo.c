/* WalkMemo: the parts of each unwinder's walks kept from one stop to the
 * next (a run that stops at every instruction).
 *
 * Between two consecutive stops one instruction runs; the innermost frame
 * changes, its callers rarely do. A walk's steps from a frame on depend on
 * nothing but: the registers of that frame they read (sp, lr and pc, a
 * rule's base and index) or compare (those the unwinder restores), whether
 * the stop is inside an IT block (an OUTSIDE_IT rule), the shadow frames
 * they are compared with, the stack bytes they read, the addresses they
 * compared with the stack's low end (the innermost sp, which moves with
 * every push: only where it passes one of them does it matter), and the
 * rules for their pcs, which never change once made. So where all of those
 * are as they were when that part of a walk was made, its answer and its
 * chain counts are the walk's again, and the kernel takes them without
 * stepping.
 *
 * A part is kept by its level: the shadow frames it compared, the outermost
 * `level` of them. Each walk's part from frame 1 on is kept, and a walk
 * looks for a kept part at every frame it reaches, so that a call (whose
 * caller's callers were walked from frame 1 at the stops before it) and a
 * return (to a frame whose callers were walked before the call) find the
 * parts made before them, as long as the shadow frames up to their level
 * stayed as they were at every stop since (memo_begin drops the others).
 * The whole walk, innermost step too, holds where besides the innermost
 * rule and its IT state nothing its step reads changed: not the registers
 * it loads from the stack, nor those it passes on that no later step reads
 * or compares (register_use).
 *
 * The stack bytes: each kept part records the spans it read (Track) and
 * what they held, compared where it is found: the answer depends on what
 * the bytes hold now. Comparing only what was read keeps the cost to the
 * few words each frame's rules load, whatever lies between them (a 64 KiB
 * frame's locals, say, which the stops of its function write to while its
 * callers' records stay).
 */
#include "kernel.h"

#include <string.h>

/* A walk that read more bytes than this is not kept: comparing them at every
 * stop would cost more than walking again. */
#define MEMO_MAX_BYTES (64 * 1024)

int memo_init(WalkMemo *m, Py_ssize_t unwinders) {
    memset(m, 0, sizeof *m);
    m->enabled = 1;
    m->walks = PyMem_Calloc(unwinders + 1, sizeof(UnwinderMemo));
    if (!m->walks) { PyErr_NoMemory(); return -1; }
    m->count = unwinders;
    return 0;
}

void memo_free(WalkMemo *m) {
    for (Py_ssize_t i = 0; i < m->count; i++) {
        UnwinderMemo *u = &m->walks[i];
        for (int level = 0; u->parts && level < MEMO_LEVELS; level++) PyMem_Free(u->parts[level].read.bytes);
        PyMem_Free(u->parts);
        PyMem_Free(u->whole.first.bytes);
    }
    PyMem_Free(m->walks);
    PyMem_Free(m->expected);
    memset(m, 0, sizeof *m);
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

/* holds, where memory may have changed since: the bytes compared. */
static int holds_still(const WalkMemo *m, uint64_t *held_at, const Snapshot *kept, const uint8_t *memory,
                       int64_t base) {
    if (!still_holds(kept, memory, base)) return 0;
    *held_at = m->epoch;
    return 1;
}

/* Do the bytes of `kept`, which held at epoch *held_at, hold now? Not compared where no instruction since
 * could have written memory (the tracer's `dirty`): most stops, checked inline. */
static inline int holds(const WalkMemo *m, uint64_t *held_at, const Snapshot *kept, const uint8_t *memory,
                        int64_t base) {
    return *held_at == m->epoch || holds_still(m, held_at, kept, memory, base);
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

/* Drop every whole walk (it compares every shadow frame), and the parts above level `kept`, whose shadow
 * frames changed. */
static void forget_above(WalkMemo *m, Py_ssize_t kept) {
    for (Py_ssize_t i = 0; i < m->count; i++) {
        UnwinderMemo *u = &m->walks[i];
        u->whole.valid = 0;
        for (int slot = 0; u->parts && slot < MEMO_LEVELS; slot++)
            if (u->parts[slot].level > kept) u->parts[slot].valid = 0;
    }
}

void memo_begin(WalkMemo *m, const Expected *expected, Py_ssize_t frames, int dirty) {
    m->active = m->enabled && m->frames >= 0;  /* out of memory once: nothing kept since */
    if (!m->active) return;
    m->epoch += dirty != 0;
    /* The shadow frames that stayed as they were: their count, from the outermost. */
    const Py_ssize_t shared = frames < m->frames ? frames : m->frames;
    Py_ssize_t same = 0;
    if (shared && same_bytes(expected, m->expected, (size_t)shared * sizeof(Expected)))
        same = shared;
    else
        while (same < shared && same_bytes(&expected[same], &m->expected[same], sizeof(Expected))) same++;
    if (same == frames && frames == m->frames) return;
    forget_above(m, same);
    if ((size_t)frames > m->expected_capacity) {
        Expected *grown = PyMem_Realloc(m->expected, (size_t)frames * sizeof(Expected));
        if (!grown) { forget_above(m, -1); m->frames = -1; m->active = 0; return; }
        m->expected = grown;
        m->expected_capacity = (size_t)frames;
    }
    memcpy(m->expected + same, expected + same, (size_t)(frames - same) * sizeof(Expected));
    m->frames = frames;
}

/* The valid part kept at `level`, or NULL. */
static inline KeptPart *part_at(const UnwinderMemo *u, Py_ssize_t level) {
    KeptPart *part = u->parts ? &u->parts[level % MEMO_LEVELS] : NULL;
    return part && part->valid && part->level == level ? part : NULL;
}

/* Do two frames hold the same d8-d15 and registers `regs` (bit = register)? */
static inline int same_registers(const KFrame *a, const KFrame *b, uint32_t regs) {
    if (a->d_known != b->d_known || (a->d_known && !same_bytes(a->d, b->d, sizeof a->d))) return 0;
    for (; regs; regs &= regs - 1)
        if (a->r[__builtin_ctz(regs)] != b->r[__builtin_ctz(regs)]) return 0;
    return 1;
}

const KeptPart *memo_find(WalkMemo *m, Py_ssize_t unwinder, Py_ssize_t level, const KFrame *start, int in_it,
                          int64_t low, const uint8_t *memory, int64_t base) {
    KeptPart *w = m->active ? part_at(&m->walks[unwinder], level) : NULL;
    if (!w || w->in_it != in_it) return NULL;
    /* Guards and reads compare addresses with the stack's low end: where it moved, the walk holds if every
     * address it compared lay at or above both ends, and it reported neither (a guard's failure does). */
    if (w->low != low && (w->answer.kind == ANSWER_GUARD_FAILS || w->lowest < (low > w->low ? low : w->low)))
        return NULL;
    if (!same_registers(start, &w->start, w->inputs)) return NULL;
    return holds(m, &w->held_at, &w->read, memory, base) ? w : NULL;
}

/* An unwinder's MEMO_LEVELS parts, none valid. Not zeroed whole: a walk uses the few levels of its program's
 * calls, and zeroing every level of every unwinder (some 290 KB a run) wrote what no walk reads. */
static KeptPart *new_parts(void) {
    KeptPart *parts = PyMem_Malloc(MEMO_LEVELS * sizeof(KeptPart));
    for (int level = 0; parts && level < MEMO_LEVELS; level++) {
        parts[level].valid = 0;
        parts[level].level = -1;
        parts[level].read.bytes = NULL;  /* memo_free frees it, snapshot grows it */
        parts[level].read.capacity = 0;
    }
    return parts;
}

void memo_keep(WalkMemo *m, Py_ssize_t unwinder, Py_ssize_t level, Py_ssize_t from, const KFrame *start,
               uint32_t inputs, int in_it, int64_t low, const Track *track, const Answer *answer,
               const MethodCounts *counted, const uint8_t *memory, int64_t base) {
    if (!m->active) return;
    UnwinderMemo *u = &m->walks[unwinder];
    if (!u->parts && !(u->parts = new_parts())) return;  /* not kept */
    KeptPart *w = &u->parts[level % MEMO_LEVELS];
    w->valid = 0;
    if (snapshot(&w->read, track, memory, base)) return;
    w->valid = 1;
    w->held_at = m->epoch;
    w->level = level;
    w->from = from;
    w->start = *start;
    w->inputs = inputs;
    w->in_it = in_it;
    w->low = low;
    w->lowest = track->lowest;
    w->answer = *answer;
    w->counted.any = 0;
    counts_add(&w->counted, counted);
}

/* The registers r0-r12 whose values at the stop a rule's step reads, as
 * the base or index of its addresses, and those it passes to the caller
 * unchanged (r4-r11 it does not load from the stack: the scratch ones,
 * r0-r3 and r12, the walk clears); a chain's are its methods'. A register
 * the step loads is never passed on, but where a rule may end before its
 * loads (a leaf unless a record) or passes every register on (a scan). A
 * failing rule reads and passes none. */
static RegisterUse register_use(const uint8_t *rule, Py_ssize_t size) {
    const uint32_t every = 0x1FFF, callee_saved = 0x0FF0;
    RuleHeader h;
    if (size < (Py_ssize_t)sizeof h) return (RegisterUse){every, every};
    memcpy(&h, rule, sizeof h);
    if (h.flags & FAILS) return (RegisterUse){0, 0};
    if (h.flags & SCAN) return (RegisterUse){0, callee_saved};
    if (!(h.flags & CHAIN)) {
        RegisterUse use = {0, callee_saved};
        const Py_ssize_t loads = (Py_ssize_t)h.pre_loads + h.loads;
        if (!(h.flags & LEAF_UNLESS_RECORD) && loads >= 0 &&
            (Py_ssize_t)sizeof h + loads * (Py_ssize_t)sizeof(Load) <= size) {
            for (Py_ssize_t i = 0; i < loads; i++) {
                Load l;
                memcpy(&l, rule + sizeof h + i * sizeof l, sizeof l);
                if (l.reg >= 0 && l.reg < 16) use.passes &= ~(1u << l.reg);
            }
        }
        if (h.base >= 0 && h.base < 16) use.reads |= 1u << h.base;
        if (h.index >= 0 && h.index < 16) use.reads |= 1u << h.index;
        use.reads &= every;
        return use;
    }
    RegisterUse use = {0, 0};
    const uint8_t *at = rule + sizeof h, *end = rule + size;
    for (int m = 0; m < h.highest && at + 4 <= end; m++) {
        int32_t length;
        memcpy(&length, at, sizeof length);
        at += sizeof length;
        if (length < 0 || at + length > end) return (RegisterUse){every, every};
        const RegisterUse method = register_use(at, length);
        use.reads |= method.reads;
        use.passes |= method.passes;
        at += length;
    }
    return use;
}

const KeptWhole *memo_find_whole(WalkMemo *m, Py_ssize_t unwinder, PyObject *rule, const KFrame *innermost,
                                 int it, Py_ssize_t frames, const uint8_t *memory, int64_t base) {
    KeptWhole *w = &m->walks[unwinder].whole;
    if (!m->active || !w->valid || w->rule != rule || w->it != it || innermost->r[PC] == w->differs_from) return NULL;
    /* sp and lr first (every step may read them; most walks not taken whole differ there), then the rule's */
    if (innermost->r[SP] != w->innermost.r[SP] || innermost->r[LR] != w->innermost.r[LR] ||
        !same_registers(innermost, &w->innermost, w->inputs))
        return NULL;
    if (!holds(m, &w->held_at, &w->first, memory, base)) return NULL;
    if (w->needs_outer) {  /* the outer part it was made with, unless another walk of this unwinder replaced it */
        KeptPart *outer = part_at(&m->walks[unwinder], frames - 1);
        if (!outer || !holds(m, &outer->held_at, &outer->read, memory, base)) return NULL;
    }
    return w;
}

void memo_keep_whole(WalkMemo *m, Py_ssize_t unwinder, PyObject *rule, const KFrame *innermost, int it,
                     Py_ssize_t frames, const Track *first, int needs_outer, uint32_t callers_read,
                     const Answer *answer, const MethodCounts *counted, const uint8_t *memory, int64_t base) {
    UnwinderMemo *u = &m->walks[unwinder];
    KeptWhole *w = &u->whole;
    w->valid = 0;
    if (!m->active || first->pc_read || first->flags_read) return;
    if (needs_outer && !part_at(u, frames - 1)) return;  /* the walk's outer part must be the one kept there */
    if (snapshot(&w->first, first, memory, base)) return;
    w->valid = 1;
    w->held_at = m->epoch;
    w->needs_outer = needs_outer;
    /* mostly the rule of the stop before, whose use is known (a walk not kept leaves rule and use as they
     * were) */
    if (w->rule != rule)
        w->use = rule == Py_None ? (RegisterUse){0, 0}
                                 : register_use((const uint8_t *)PyBytes_AS_STRING(rule), PyBytes_GET_SIZE(rule));
    /* a register passed on matters only where the rest of the walk reads or compares it in the caller */
    w->inputs = w->use.reads | (w->use.passes & callers_read);
    w->rule = rule;
    w->innermost = *innermost;
    w->it = it;
    w->differs_from = first->differs_from;
    w->answer = *answer;
    w->counted.any = 0;
    counts_add(&w->counted, counted);
}

void memo_end(WalkMemo *m) { m->active = 0; }
