/* The compiled verification kernel (the Python module harness._kernel),
 * shared declarations. Each file calls only into those listed before it:
 *
 * ranges.c   sorted ranges of pcs, each with a value and an id.
 * memo.c     the outer part of each walk, kept from one stop to the next.
 * epilogue.c the plans of the epilogues compilers write, and their rules (v2+epilogue).
 * sources.c  where each unwinder's rule at a pc comes from: its table's rows, or Python.
 * rules.c    walks every unwinder's rules (harness/unwind/rule.py) over the stack and
 *            compares each caller frame with the shadow stack (Verifier).
 * trace*.c   the per-instruction hook: the shadow stack, the stops an IT block
 *            skips, and a Verifier walk at every stop, calling into Python only
 *            where the rules do not answer (Tracer; trace.h says which file holds what).
 * module.c   the module itself.
 *
 * Python's definitions stay the reference: harness.verify.groundtruth for the
 * shadow stack, each unwinder's `step` for its walk. Registers are int64 so
 * that sums past 32 bits compare exactly as Python ints do.
 */
#ifndef HARNESS_KERNEL_H
#define HARNESS_KERNEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "abi.h"  /* generated from harness/verify/abi.py: structs, flags, slots, answer kinds */

enum { SP = 13, LR = 14, PC = 15 };

/* The registers of the frame being unwound. */
typedef struct {
    int64_t r[16];
    uint64_t d[8];      /* d8-d15 */
    unsigned d_known;   /* bit i: d(8+i) is known */
} KFrame;

/* What one unwinder's walk at one stop came to (kinds: ANSWER_*). */
typedef struct {
    int kind;
    int reg;               /* MISMATCH: 15 pc, 13 sp, 4-11, 264-271 for d8-d15 */
    Py_ssize_t frame;      /* the frame whose unwind went wrong */
    Py_ssize_t rule_id;    /* FAILS, GUARD_FAILS */
    int32_t rule_flags;    /* FAILS, GUARD_FAILS: the rule's (abi.FLAGS) */
    int64_t got;           /* MISMATCH */
    uint64_t want;
    int64_t pc, base, sp, low, high;  /* pc and sp of the frame being unwound; GUARD_FAILS: base, the stack's ends */
    int merged;            /* GUARD_FAILS of one kind whatever base, sp and low: one cause per function */
    int invents;           /* PASS, where the Verifier measures past_bottom: the step past the outermost
                            * frame gave a caller (a frame that is not there) */
} Answer;

/* Sorted, disjoint [low, high) ranges of pcs, each with a value (a new
 * reference, or NULL) and an id; `last` is the one found last. */
typedef struct { int64_t low, high; PyObject *value; Py_ssize_t id; } Range;
typedef struct { Range *items; Py_ssize_t count, capacity, last; } Ranges;
/* The range holding pc, or NULL and in *slot where one would go. */
const Range *ranges_find(Ranges *set, int64_t pc, Py_ssize_t *slot);
/* Insert `range` at `slot`, clipped to the gap between its neighbours; -1 with MemoryError. */
int ranges_insert(Ranges *set, Py_ssize_t slot, Range range);
void ranges_clear(Ranges *set);

#define EPILOGUE_LIMIT 16  /* harness.thumb.epilogue.LIMIT: instructions scanned for a return */
/* One step of an epilogue's plan (epilogue.c), as harness.thumb.epilogue's Step: what it does to the frame. */
enum { STEP_RELEASE = 1, STEP_RELEASE_REG, STEP_RELEASE_FP, STEP_RESTORE, STEP_RESTORE_VFP, STEP_RETURN_TO_LR,
       STEP_BRANCH_REG, STEP_BRANCH };
typedef struct {
    int32_t kind;   /* STEP_* */
    int32_t a, b;   /* RELEASE: amount; RELEASE_REG: reg; RELEASE_FP: frame pointer, below; RESTORE_VFP: first, count */
    uint32_t regs;  /* RESTORE: bit = core register; BRANCH: its target */
} PlanStep;
/* The functions a tail call leaves (EpilogueSimulator.functions): sorted first pcs, and the end of the last. */
typedef struct { const int64_t *starts; Py_ssize_t count; int64_t end; } FunctionStarts;
/* `functions`, None or (an int64 array ("q") of first pcs, the end of the last), as
 * EpilogueSimulator.functions: 1 with *out reading `view` (released by the caller), 0 for None, -1 with
 * an exception. */
int functions_of(PyObject *functions, Py_buffer *view, FunctionStarts *out);
#define PLAN_DECLINES (-2)  /* epilogue_plan: a branch within the function, which the simulation declines */
/* The plan of the epilogue at `address` (`code`, bytes of it readable), at most EPILOGUE_LIMIT steps into `steps`:
 * their count; PLAN_DECLINES; or -1 where Python must plan (an instruction epilogue.c does not know, a branch
 * where `functions` is NULL, no return within reach). */
int epilogue_plan(const uint8_t *code, int64_t bytes, int64_t address, const FunctionStarts *functions,
                  PlanStep *steps);
/* The rule of a plan's `count` steps, packed (harness.unwind.v2_epilogue.rule_of, then kernel.pack_rule),
 * or Py_None where there is none (a new reference; NULL with MemoryError). */
PyObject *epilogue_packed_rule(const PlanStep *steps, int count);
/* (the plan as a tuple of tuples equal to Python's Step NamedTuples, its rule packed), False where it
 * declines, or None where Python must plan (a new reference). */
PyObject *epilogue_plan_object(const uint8_t *code, Py_ssize_t bytes, int64_t address,
                               const FunctionStarts *functions);

/* Where each unwinder's rules come from (sources.c): per (unwinder,
 * innermost), its table's partition, a chain's, an epilogue scan, or
 * Python's `provide` for each range. */
typedef struct Source Source;
typedef struct Partition Partition;
typedef struct {
    Source *items;          /* [2 * unwinder + innermost] */
    Py_ssize_t count;
    PyObject *provide;      /* provide(unwinder, pc, innermost) -> (rule id, bytes or None, low, high) */
    PyObject *provide_book; /* provide_book(number) -> (number, bytes or None): a rule of the book made */
    PyObject *provide_plan; /* provide_plan(unwinder, pc) -> (rule id, bytes or None); id -2: no epilogue */
} Sources;
int sources_init(Sources *s, Py_ssize_t unwinders, PyObject *provide, PyObject *provide_book, PyObject *provide_plan);
void sources_free(Sources *s);
/* Drop the Python providers (a rule asked for after is a RuntimeError). */
void sources_release(Sources *s);
/* The rule (borrowed bytes, or Py_None to defer) for a frame at pc, its id in
 * *id; NULL on a Python error. */
PyObject *sources_rule(Sources *s, Py_ssize_t unwinder, int64_t pc, int innermost, Py_ssize_t *id);
/* An epilogue source's innermost rule where no epilogue is simulated at pc
 * (its tables'); Py_None for any other source; NULL on a Python error. */
PyObject *sources_fallback_rule(Sources *s, Py_ssize_t unwinder, int64_t pc, Py_ssize_t *id);
int sources_set_map(Sources *s, PyObject *args);
int sources_set_chain(Sources *s, PyObject *args);
int sources_set_epilogue(Sources *s, PyObject *args);
/* A new tuple of `type` (NULL: a plain tuple) of the `n` items, which it takes; NULL, the items
 * released, where one is NULL (its making failed) or the tuple cannot be made. */
static inline PyObject *tuple_taking(PyTypeObject *type, Py_ssize_t n, PyObject *const *items) {
    int made = 1;
    for (Py_ssize_t i = 0; i < n; i++) made = made && items[i];
    PyObject *tuple = !made ? NULL : type ? type->tp_alloc(type, n) : PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (tuple) PyTuple_SET_ITEM(tuple, i, items[i]);
        else Py_XDECREF(items[i]);
    }
    return tuple;
}
/* (a, b, c), three ints: a new reference, untracked (ints make no cycle), or NULL; a run makes
 * hundreds (its tally, its passes), and Py_BuildValue parsed its format for each. */
static inline PyObject *int_triple(long long a, long long b, unsigned long long c) {
    PyObject *triple = tuple_taking(NULL, 3, (PyObject *[]){ PyLong_FromLongLong(a), PyLong_FromLongLong(b),
                                                             PyLong_FromUnsignedLongLong(c) });
    if (triple) PyObject_GC_UnTrack(triple);
    return triple;
}

/* Whether the Thumb instruction of these half-words may write memory or
 * trap to the system: 0 only where it surely does not (trace_pcs.c). */
int thumb_may_store(uint16_t first, uint16_t second);
/* harness.thumb.encoding.may_start_epilogue over the n bytes at `code`. */
int may_start_epilogue(const uint8_t *code, Py_ssize_t n);

/* The stack bytes a walk read: at most TRACK_SPANS spans [low, high). A
 * read next to or over a span widens it; one that meets none, with every
 * span taken, widens the nearest: spans may hold bytes never read, and never
 * miss one that was. */
#define TRACK_SPANS 8
typedef struct { int64_t low, high; } Span;
/* `pc_read`: the walk's answer may change with the innermost frame's pc
 * alone (its caller keeps the frame's pc, or check_caller found the caller
 * at the frame's pc and sp); `differs_from`: check_caller found the caller
 * at the frame's sp (it keeps its sp) and at this pc, not the frame's: the
 * answer holds at any other pc but this (-1: no such check).
 * `flags_read`: it chose its rule by the condition flags.
 * `regs`: the registers the steps took an address or a pc from
 * (a rule's base and index, lr; bit = register). `lowest`: the lowest address
 * they compared with the stack's low end (the innermost frame's sp). */
typedef struct {
    Span spans[TRACK_SPANS];
    int count, pc_read, flags_read;
    uint32_t regs;
    int64_t lowest, differs_from;
} Track;

/* Reset a walk's Track: no span read, nothing compared. */
static inline void track_reset(Track *t) {
    t->differs_from = -1;
    t->count = t->pc_read = t->flags_read = 0;
    t->regs = 0;
    t->lowest = INT64_MAX;
}

/* The IT state's bits of cpsr (ITSTATE[1:0] at 26:25, ITSTATE[7:2] at 15:10). */
#define CPSR_IT_BITS 0x0600FC00u

/* harness.thumb.encoding.it_state */
static inline int it_state(uint32_t cpsr) { return ((cpsr >> 8) & 0xFC) | ((cpsr >> 25) & 0x3); }

/* harness.thumb.encoding.condition_holds */
static inline int condition_holds(unsigned cond, uint32_t cpsr) {
    const int n = cpsr >> 31 & 1, z = cpsr >> 30 & 1, c = cpsr >> 29 & 1, v = cpsr >> 28 & 1;
    int base;
    switch (cond >> 1) {
    case 0: base = z; break;
    case 1: base = c; break;
    case 2: base = n; break;
    case 3: base = v; break;
    case 4: base = c && !z; break;
    case 5: base = n == v; break;
    case 6: base = !z && n == v; break;
    default: return 1;
    }
    return (cond & 1) ? !base : base;
}

static inline void track_read(Track *t, int64_t low, int64_t high) {
    for (int i = t->count - 1; i >= 0; i--) {  /* a walk reads up the stack: mostly the last span grows */
        Span *s = &t->spans[i];
        if (low <= s->high && high >= s->low) {
            if (low < s->low) s->low = low;
            if (high > s->high) s->high = high;
            return;
        }
    }
    if (t->count < TRACK_SPANS) {
        t->spans[t->count++] = (Span){ low, high };
        return;
    }
    int nearest = 0;
    int64_t gap = INT64_MAX;
    for (int i = 0; i < TRACK_SPANS; i++) {
        const int64_t d = low >= t->spans[i].high ? low - t->spans[i].high : t->spans[i].low - high;
        if (d < gap) { gap = d; nearest = i; }
    }
    if (low < t->spans[nearest].low) t->spans[nearest].low = low;
    if (high > t->spans[nearest].high) t->spans[nearest].high = high;
}

/* A chain's frames and right frames per method (n[2 * method], n[2 * method
 * + 1]) over some frames of a walk; `any`: whether n holds any (and is set:
 * an unwinder that is no chain never touches n). */
typedef struct { int any; uint64_t n[2 * CHAIN_METHODS]; } MethodCounts;

static inline void counts_begin(MethodCounts *c) {
    if (!c->any) { memset(c->n, 0, sizeof c->n); c->any = 1; }
}

static inline void count_method(MethodCounts *c, int method, int right) {
    counts_begin(c);
    c->n[2 * method]++;
    if (right) c->n[2 * method + 1]++;
}

static inline void counts_add(MethodCounts *to, const MethodCounts *from) {
    if (!from->any) return;
    counts_begin(to);
    for (int i = 0; i < 2 * CHAIN_METHODS; i++) to->n[i] += from->n[i];
}

/* Stack bytes a walk read, and what they held. */
typedef struct {
    Track reads;
    uint8_t *bytes;      /* span after span */
    size_t capacity;
} Snapshot;

/* Part of a walk made at an earlier stop (memo.c): its steps from a frame
 * on, which compared the shadow frames expected[0, level). */
typedef struct {
    int valid, in_it;
    uint64_t held_at;    /* the memo's epoch when its bytes were last seen to hold */
    Py_ssize_t level, from;  /* `from`: the frame it stepped first in its walk (answer.frame counts from 0) */
    KFrame start;        /* that frame */
    uint32_t inputs;     /* the registers of `start` it depends on (bit = register) */
    int64_t low, lowest; /* the stack's low end, and the lowest address compared with it (Track) */
    Snapshot read;       /* the bytes it read */
    Answer answer;
    MethodCounts counted;  /* a chain's */
} KeptPart;

/* The registers r0-r12 (bit = register) a rule's step reads, and those it passes to the caller unchanged. */
typedef struct {
    uint32_t reads, passes;
} RegisterUse;

/* A whole walk made at an earlier stop: the innermost frame's rule,
 * registers but pc (it holds at any pc but `differs_from`), IT state,
 * what its step read, and whether its outer part is the one kept at level
 * frames - 1 (it holds while no shadow frame changed: memo_begin). */
typedef struct {
    int valid, needs_outer;
    uint64_t held_at;    /* as a part's */
    PyObject *rule;      /* borrowed: a Verifier keeps every rule it was given */
    RegisterUse use;     /* the rule's (memo.c: register_use) */
    uint32_t inputs;     /* the registers r0-r12 of the innermost frame the walk depends on */
    KFrame innermost;
    int it;
    int64_t differs_from;  /* the pc at which check_caller would judge otherwise (Track), or -1 */
    Snapshot first;      /* the bytes the innermost step read */
    Answer answer;
    MethodCounts counted;
} KeptWhole;

/* Parts of walks kept per level, the last made at each of MEMO_LEVELS
 * levels (a ring: deeper recursion keeps the innermost levels). */
#define MEMO_LEVELS 32
typedef struct {
    KeptWhole whole;
    KeptPart *parts;     /* MEMO_LEVELS of them, made at the first part kept */
} UnwinderMemo;

/* The kept walks of every unwinder, and the shadow frames of the last stop. */
typedef struct {
    int enabled;           /* Verifier.memo */
    int active;            /* between memo_begin and memo_end */
    UnwinderMemo *walks;
    Py_ssize_t count;
    Expected *expected;
    Py_ssize_t frames;
    size_t expected_capacity;
    uint64_t epoch;        /* counts the stops after which memory may have changed */
    uint64_t reused;       /* walks whose outer frames were taken from an earlier stop */
    uint64_t reused_whole; /* walks taken whole from the last stop */
} WalkMemo;

int memo_init(WalkMemo *m, Py_ssize_t unwinders);
void memo_free(WalkMemo *m);
/* A stop begins: drop the parts whose shadow frames changed; `dirty`: memory may have changed since the last. */
void memo_begin(WalkMemo *m, const Expected *expected, Py_ssize_t frames, int dirty);
/* The kept part of a walk from frame `start`, comparing expected[0, level), that holds now, or NULL. */
const KeptPart *memo_find(WalkMemo *m, Py_ssize_t unwinder, Py_ssize_t level, const KFrame *start, int in_it,
                          int64_t low, const uint8_t *memory, int64_t base);
/* Keep the part of a walk from frame `from` (`start`) comparing expected[0, level) (`inputs`: the
 * registers of start it read or compared); it read `track`. */
void memo_keep(WalkMemo *m, Py_ssize_t unwinder, Py_ssize_t level, Py_ssize_t from, const KFrame *start,
               uint32_t inputs, int in_it, int64_t low, const Track *track, const Answer *answer,
               const MethodCounts *counted, const uint8_t *memory, int64_t base);
/* The whole walk kept for an innermost frame with this rule, registers (its
 * pc aside) and IT state, or NULL. */
const KeptWhole *memo_find_whole(WalkMemo *m, Py_ssize_t unwinder, PyObject *rule, const KFrame *innermost,
                                 int it, Py_ssize_t frames, const uint8_t *memory, int64_t base);
/* Keep the whole walk (`first`: the innermost step's reads): its outer part,
 * if it has one (`needs_outer`), is the one kept at level frames - 1;
 * `callers_read`: the caller's registers the walk after its first step
 * reads or compares. */
void memo_keep_whole(WalkMemo *m, Py_ssize_t unwinder, PyObject *rule, const KFrame *innermost, int it,
                     Py_ssize_t frames, const Track *first, int needs_outer, uint32_t callers_read,
                     const Answer *answer, const MethodCounts *counted, const uint8_t *memory, int64_t base);
/* The stop ends. */
void memo_end(WalkMemo *m);

typedef struct Verifier Verifier;
extern PyTypeObject VerifierType;

Py_ssize_t verifier_unwinders(const Verifier *v);
/* One unwinder's walk from `innermost` against `expected` (outermost first,
 * `frames` of them) over a stack starting at `low`; -1 on a Python error. */
int verifier_walk(Verifier *v, Py_ssize_t unwinder, const KFrame *innermost, int64_t low, uint32_t cpsr,
                  const Expected *expected, Py_ssize_t frames, Answer *out);
/* A walk that matched every frame, counted for its stop class (and where it invents a caller past the
 * outermost frame, as such). */
int verifier_count_pass(Verifier *v, Py_ssize_t stop_class, Py_ssize_t unwinder, const Answer *answer);
/* Around the walks of one stop of a run that stops at every instruction:
 * the walks may take their outer frames from the last stop's (memo.c);
 * `dirty`: an instruction since the last stop may have written memory. */
void verifier_begin_stop(Verifier *v, const Expected *expected, Py_ssize_t frames, int dirty);
/* The stack walks read from now on: [base, high) at `bytes` (a thread's own
 * stack), or with bytes NULL the process's stack the Verifier was made over. */
void verifier_window(Verifier *v, const uint8_t *bytes, int64_t base, int64_t high);
void verifier_end_stop(Verifier *v);
/* A failing answer as a tuple in the field order of its record in
 * harness/verify/abi.py (FailingRule, Mismatch, GuardFailure); False for DEFER. */
PyObject *answer_object(const Answer *answer);

extern PyTypeObject TracerType;

#endif
