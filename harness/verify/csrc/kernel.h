/* The compiled verification kernel (the Python module harness._kernel),
 * shared declarations.
 *
 * rules.c  walks every unwinder's rules (harness/unwind/rule.py) over the stack and
 *          compares each caller frame with the shadow stack (Verifier).
 * trace.c  the per-instruction hook: the shadow stack, the stops an IT block
 *          skips, and a Verifier walk at every stop, calling into Python only
 *          where the rules do not answer (Tracer).
 * module.c the batch register reader (Registers) and the module itself.
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
    int64_t pc, base, sp, low;  /* pc and sp of the frame being unwound; GUARD_FAILS: base, stack low */
    int merged;            /* GUARD_FAILS of one kind whatever base, sp and low: one cause per function */
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

typedef struct Verifier Verifier;
extern PyTypeObject VerifierType;

Py_ssize_t verifier_unwinders(const Verifier *v);
/* One unwinder's walk from `innermost` against `expected` (outermost first,
 * `frames` of them) over a stack starting at `low`; -1 on a Python error. */
int verifier_walk(Verifier *v, Py_ssize_t unwinder, const KFrame *innermost, int64_t low, uint32_t cpsr,
                  const Expected *expected, Py_ssize_t frames, Answer *out);
int verifier_count_pass(Verifier *v, Py_ssize_t stop_class, Py_ssize_t unwinder);
/* A failing answer as a tuple in the field order of its record in
 * harness/verify/abi.py (FailingRule, Mismatch, GuardFailure); False for DEFER. */
PyObject *answer_object(const Answer *answer);

extern PyTypeObject TracerType;

#endif
