/* Verifier: at one stop, walk every unwinder by its rules (harness/unwind/rule.py)
 * over the emulator's stack memory and compare each caller frame with the
 * shadow stack. Wherever a rule's guard fails the answer is DEFER, and the
 * harness runs the unwinder's own Python step instead (harness/verify/kernel.py).
 */
#include "kernel.h"

#include <string.h>

/* CALLER_FAILS: the caller fails harness.unwind.walk.check_caller, where
 * `step` raises: a chain goes on to its next method, any other rule fails
 * so (ANSWER_CALLER_FAILS). CHAIN_REFUSES: every method of a chain failed,
 * the last with no_info. */
enum { STEP_OK, STEP_DEFER, STEP_FAILS, STEP_GUARD_FAILS, STEP_CALLER_FAILS, STEP_ALIGNED8_FAILS, STEP_CHAIN_REFUSES };

typedef struct {
    const uint8_t *memory;  /* the stack mapping, from guest address `base` */
    int64_t base, low, high;
    PyObject *site_tables;  /* the scans' return addresses (Verifier.add_sites): a list of bytes */
    Track *track;           /* what the walk has looked at, for the memo */
} KStack;

static inline void probe(const KStack *s, int64_t a) {
    if (a < s->track->lowest) s->track->lowest = a;
}

static inline int contains(const KStack *s, int64_t a) {
    probe(s, a);
    return s->low <= a && a <= s->high;
}

static inline int readable(const KStack *s, int64_t a, int64_t size) {
    probe(s, a);
    if (a < s->low || a < s->base || a + size > s->high) return 0;
    track_read(s->track, a, a + size);
    return 1;
}

static inline int read32(const KStack *s, int64_t a, int64_t *out) {
    uint32_t v;
    if (!readable(s, a, 4)) return 0;
    memcpy(&v, s->memory + (a - s->base), 4);
    *out = v;
    return 1;
}

static inline int read64(const KStack *s, int64_t a, uint64_t *out) {
    if (!readable(s, a, 8)) return 0;
    memcpy(out, s->memory + (a - s->base), 8);
    return 1;
}


/* harness.unwind.walk.check_caller: STEP_OK, or STEP_CALLER_FAILS where it
 * would raise (noting in the walk's Track when it compared the pcs). */
static inline int caller_ok(int64_t callee_sp, int64_t callee_pc, const KFrame *caller, int innermost,
                            const KStack *s) {
    if (caller->r[SP] & 3) return STEP_CALLER_FAILS;
    if (caller->r[SP] > callee_sp) return STEP_OK;
    if (!innermost || caller->r[SP] != callee_sp) return STEP_CALLER_FAILS;
    if (caller->r[PC] == callee_pc) {
        s->track->pc_read = 1;
        return STEP_CALLER_FAILS;
    }
    s->track->differs_from = caller->r[PC];  /* the same answer at any frame pc but the caller's */
    return STEP_OK;
}

/* Is `word` one of the `count` sorted uint32 at `sites`? Most words of a
 * stack (its own addresses, small numbers) lie outside the sites' span. */
static int among(const uint8_t *sites, Py_ssize_t count, uint32_t word) {
    uint32_t first, last;
    if (!count) return 0;
    memcpy(&first, sites, 4);
    memcpy(&last, sites + 4 * (size_t)(count - 1), 4);
    if (word < first || word > last) return 0;
    Py_ssize_t lo = 0, hi = count;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        uint32_t site;
        memcpy(&site, sites + 4 * (size_t)mid, 4);
        if (site < word) lo = mid + 1; else hi = mid;
    }
    uint32_t found = 0;
    if (lo < count) memcpy(&found, sites + 4 * (size_t)lo, 4);
    return lo < count && found == word;
}

/* harness.unwind.scan.ScanUnwinder.step: the first word of the `window`
 * bytes from sp up (while inside the stack) that is a return address of
 * site table `table` is the caller's pc, the caller's sp lies just above
 * it; where none is, the rule's guard fails (base: the frame's sp). */
static int scan_step(const RuleHeader *h, KFrame *f, int innermost, const KStack *s, int64_t *base_out) {
    const int64_t callee_sp = f->r[SP], callee_pc = f->r[PC];
    *base_out = callee_sp;
    if (h->index < 0 || h->index >= PyList_GET_SIZE(s->site_tables)) return STEP_DEFER;
    PyObject *table = PyList_GET_ITEM(s->site_tables, h->index);
    const uint8_t *sites = (const uint8_t *)PyBytes_AS_STRING(table);
    const Py_ssize_t count = PyBytes_GET_SIZE(table) / 4;
    for (int64_t slot = callee_sp; slot < callee_sp + h->lowest; slot += 4) {
        int64_t word;
        if (!read32(s, slot, &word)) break;
        if (among(sites, count, (uint32_t)word)) {
            f->r[PC] = word & ~(int64_t)1;
            f->r[SP] = slot + 4;
            return caller_ok(callee_sp, callee_pc, f, innermost, s);
        }
    }
    return (h->flags & GUARD_FAILS) ? STEP_GUARD_FAILS : STEP_DEFER;
}

static int step(const uint8_t *rule, KFrame *f, int innermost, const KStack *s, uint32_t cpsr,
                int64_t *base_out, int *method_out);

/* harness.unwind.scan.ChainUnwinder.step: each of the `count` rules after
 * the header in turn, the next where one fails (outright, on a guard, or
 * on check_caller); the first to give a caller gives it, and *method_out
 * its place. A rule that defers (or is empty) defers the chain. Where every
 * one fails, the chain fails with the last one's kind: CHAIN_REFUSES where
 * that is no_info (a stop, where it is in a library: the tracer counts it),
 * else DEFER (`step` words the chain's failure). */
static int chain_step(const uint8_t *rules, int32_t count, KFrame *f, int innermost, const KStack *s,
                      uint32_t cpsr, int64_t *base_out, int *method_out) {
    if (count < 0 || count > CHAIN_METHODS) return STEP_DEFER;
    int last_no_info = 0;
    for (int method = 0; method < count; method++) {
        int32_t length;
        memcpy(&length, rules, sizeof length);
        rules += sizeof length;
        if (length <= 0) return STEP_DEFER;
        RuleHeader h;
        memcpy(&h, rules, sizeof h);
        if (h.flags & CHAIN) return STEP_DEFER;  /* chains of chains are not packed */
        KFrame trial = *f;
        int unused;
        const int result = step(rules, &trial, innermost, s, cpsr, base_out, &unused);
        switch (result) {
        case STEP_OK:
            *f = trial;
            *method_out = method;
            return STEP_OK;
        case STEP_DEFER: return STEP_DEFER;
        }
        last_no_info = (result == STEP_FAILS || result == STEP_GUARD_FAILS) && (h.flags & NO_INFO);
        rules += length;
    }
    return count && last_no_info ? STEP_CHAIN_REFUSES : STEP_DEFER;
}

/* One step by a rule, turning the frame `f` into its caller in place (on a
 * failure or deferral it is left half-changed, and the walk ends); *base_out
 * gets the rule's base address (for a guard failure), *method_out the
 * method of a chain that gave the caller (else -1). */
static int step(const uint8_t *rule, KFrame *f, int innermost, const KStack *s, uint32_t cpsr,
                int64_t *base_out, int *method_out) {
    RuleHeader h;
    memcpy(&h, rule, sizeof h);
    *method_out = -1;
    if (h.flags & FAILS) return STEP_FAILS;
    if (h.flags & CHAIN) return chain_step(rule + sizeof h, h.highest, f, innermost, s, cpsr, base_out, method_out);
    if (h.flags & SCAN) return scan_step(&h, f, innermost, s, base_out);
    if (h.base < 0 || h.base > 15 || h.index < -1 || h.index > 15) return STEP_DEFER;
    s->track->regs |= 1u << h.base | (h.index >= 0 ? 1u << h.index : 0);
    const int64_t callee_sp = f->r[SP], callee_pc = f->r[PC];
    const Load *loads = (const Load *)(rule + sizeof h);
    int pc_loaded = 0;
    if (h.pre_loads) {  /* read from sp before the base is taken */
        if ((callee_sp & 3) || !contains(s, callee_sp + h.pre_lowest) || !contains(s, callee_sp + h.pre_highest))
            return STEP_DEFER;
        for (int i = 0; i < h.pre_loads; i++) {
            Load l;
            memcpy(&l, &loads[i], sizeof l);
            if (l.reg < 0 || l.reg > 15 || !read32(s, callee_sp + l.offset, &f->r[l.reg])) return STEP_DEFER;
            pc_loaded |= l.reg == PC;
        }
        loads += h.pre_loads;
    }
    int64_t base = (h.index < 0 ? f->r[h.base] : (f->r[h.base] + f->r[h.index]) & 0xFFFFFFFF) + h.offset;
    *base_out = base;
    int guarded = 1;
    if ((h.flags & BOUNDS) && !(contains(s, base + h.lowest) && contains(s, base + h.highest))) guarded = 0;
    if ((h.flags & ALIGNED) && (base & 3)) guarded = 0;
    if ((h.flags & ABOVE_SP) && base < callee_sp) guarded = 0;
    if (h.flags & LEAF_UNLESS_RECORD) {
        int64_t saved = 0;
        int record = guarded && read32(s, base, &saved) && (saved == 0 || saved > base);
        if (!record) {
            s->track->regs |= 1u << LR;
            f->r[PC] = f->r[LR] & ~(int64_t)1;
            return caller_ok(callee_sp, callee_pc, f, innermost, s);
        }
    } else if (!guarded) {
        return (h.flags & GUARD_FAILS) ? STEP_GUARD_FAILS : STEP_DEFER;
    }
    if ((h.flags & OUTSIDE_IT) && it_state(cpsr)) return STEP_DEFER;
    for (int i = 0; i < h.loads; i++) {
        Load l;
        memcpy(&l, &loads[i], sizeof l);
        if (l.reg < 0 || l.reg > 15 || !read32(s, base + l.offset, &f->r[l.reg])) return STEP_DEFER;
        pc_loaded |= l.reg == PC;
    }
    for (int i = h.loads; i < h.loads + h.vfp_loads; i++) {
        Load l;
        uint64_t value;
        memcpy(&l, &loads[i], sizeof l);
        if (!read64(s, base + l.offset, &value)) return STEP_DEFER;
        if (l.reg >= 8 && l.reg < 16) {  /* only d8-d15 are ever compared */
            f->d[l.reg - 8] = value;
            f->d_known |= 1u << (l.reg - 8);
        }
    }
    if (!(h.flags & PC_FROM_LR) && !pc_loaded) s->track->pc_read = 1;  /* the caller keeps the frame's pc */
    if (h.flags & PC_FROM_LR) s->track->regs |= 1u << LR;
    f->r[PC] = ((h.flags & PC_FROM_LR) ? f->r[LR] : f->r[PC]) & ~(int64_t)1;
    f->r[SP] = base + h.end;
    if ((h.flags & CALLER_ALIGNED8) && (f->r[SP] & 7)) return STEP_ALIGNED8_FAILS;  /* Chrome's check fails the step */
    return caller_ok(callee_sp, callee_pc, f, innermost, s);
}

struct Verifier {
    PyObject_HEAD
    Py_buffer memory;
    int64_t stack_base, stack_high;  /* `memory`'s span: the process's stack */
    const uint8_t *bytes;  /* the stack walks read now, [base, high): `memory`, or a thread's (verifier_window) */
    int64_t base, high;
    Py_ssize_t count;
    Sources sources;     /* where each unwinder's rules come from (sources.c) */
    uint32_t *core_mask; /* per unwinder: the r4-r11 it restores (bit = register) */
    int *vfp;            /* per unwinder: whether it restores d8-d15 */
    int *looks_ahead;    /* per unwinder: a caller whose own rule is None defers the walk before it is compared */
    PyObject *site_tables;  /* list of bytes: the scans' sorted return addresses (add_sites) */
    uint64_t *methods;   /* [(unwinder * CHAIN_METHODS + method) * 2 + right]: a chain's frames, and right ones */
    uint64_t *passes;    /* [stop class * count + unwinder]: walks that matched every frame */
    uint64_t *invented;  /* the same shape: of those, the walks whose step past the outermost frame gave a caller */
    Py_ssize_t classes;
    int past_bottom;     /* the outermost frame has no caller (a thread's first): step past it, to see if one is made */
    WalkMemo memo;       /* outer walks kept from the last stop */
};

Py_ssize_t verifier_unwinders(const Verifier *v) { return v->count; }

void verifier_window(Verifier *v, const uint8_t *bytes, int64_t base, int64_t high) {
    v->bytes = bytes ? bytes : v->memory.buf;
    v->base = bytes ? base : v->stack_base;
    v->high = bytes ? high : v->stack_high;
}

/* The collector sees what a Verifier holds: its providers are the bound
 * methods of the StopKernel that holds it, a cycle that only the collector
 * frees (with every table of the run's unwinders behind it). */
static int Verifier_traverse(Verifier *self, visitproc visit, void *arg) {
    Py_VISIT(self->sources.provide);
    Py_VISIT(self->sources.provide_book);
    Py_VISIT(self->sources.provide_plan);
    Py_VISIT(self->site_tables);
    Py_VISIT(self->memory.obj);
    return 0;
}

static int Verifier_clear(Verifier *self) {
    sources_release(&self->sources);
    Py_CLEAR(self->site_tables);
    return 0;
}

static void Verifier_dealloc(Verifier *self) {
    PyObject_GC_UnTrack(self);
    if (self->memory.obj) PyBuffer_Release(&self->memory);
    sources_free(&self->sources);
    Py_XDECREF(self->site_tables);
    PyMem_Free(self->methods);
    PyMem_Free(self->passes);
    PyMem_Free(self->invented);
    PyMem_Free(self->core_mask);
    PyMem_Free(self->vfp);
    PyMem_Free(self->looks_ahead);
    memo_free(&self->memo);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Verifier(memory, base, high, compared: [(core mask, vfp, looks ahead)], provide, provide_book, provide_plan) */
static int Verifier_init(Verifier *self, PyObject *args, PyObject *kwds) {
    PyObject *restores, *provide, *provide_book, *provide_plan;
    long long base, high;
    if (self->sources.items) {
        PyErr_SetString(PyExc_TypeError, "a Verifier is initialised once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "y*LLOOOO", &self->memory, &base, &high, &restores, &provide, &provide_book,
                          &provide_plan))
        return -1;
    if (!PyList_Check(restores) || !PyCallable_Check(provide) || !PyCallable_Check(provide_book) ||
        !PyCallable_Check(provide_plan)) {
        PyErr_SetString(PyExc_TypeError, "restores must be a list, the providers callable");
        return -1;
    }
    if (high - base > (long long)self->memory.len) {
        PyErr_SetString(PyExc_ValueError, "stack memory is smaller than [base, high)");
        return -1;
    }
    self->stack_base = self->base = base;
    self->stack_high = self->high = high;
    self->bytes = self->memory.buf;
    self->count = PyList_GET_SIZE(restores);
    self->core_mask = PyMem_Calloc(self->count + 1, sizeof(uint32_t));
    self->vfp = PyMem_Calloc(self->count + 1, sizeof(int));
    self->looks_ahead = PyMem_Calloc(self->count + 1, sizeof(int));
    self->methods = PyMem_Calloc(2 * CHAIN_METHODS * self->count + 1, sizeof(uint64_t));
    self->site_tables = PyList_New(0);
    if (!self->core_mask || !self->vfp || !self->looks_ahead || !self->methods || !self->site_tables) {
        PyErr_NoMemory();
        return -1;
    }
    if (memo_init(&self->memo, self->count)) return -1;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        unsigned int mask;
        int vfp, looks_ahead;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(restores, i), "Ipp", &mask, &vfp, &looks_ahead)) return -1;
        self->core_mask[i] = mask;
        self->vfp[i] = vfp;
        self->looks_ahead[i] = looks_ahead;
    }
    return sources_init(&self->sources, self->count, provide, provide_book, provide_plan);
}

/* Mismatch between a caller frame and its shadow frame: the register
 * (15 pc, 13 sp, 4-11, or 264-271 for d8-d15), or -1 if none. */
static int mismatch(const KFrame *c, const Expected *want, uint32_t core_mask, int vfp,
                    int64_t *got, uint64_t *expected) {
    if (c->r[PC] != want->pc) { *got = c->r[PC]; *expected = want->pc; return PC; }
    if (c->r[SP] != want->sp) { *got = c->r[SP]; *expected = want->sp; return SP; }
    if (want->state & NEVER_RESUMES) return -1;  /* its registers are never read again */
    for (int reg = 4; reg < 12; reg++) {
        if ((core_mask >> reg & 1) && c->r[reg] != want->r[reg - 4]) {
            *got = c->r[reg]; *expected = want->r[reg - 4]; return reg;
        }
    }
    if (vfp && (want->state & VFP_KNOWN)) {
        for (int i = 0; i < 8; i++) {
            if ((c->d_known >> i & 1) && c->d[i] != want->d[i]) {
                *got = (int64_t)c->d[i]; *expected = want->d[i]; return 264 + i;
            }
        }
    }
    return -1;
}

/* An innermost rule that simulates an epilogue ahead (OUTSIDE_IT), at a stop
 * inside an IT block: as EpilogueFirst.step, the epilogue runs only from the
 * block's last instruction where its condition holds (*step_cpsr then as
 * outside the block), else the tables' rule holds (the walk's answer then
 * depends on the flags: `flags_read`). NULL on a Python error. */
static PyObject *rule_in_it_block(Verifier *self, Py_ssize_t unwinder, PyObject *rule, int64_t pc, uint32_t cpsr,
                                  const KStack *s, Py_ssize_t *rule_id, uint32_t *step_cpsr) {
    const int state = it_state(cpsr);
    s->track->flags_read = 1;
    if ((state & 7) == 0 && condition_holds((unsigned)state >> 4, cpsr)) {
        *step_cpsr = cpsr & ~CPSR_IT_BITS;
        return rule;
    }
    PyObject *tables = sources_fallback_rule(&self->sources, unwinder, pc, rule_id);
    return tables == Py_None ? rule : tables;
}

/* Does the unwinder's step give another caller than its rule where the
 * caller's own rule is None (Unwinder.looks_ahead: a signal frame's
 * trampoline)? 1: defer the walk; -1 on a Python error. The caller's rule
 * looked up (borrowed) and its id in *rule, *rule_id: its own step's, taken
 * from there (NULL where not looked up). */
static int defers_ahead(Verifier *self, Py_ssize_t unwinder, const KFrame *caller, PyObject **rule,
                        Py_ssize_t *rule_id) {
    *rule = NULL;
    if (!self->looks_ahead[unwinder]) return 0;
    *rule = sources_rule(&self->sources, unwinder, caller->r[PC], 0, rule_id);
    return *rule ? *rule == Py_None : -1;
}

/* A walk that matched every frame, up to the outermost one, which has no
 * caller (a thread's first frame): one more step from it, as
 * walks.first_difference takes it with past_bottom. A step that fails ends
 * the walk honestly; one that gives a caller invents a frame (where its pc
 * is 0, it is the end a walker stops at: glibc's _start clears lr so). A
 * step the kernel cannot take defers the walk. */
static int step_past_bottom(Verifier *self, Py_ssize_t unwinder, const KFrame *frame, int innermost, const KStack *s,
                            uint32_t cpsr, Answer *out) {
    Py_ssize_t rule_id = -1;
    PyObject *rule = sources_rule(&self->sources, unwinder, frame->r[PC], innermost, &rule_id);
    if (!rule) return -1;
    uint32_t step_cpsr = cpsr;
    if (innermost && it_state(cpsr) && rule != Py_None &&
        (((const RuleHeader *)PyBytes_AS_STRING(rule))->flags & OUTSIDE_IT) &&
        !(rule = rule_in_it_block(self, unwinder, rule, frame->r[PC], cpsr, s, &rule_id, &step_cpsr)))
        return -1;
    if (rule == Py_None) { out->kind = ANSWER_DEFER; return 0; }
    KFrame caller = *frame;
    int64_t base;
    int method;
    const int result = step((const uint8_t *)PyBytes_AS_STRING(rule), &caller, innermost, s, step_cpsr, &base,
                            &method);
    PyObject *ahead_rule;
    Py_ssize_t ahead_id = -1;
    const int ahead = result == STEP_OK ? defers_ahead(self, unwinder, &caller, &ahead_rule, &ahead_id) : 0;
    if (ahead < 0) return -1;
    if (result == STEP_DEFER || ahead) out->kind = ANSWER_DEFER;
    out->invents = result == STEP_OK && caller.r[PC] != 0;
    return 0;
}

/* Frames [from, to) of a walk, each stepped by its rule and compared with
 * its shadow frame, until one does not pass; a chain's frames are counted
 * in `counted` (see verifier_walk). */
static int walk_frames(Verifier *self, Py_ssize_t unwinder, KFrame *frame, Py_ssize_t from, Py_ssize_t to,
                       const KStack *s, uint32_t cpsr, const Expected *expected, Py_ssize_t frames, Answer *out,
                       MethodCounts *counted, PyObject *first_rule, Py_ssize_t first_id, Py_ssize_t *taken_at) {
    const int in_it = it_state(cpsr) != 0;
    PyObject *ahead_rule = NULL;  /* the frame's rule, where the step before looked it up (defers_ahead) */
    Py_ssize_t ahead_id = -1;
    for (Py_ssize_t index = from; index < to && out->kind == ANSWER_PASS; index++) {
        const int innermost = index == 0;
        if (!innermost && self->memo.active) {  /* the rest of the walk, as an earlier stop's walk made it? */
            const KeptPart *kept = memo_find(&self->memo, unwinder, frames - index, frame, in_it, s->low, s->memory,
                                             self->base);
            if (kept) {
                *out = kept->answer;
                out->frame += index - kept->from;  /* its frames counted in this walk */
                counts_add(counted, &kept->counted);
                for (int i = 0; i < kept->read.reads.count; i++)  /* what this walk's part depends on, with it */
                    track_read(s->track, kept->read.reads.spans[i].low, kept->read.reads.spans[i].high);
                s->track->regs |= kept->inputs;
                if (kept->lowest < s->track->lowest) s->track->lowest = kept->lowest;
                *taken_at = index;
                return 0;
            }
        }
        Py_ssize_t rule_id = ahead_rule ? ahead_id : first_id;
        out->frame = index;
        out->pc = frame->r[PC];  /* of the frame being unwound */
        out->sp = frame->r[SP];
        PyObject *rule = innermost && first_rule ? first_rule
                       : ahead_rule ? ahead_rule : sources_rule(&self->sources, unwinder, out->pc, innermost, &rule_id);
        ahead_rule = NULL;
        if (!rule) return -1;
        uint32_t step_cpsr = cpsr;
        if (innermost && in_it && rule != Py_None &&
            (((const RuleHeader *)PyBytes_AS_STRING(rule))->flags & OUTSIDE_IT) &&
            !(rule = rule_in_it_block(self, unwinder, rule, out->pc, cpsr, s, &rule_id, &step_cpsr)))
            return -1;
        out->rule_id = rule_id;
        if (rule == Py_None) { out->kind = ANSWER_DEFER; return 0; }
        out->rule_flags = ((const RuleHeader *)PyBytes_AS_STRING(rule))->flags;
        int method;
        const int result = step((const uint8_t *)PyBytes_AS_STRING(rule), frame, innermost, s, step_cpsr, &out->base,
                                &method);
        switch (result) {
        case STEP_DEFER: out->kind = ANSWER_DEFER; return 0;
        case STEP_FAILS: out->kind = ANSWER_FAILS; continue;
        case STEP_CALLER_FAILS:  /* `step` raises check_caller's failure (a chain tries its next method instead) */
            out->kind = ANSWER_CALLER_FAILS;
            out->got = frame->r[SP];
            continue;
        case STEP_CHAIN_REFUSES: out->kind = ANSWER_CHAIN_FAILS; continue;
        case STEP_GUARD_FAILS: case STEP_ALIGNED8_FAILS:
            out->kind = ANSWER_GUARD_FAILS;
            out->low = s->low;
            out->high = s->high;
            /* of one kind (bad_read, for the caller's alignment) whatever the values */
            out->merged = result == STEP_ALIGNED8_FAILS || (out->rule_flags & GUARD_KIND_FIXED);
            continue;
        }
        const int ahead = defers_ahead(self, unwinder, frame, &ahead_rule, &ahead_id);
        if (ahead < 0) return -1;
        if (ahead) { out->kind = ANSWER_DEFER; return 0; }
        out->reg = mismatch(frame, &expected[frames - 1 - index], self->core_mask[unwinder], self->vfp[unwinder],
                            &out->got, &out->want);
        if (out->reg >= 0) out->kind = ANSWER_MISMATCH;
        if (method >= 0) {
            count_method(counted, method, out->reg < 0);
        }
        /* r0-r3 and r12 hold nothing a caller relies on (verify.without_scratch). */
        frame->r[0] = frame->r[1] = frame->r[2] = frame->r[3] = frame->r[12] = 0;
    }
    /* every frame matched: past the outermost one, where that has no caller (in the part from frame 1 on, or
     * in the only part where the stop is in that frame) */
    if (out->kind == ANSWER_PASS && self->past_bottom && to == frames && (from > 0 || frames == 0))
        return step_past_bottom(self, unwinder, frame, frames == 0, s, cpsr, out);
    return 0;
}

/* A walk's chain counts, added to the unwinder's unless it deferred. */
static int commit_counts(Verifier *self, Py_ssize_t unwinder, const Answer *out, const MethodCounts *counted) {
    if (out->kind == ANSWER_DEFER || !counted->any) return 0;
    uint64_t *methods = self->methods + 2 * CHAIN_METHODS * unwinder;
    for (int i = 0; i < 2 * CHAIN_METHODS; i++) methods[i] += counted->n[i];
    return 0;
}

/* The walk, as walks.first_difference; where a chain's walk does not defer,
 * each frame it gave is counted for the method that gave it (and as right
 * where it matched), up to the first wrong one (LUL's count). Between
 * verifier_begin_stop and verifier_end_stop, the frames after the innermost
 * one's are taken from the last stop's walk where that still holds (memo.c). */
int verifier_walk(Verifier *self, Py_ssize_t unwinder, const KFrame *innermost_frame, int64_t low, uint32_t cpsr,
                  const Expected *expected, Py_ssize_t frames, Answer *out) {
    /* The whole walk of the last stop holds where nothing it depends on changed but the pc (memo.c): most
     * walks, taken before anything of a walk is set up. */
    const int whole = self->memo.active && frames > 0;
    const int it = it_state(cpsr);
    PyObject *rule = NULL;  /* the innermost frame's, looked up once where the memo needs it */
    Py_ssize_t rule_id = -1;
    if (whole) {
        rule = sources_rule(&self->sources, unwinder, innermost_frame->r[PC], 1, &rule_id);
        if (!rule) return -1;
        const KeptWhole *kept = memo_find_whole(&self->memo, unwinder, rule, innermost_frame, it, frames,
                                                self->bytes, self->base);
        if (kept) {
            *out = kept->answer;
            if (out->frame == 0) out->pc = innermost_frame->r[PC];  /* the innermost frame's failure: at this pc */
            self->memo.reused_whole++;
            return commit_counts(self, unwinder, out, &kept->counted);
        }
    }
    /* Only the counts are set: a zeroed Track and MethodCounts (some 140 bytes each) were a
     * memset a walk, and a walk reads no span or count past them. */
    Track track;
    track_reset(&track);
    const KStack s = { self->bytes, self->base, low, self->high, self->site_tables, &track };
    MethodCounts counted;  /* committed unless the walk defers */
    counted.any = 0;
    KFrame frame = *innermost_frame;
    out->kind = ANSWER_PASS;
    out->merged = 0;
    out->invents = 0;
    Py_ssize_t taken_at = -1;  /* where the walk took the rest of its frames from a kept part */
    if (walk_frames(self, unwinder, &frame, 0, frames < 1 ? frames : 1, &s, cpsr, expected, frames, out, &counted,
                    rule, rule_id, &taken_at))
        return -1;
    const Track first = track;
    /* (with one frame, the outer part is the step past it alone) */
    const int needs_outer = out->kind == ANSWER_PASS && (frames > 1 || (frames == 1 && self->past_bottom));
    uint32_t callers_read = self->core_mask[unwinder];  /* the caller's registers compared, and read after */
    if (needs_outer) {
        const KFrame caller = frame;
        MethodCounts walked;
        walked.any = 0;
        track_reset(&track);
        if (walk_frames(self, unwinder, &frame, 1, frames, &s, cpsr, expected, frames, out, &walked, NULL, -1,
                        &taken_at))
            return -1;
        if (taken_at >= 0) self->memo.reused++;
        if (taken_at != 1) {  /* keep the part from frame 1 on, unless it is the kept one */
            /* The caller's registers the outer frames read: those an address was taken from or a pc (lr), those
             * they compare (restored or passed on unchanged), and sp and pc, which every step reads. */
            const uint32_t inputs = track.regs | self->core_mask[unwinder] | 1u << SP | 1u << PC;
            memo_keep(&self->memo, unwinder, frames - 1, 1, &caller, inputs, it != 0, low, &track, out, &walked,
                      s.memory, self->base);
        }
        counts_add(&counted, &walked);
        callers_read |= track.regs;
    }
    if (whole)
        memo_keep_whole(&self->memo, unwinder, rule, innermost_frame, it, frames, &first, needs_outer, callers_read,
                        out, &counted, s.memory, self->base);
    return commit_counts(self, unwinder, out, &counted);
}

void verifier_begin_stop(Verifier *self, const Expected *expected, Py_ssize_t frames, int dirty) {
    memo_begin(&self->memo, expected, frames, dirty);
}

void verifier_end_stop(Verifier *self) {
    memo_end(&self->memo);
}

PyObject *answer_object(const Answer *a) {
    switch (a->kind) {
    case ANSWER_DEFER: Py_RETURN_FALSE;
    case ANSWER_FAILS: return Py_BuildValue("(ninL)", a->frame, 0, a->rule_id, (long long)a->pc);
    case ANSWER_GUARD_FAILS:
        return Py_BuildValue("(ninLLLLL)", a->frame, ANSWER_GUARD_FAILS, a->rule_id, (long long)a->base,
                             (long long)a->sp, (long long)a->low, (long long)a->high, (long long)a->pc);
    case ANSWER_CALLER_FAILS:
        return Py_BuildValue("(niLLL)", a->frame, ANSWER_CALLER_FAILS, (long long)a->got, (long long)a->sp,
                             (long long)a->pc);
    case ANSWER_CHAIN_FAILS:
        return Py_BuildValue("(ninL)", a->frame, ANSWER_CHAIN_FAILS, a->rule_id, (long long)a->pc);
    case ANSWER_MISMATCH:
        if (a->reg > PC)  /* d8-d15: 64-bit values */
            return Py_BuildValue("(niiKKL)", a->frame, 1, a->reg, (unsigned long long)a->got,
                                 (unsigned long long)a->want, (long long)a->pc);
        return Py_BuildValue("(niiLKL)", a->frame, 1, a->reg, (long long)a->got, (unsigned long long)a->want,
                             (long long)a->pc);
    }
    Py_RETURN_NONE;
}

/* `counts` ([classes * count]) grown to `classes` stop classes, zeroed past `had`; -1 out of memory. */
static int grow_counts(uint64_t **counts, Py_ssize_t had, Py_ssize_t classes, Py_ssize_t count) {
    uint64_t *grown = PyMem_Realloc(*counts, classes * count * sizeof(uint64_t) + 1);
    if (!grown) { PyErr_NoMemory(); return -1; }
    memset(grown + had * count, 0, (classes - had) * count * sizeof(uint64_t));
    *counts = grown;
    return 0;
}

int verifier_count_pass(Verifier *self, Py_ssize_t stop_class, Py_ssize_t unwinder, const Answer *answer) {
    if (stop_class >= self->classes) {
        Py_ssize_t classes = stop_class + 16;
        if (grow_counts(&self->passes, self->classes, classes, self->count) ||
            grow_counts(&self->invented, self->classes, classes, self->count))
            return -1;
        self->classes = classes;
    }
    self->passes[stop_class * self->count + unwinder]++;
    self->invented[stop_class * self->count + unwinder] += answer->invents != 0;
    return 0;
}

/* check(regs, pc, cpsr, vfp or None, low, expected: the packed shadow
 * frames, outermost first, stop class) -> ((unwinder, answer), ...) for
 * every unwinder whose walk did not match (see answer_object); matches are
 * counted per stop class (see passes). */
static PyObject *Verifier_check(Verifier *self, PyObject *args) {
    PyObject *regs, *vfp;
    unsigned long long pc;
    unsigned int cpsr;
    long long low;
    Py_buffer expected;
    Py_ssize_t stop_class;
    if (!PyArg_ParseTuple(args, "OKIOLy*n", &regs, &pc, &cpsr, &vfp, &low, &expected, &stop_class)) return NULL;
    PyObject *result = NULL, *found = NULL;
    KFrame frame;
    memset(&frame, 0, sizeof frame);
    if (stop_class < 0) {
        PyErr_SetString(PyExc_ValueError, "stop class must be >= 0");
        goto done;
    }
    PyObject *fast = PySequence_Fast(regs, "regs must be a sequence");
    if (!fast) goto done;
    if (PySequence_Fast_GET_SIZE(fast) < 15) {
        PyErr_SetString(PyExc_ValueError, "regs needs r0-r14");
        Py_DECREF(fast);
        goto done;
    }
    for (int i = 0; i < 15; i++) {
        frame.r[i] = (int64_t)PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
    }
    Py_DECREF(fast);
    frame.r[PC] = (int64_t)pc;
    if (vfp != Py_None) {
        PyObject *values = PySequence_Fast(vfp, "vfp must be a sequence");
        if (!values) goto done;
        for (int i = 0; i < 8 && i < PySequence_Fast_GET_SIZE(values); i++) {
            frame.d[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(values, i));
            frame.d_known |= 1u << i;
        }
        Py_DECREF(values);
    }
    if (PyErr_Occurred()) goto done;
    if (expected.len % sizeof(Expected)) {
        PyErr_SetString(PyExc_ValueError, "expected is not a whole number of packed frames");
        goto done;
    }
    Py_ssize_t frames = expected.len / sizeof(Expected);
    found = PyList_New(0);
    if (!found) goto done;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Answer answer;
        if (verifier_walk(self, i, &frame, low, cpsr, (const Expected *)expected.buf, frames, &answer)) goto done;
        /* a chain's refusal is answered by the tracer alone: it knows the libraries */
        if (answer.kind == ANSWER_CHAIN_FAILS) answer.kind = ANSWER_DEFER;
        if (answer.kind == ANSWER_PASS) {
            if (verifier_count_pass(self, stop_class, i, &answer)) goto done;
            continue;
        }
        PyObject *pair = Py_BuildValue("(nN)", i, answer_object(&answer));
        if (!pair || PyList_Append(found, pair)) { Py_XDECREF(pair); goto done; }
        Py_DECREF(pair);
    }
    result = PyList_AsTuple(found);
done:
    Py_XDECREF(found);
    PyBuffer_Release(&expected);
    return result;
}

/* [(stop class, unwinder, count)] of `counts` where nonzero. */
static PyObject *class_counts(const Verifier *self, const uint64_t *counts) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t c = 0; c < self->classes; c++) {
        for (Py_ssize_t u = 0; u < self->count; u++) {
            uint64_t n = counts[c * self->count + u];
            if (!n) continue;
            PyObject *item = int_triple(c, u, n);
            if (!item || PyList_Append(out, item)) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
            Py_DECREF(item);
        }
    }
    return out;
}

/* passes() -> [(stop class, unwinder, walks that matched)] where nonzero. */
static PyObject *Verifier_passes(Verifier *self, PyObject *unused) { return class_counts(self, self->passes); }

/* invented() -> [(stop class, unwinder, walks that matched and stepped past the outermost frame to a caller)]. */
static PyObject *Verifier_invented(Verifier *self, PyObject *unused) { return class_counts(self, self->invented); }

/* methods() -> [(unwinder, method, frames given, frames right)] where given. */
static PyObject *Verifier_chain_methods(Verifier *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t u = 0; u < self->count; u++) {
        for (int m = 0; m < CHAIN_METHODS; m++) {
            const uint64_t *counts = self->methods + 2 * (u * CHAIN_METHODS + m);
            if (!counts[0]) continue;
            PyObject *item = Py_BuildValue("(niKK)", u, m, (unsigned long long)counts[0],
                                           (unsigned long long)counts[1]);
            if (!item || PyList_Append(out, item)) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
            Py_DECREF(item);
        }
    }
    return out;
}

/* release(): drop the providers, bound methods of the StopKernel that holds
 * this Verifier: a reference cycle, which the cycle collector alone would
 * free, every table of the run with it. After its run: a rule not made by
 * then is not asked for again. */
static PyObject *Verifier_release(Verifier *self, PyObject *unused) {
    sources_release(&self->sources);
    Py_RETURN_NONE;
}

/* add_sites(bytes: sorted uint32 return addresses) -> the table's number,
 * which a scan rule names in its `index`. */
static PyObject *Verifier_add_sites(Verifier *self, PyObject *table) {
    if (!PyBytes_Check(table) || PyBytes_GET_SIZE(table) % 4) {
        PyErr_SetString(PyExc_TypeError, "a site table is bytes of uint32");
        return NULL;
    }
    if (PyList_Append(self->site_tables, table)) return NULL;
    return PyLong_FromSsize_t(PyList_GET_SIZE(self->site_tables) - 1);
}

/* rule(unwinder, pc, innermost) -> (rule id, bytes or None): the rule the walks take for a frame at pc. */
static PyObject *Verifier_rule(Verifier *self, PyObject *args) {
    Py_ssize_t unwinder, id;
    long long pc;
    int innermost;
    if (!PyArg_ParseTuple(args, "nLp", &unwinder, &pc, &innermost)) return NULL;
    if (unwinder < 0 || unwinder >= self->count) {
        PyErr_Format(PyExc_IndexError, "no unwinder %zd", unwinder);
        return NULL;
    }
    PyObject *rule = sources_rule(&self->sources, unwinder, pc, innermost, &id);
    return rule ? Py_BuildValue("(nO)", id, rule) : NULL;
}

static PyObject *Verifier_set_map(Verifier *self, PyObject *args) {
    if (sources_set_map(&self->sources, args)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Verifier_set_chain(Verifier *self, PyObject *args) {
    if (sources_set_chain(&self->sources, args)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Verifier_set_epilogue(Verifier *self, PyObject *args) {
    if (sources_set_epilogue(&self->sources, args)) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Verifier_methods[] = {
    {"check", (PyCFunction)Verifier_check, METH_VARARGS, "Walk every unwinder at one stop."},
    {"passes", (PyCFunction)Verifier_passes, METH_NOARGS, "Matching walks per stop class and unwinder."},
    {"invented", (PyCFunction)Verifier_invented, METH_NOARGS,
     "Of the matching walks per stop class and unwinder, those that stepped past the outermost frame to a caller."},
    {"methods", (PyCFunction)Verifier_chain_methods, METH_NOARGS, "A chain's frames and right frames per method."},
    {"add_sites", (PyCFunction)Verifier_add_sites, METH_O, "Register a scan's return addresses."},
    {"release", (PyCFunction)Verifier_release, METH_NOARGS, "Drop the providers: the run is over."},
    {"rule", (PyCFunction)Verifier_rule, METH_VARARGS,
     "rule(unwinder, pc, innermost) -> (rule id, bytes or None): the rule for a frame at pc."},
    {"set_map", (PyCFunction)Verifier_set_map, METH_VARARGS,
     "set_map(unwinder, innermost, starts, rows, shift, numbers, book): rules by the rows of a table's partition."},
    {"set_chain", (PyCFunction)Verifier_set_chain, METH_VARARGS,
     "set_chain(unwinder, innermost, ((starts, rows, shift, unwinder, numbers), ...), book): a chain's rules."},
    {"set_epilogue", (PyCFunction)Verifier_set_epilogue, METH_VARARGS,
     "set_epilogue(unwinder, ((address, code), ...), plans, functions): the innermost frame's rules, but where an "
     "epilogue may start; plans: the book's rules of epilogues by their steps; functions: None or (their first "
     "pcs, an int64 array, and the end of the last)."},
    {NULL}
};

static PyObject *Verifier_get_memo(Verifier *self, void *unused) { return PyBool_FromLong(self->memo.enabled); }

static int Verifier_set_memo(Verifier *self, PyObject *value, void *unused) {
    const int on = value ? PyObject_IsTrue(value) : -1;
    if (on < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "memo cannot be deleted");
        return -1;
    }
    self->memo.enabled = on;
    return 0;
}

static PyObject *Verifier_get_past_bottom(Verifier *self, void *unused) { return PyBool_FromLong(self->past_bottom); }

static int Verifier_set_past_bottom(Verifier *self, PyObject *value, void *unused) {
    const int on = value ? PyObject_IsTrue(value) : -1;
    if (on < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "past_bottom cannot be deleted");
        return -1;
    }
    self->past_bottom = on;
    return 0;
}

static PyObject *Verifier_get_reused(Verifier *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->memo.reused);
}

static PyObject *Verifier_get_reused_whole(Verifier *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->memo.reused_whole);
}

static PyGetSetDef Verifier_getset[] = {
    {"outer_walks_reused", (getter)Verifier_get_reused, NULL,
     "Walks whose frames after the innermost one's were taken from the last stop's walk.", NULL},
    {"whole_walks_reused", (getter)Verifier_get_reused_whole, NULL,
     "Walks taken whole from the last stop's: nothing they depend on changed but the pc.", NULL},
    {"past_bottom", (getter)Verifier_get_past_bottom, (setter)Verifier_set_past_bottom,
     "The outermost frame has no caller (a process's threads): a walk that matched every frame steps past it, "
     "and `invented` counts those that gave a caller.", NULL},
    {"memo", (getter)Verifier_get_memo, (setter)Verifier_set_memo,
     "Take a walk's outer frames from the last stop's where they still hold (runs that stop at every instruction).",
     NULL},
    {NULL}
};

PyTypeObject VerifierType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "harness.verify._kernel.Verifier",
    .tp_basicsize = sizeof(Verifier),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Verifier_traverse,
    .tp_clear = (inquiry)Verifier_clear,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Verifier_init,
    .tp_dealloc = (destructor)Verifier_dealloc,
    .tp_methods = Verifier_methods,
    .tp_getset = Verifier_getset,
    .tp_doc = "Rule walks and shadow-stack comparison for every unwinder at one stop.",
};
