/* The tracer's own declarations (trace*.c), shared by its files and no
 * other: what it keeps of a run, and the functions one of its files calls
 * in another. Each file calls only into those listed before it:
 *
 * trace_pcs.c     what the tracer knows of each pc and translation block
 * trace_shadow.c  the shadow stack, its IT blocks, faults, signals, threads
 * trace_stop.c    one stop: classified, every unwinder walked, failing
 *                 answers logged and tallied, `slow` called; the samples
 * trace_hooks.c   the engine's hooks (before every instruction, or at every
 *                 block entry), the guards, and the run
 * trace_log.c     what the run's causes, tally and log come to, after it
 * trace.c         the Tracer type: its settings, its methods
 */
#ifndef HARNESS_TRACE_H
#define HARNESS_TRACE_H

#include "kernel.h"

#include <string.h>
#include <time.h>

typedef int (*RegReadBatch)(void *engine, int *ids, void **values, int count);
typedef int (*MemRead)(void *engine, uint64_t address, void *bytes, uint64_t size);
typedef int (*EmuStart)(void *engine, uint64_t begin, uint64_t until, uint64_t timeout, size_t count);
typedef int (*EmuStop)(void *engine);
typedef int (*HookAdd)(void *engine, size_t *hook, int type, void *callback, void *user_data,
                       uint64_t begin, uint64_t end, ...);
typedef int (*HookDel)(void *engine, size_t hook);
typedef int (*Ctl)(void *engine, int control, ...);

enum { IT_BLOCK = 4 };

typedef struct {
    void *handle;
    RegReadBatch reg_read_batch;
    MemRead mem_read;
    EmuStart emu_start;
    EmuStop emu_stop;
    HookAdd hook_add;
    HookDel hook_del;
    Ctl ctl;
    int hook_code;  /* the engine's "before every instruction" hook type */
    int hook_block;  /* its "before every translation block" hook type */
    int remove_cache;  /* ctl's control word: drop the code translated from [begin, end) */
    int ids[MAX_REGISTERS];  /* r0-r15, cpsr, then d8-d15 when the program uses VFP */
    int count;
} Engine;

/* What the tracer knows of the instruction at one pc, in one state. */
typedef struct {
    uint64_t key;        /* pc << 1 | Thumb */
    uint8_t used, call_length, it_length, returns;
    uint8_t may_store;   /* it may write memory, or trap to the system, which may (thumb_may_store) */
    uint16_t first;      /* its first half-word */
    uint8_t cond;        /* an ARM instruction's condition; 0xE (always) in Thumb, where IT decides */
} PcInfo;

typedef struct { uint32_t address; uint8_t state; } SkippedStop;

/* What a sampled run knows of one translation block: as entered at
 * `address` in one state (Thumb, the IT state), `size` bytes; its
 * instructions, and its last one (where calls and returns end blocks). */
typedef struct {
    uint32_t address, size;
    uint8_t used, thumb, it_state;
    uint32_t count;
    uint32_t last;          /* the last instruction's address */
    uint8_t call_length, returns, cond, last_size;  /* cond: as its IT state or ARM condition gives it */
} BlockInfo;

/* Fixed-size keys numbered in order of arrival (open addressing over their bytes). */
typedef struct {
    size_t key_size, count, capacity;
    uint8_t *keys;      /* by id */
    int64_t *slots;     /* id + 1, or 0: empty */
    size_t slot_count;
} Interned;

/* What a failing answer says apart from the stop: answers alike share a
 * cause (harness.verify.failures.FailureCause), which Python describes once. */
typedef struct {
    int64_t unwinder, kind, frame;
    int64_t detail;   /* MISMATCH: the register; else the rule id */
    int64_t culprit;  /* the where id of the wrong frame's pc; a GUARD_FAILS not merged: that pc */
    int64_t base, sp, low, high;  /* a GUARD_FAILS not merged */
} CauseKey;

/* The kind of the key of a merged GUARD_FAILS answer (Answer.merged): one
 * cause per rule and function, each answer's base, sp and low logged. A
 * FAILS answer is one cause per rule and function too, its pc logged. */
enum { MERGED_GUARD = ANSWER_GUARD_FAILS + 64 };

typedef struct { int64_t where, cause; } TallyKey;

/* An unwinder's last failing answer's cause and tally entry: consecutive
 * stops of a function mostly fail alike, and then skip both tables. */
typedef struct {
    int known;
    CauseKey key;
    int64_t where, cause, tallied;
} LastCause;

/* One failing answer. */
/* A MISMATCH's values (a core register's got is signed), a merged
 * GUARD_FAILS's (got: base, want: sp, low, high), a FAILS's (got: the frame's
 * pc), a CALLER_FAILS's (got: the caller's sp, want: the frame's). */
enum { NO_VALUES, CORE_VALUES, VFP_VALUES, GUARD_VALUES, FAILS_VALUES, CALLER_VALUES };

typedef struct {
    uint64_t number;
    uint32_t pc;
    int32_t unwinder, values;
    int64_t got;
    uint64_t want;
    int64_t low, high;  /* a merged GUARD_FAILS's stack ends */
    int64_t tallied;  /* its (where, cause) entry in the tally (tally_key) */
} Logged;

/* What the tracer follows of one thread: its shadow stack, outermost first,
 * with its frames' serials, and what is pending between its stops. */
typedef struct {
    int64_t tid;      /* -1: the process's first thread, before any switch names it */
    int spawned;      /* a thread the process made (its stops are IN_SPAWNED_THREAD) */
    uint32_t stack_top;  /* 0: the stack the Verifier was made over; else a thread's own, up to here */
    Expected *frames;
    uint64_t *serials;
    size_t depth, frames_capacity, serials_capacity;
    int call_pending, return_pending;
    uint32_t fall_through, return_fall_through;
    Expected pending_frame;
    uint64_t pending_serial;
    size_t flight;  /* the shadow depth at which an exception was raised (0: none in flight) */
    size_t signal_frames;  /* frames of the shadow stack that are SIGNAL_FRAMEs */
    /* instructions of the current IT block not reached yet */
    SkippedStop it_pending[IT_BLOCK];
    int it_count;
    uint32_t it_end;
    BlockInfo ended;  /* the block that ran last, if has_ended: its call or return counts at the next entry */
    int has_ended;
} ThreadShadow;

typedef struct {
    PyObject_HEAD
    Engine engine;
    Verifier *verifier;  /* NULL: ground truth only */
    uint32_t sentinel;
    int uses_vfp, observe_all;
    int compare_bottom;  /* 0: the bottom frame stands for "no caller" (a process's first), never compared */
    uint64_t every, shard_index, shard_count;
    PyObject *classify;  /* classify(pc, stop state, thread) -> (stop class, where id, low, high) */
    PyObject *slow;      /* slow(abi.SlowStop) */
    /* a timer: before the instruction at which `seen` reaches `deadline`,
     * expire() runs (it is true where the engine goes on elsewhere) */
    uint64_t deadline;
    PyObject *expire;
    /* registers of the current stop (`values`: one of two banks, the other
     * holding the previous stop's, at `last_pc`) */
    uint64_t *values;
    uint64_t banks[2][MAX_REGISTERS];
    void *pointers[2][MAX_REGISTERS];
    int bank;
    int complete[2];  /* does the bank hold every register, or (a block entry's) sp and cpsr alone? */
    int entry_ids[2];  /* the engine's ids of sp and cpsr */
    void *entry_pointers[2][2];
    uint64_t last_pc;
    ThreadShadow s;  /* the running thread's; the others' in `parked` */
    ThreadShadow *parked;
    size_t parked_count, parked_capacity;
    uint64_t serial;  /* the last frame's serial: one count for every thread's frames */
    /* a thread's stack, which is not the one the Verifier was made over: [sp, top) copied at each verified stop */
    uint8_t *window;
    size_t window_capacity;
    int window_missing;  /* this stop's thread window could not be copied: its walks are Python's */
    /* frames that resumed (returned to), a bit per serial: recorded here; and
     * given from an earlier run of the same program, whose frames that never
     * resume are not compared on registers (groundtruth.ShadowStack) */
    uint8_t *resumed;
    size_t resumed_capacity;
    /* without `resumes`: the frames whose registers a walk found wrong, a
     * bit per serial (a frame that never resumes would not be compared) */
    uint8_t *questioned;
    size_t questioned_capacity;
    Py_buffer resumes;
    int has_resumes;
    /* the entry points that raise an exception, sorted */
    uint32_t *raises;
    size_t raise_count;
    /* with observe_all: the pcs slow is called at (sorted; none: every pc) */
    uint32_t *observed;
    size_t observed_count;
    /* pcs [quiet[2i], quiet[2i + 1]) of modules that are not the program's
     * own: a no_info refusal there is a stop, tallied but not logged */
    uint32_t *quiet;
    size_t quiet_count;
    /* pc -> PcInfo, open addressing */
    PcInfo *table;
    size_t table_size, table_used;
    /* pcs [low, high) of one (function, traits, position): id = stop class << 32 | where id;
     * one set for each stop state (STOP_STATES bits) */
    Ranges classes[STOP_STATE_COUNT];
    /* failing answers */
    Logged *log;
    size_t logged, log_capacity;
    Interned causes, tally;
    Answer *cause_answers;  /* the first answer of each cause */
    LastCause *last_causes;  /* per unwinder */
    size_t cause_answers_capacity;
    uint64_t *tally_counts;  /* stops per tally key */
    size_t tally_counts_capacity;
    /* guards (harness.verify.abi.Limits) */
    uint64_t budget, max_depth, max_memory;
    double max_seconds;
    size_t log_cap;
    struct timespec started;
    int guard;          /* GUARD_*: what stopped the run */
    uint32_t guard_pc;
    uint64_t instructions, seen, stops;
    /* with every > 1: the stop number of the next sample, the samples so
     * far, the strides' generator (splitmix64); with by_blocks, hooks at
     * block entries instead of before every instruction */
    uint64_t next_sample, samples, rng;
    int by_blocks;
    BlockInfo *blocks;
    size_t blocks_size, blocks_used;
    int resuming;            /* the next entry is the block a split stopped before: its entry is done */
    int split_requested;     /* stopped before a block to run up to split_until first */
    uint32_t split_until, split_low, split_high;
    int ran, halted;
    int dirty;  /* an instruction run since the last verified stop may have written memory (memo.c) */
    PyObject *error_type, *error_value, *error_traceback;  /* raised in a callback */
} Tracer;

/* Room for `needed` items of `item` bytes in *array, of *capacity items. */
static inline int reserve(void *array, size_t *capacity, size_t needed, size_t item) {
    void **items = array;
    if (needed <= *capacity) return 0;
    size_t grown = *capacity ? *capacity : 64;
    while (grown < needed) grown *= 2;
    void *moved = PyMem_Realloc(*items, grown * item);
    if (!moved) { PyErr_NoMemory(); return -1; }
    *items = moved;
    *capacity = grown;
    return 0;
}

/* harness.thumb.encoding.instruction_size */
static inline int instruction_size(uint16_t first) {
    unsigned top = first >> 11;
    return top == 0x1D || top == 0x1E || top == 0x1F ? 4 : 2;
}

/* The index of the first of `count` sorted values above or at pc. */
static inline size_t lower_bound(const uint32_t *values, size_t count, uint32_t pc) {
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = (low + high) / 2;
        if (values[middle] < pc) low = middle + 1; else high = middle;
    }
    return low;
}

static inline int sorted_holds(const uint32_t *values, size_t count, uint32_t pc) {
    size_t at = lower_bound(values, count, pc);
    return at < count && values[at] == pc;
}

/* ShadowStack.state: the stop's STOP_STATES bits. */
static inline int stop_state(const Tracer *t) {
    return (t->s.flight ? IN_FLIGHT : 0) | (t->s.depth && (t->s.frames[t->s.depth - 1].state & SIGNAL_FRAME) ? IN_HANDLER : 0)
         | (t->s.signal_frames ? ABOVE_SIGNAL_FRAME : 0) | (t->s.spawned ? IN_SPAWNED_THREAD : 0);
}

static inline int read_failed(Tracer *t, int status, uint64_t address) {
    PyErr_Format(PyExc_OSError, "batch register read failed with status %d at pc %#llx", status,
                 (unsigned long long)address);
    return -1;
}

/* The bank the previous stop's registers are not in, read nothing yet. */
static inline void next_bank(Tracer *t) {
    t->bank ^= 1;
    t->values = t->banks[t->bank];
    t->complete[t->bank] = 0;
}

/* Every register of the current stop, read where only sp and cpsr were. */
static inline int complete_registers(Tracer *t, uint64_t address) {
    if (t->complete[t->bank]) return 0;
    t->complete[t->bank] = 1;
    int status = t->engine.reg_read_batch(t->engine.handle, t->engine.ids, t->pointers[t->bank], t->engine.count);
    return status ? read_failed(t, status, address) : 0;
}

#pragma GCC visibility push(hidden)  /* called across the tracer's files, from nowhere else */

/* trace_pcs.c */
PcInfo *decoded(Tracer *t, uint32_t pc, int thumb);
const BlockInfo *block_of(Tracer *t, uint32_t address, uint32_t size, uint32_t cpsr);
int outside_it_from(Tracer *t, const BlockInfo *b, uint64_t from, uint64_t *at);
int instruction_at(Tracer *t, const BlockInfo *b, uint64_t index, uint32_t *out);
int index_in_block(Tracer *t, const BlockInfo *b, uint32_t pc, uint64_t *index);

/* trace_shadow.c */
void frame_of(Expected *e, uint32_t pc, const uint64_t *v, int uses_vfp);
int set_bit(uint8_t **bits, size_t *capacity, uint64_t serial);
int push_bottom(Tracer *t);
int observe(Tracer *t, uint32_t pc, uint32_t sp);
int it_position(const Tracer *t, uint32_t pc, int *skipped);
int passed_over(Tracer *t, uint32_t pc, SkippedStop *skipped);
int entered(Tracer *t, uint32_t pc, uint16_t it_instruction, int block);
int enter_block(Tracer *t, uint32_t pc, uint32_t cpsr);
PyObject *Tracer_interrupted(Tracer *self, PyObject *args);
PyObject *Tracer_faulted(Tracer *self, PyObject *args);
PyObject *Tracer_switch(Tracer *self, PyObject *args);

/* trace_stop.c */
extern PyObject *SlowStopType;  /* harness.abi.SlowStop, what `slow` is called with (set as the module loads) */
uint64_t next_stride(Tracer *t);
int take_sample(Tracer *t, uint32_t pc, uint32_t cpsr);
int check(Tracer *t, uint32_t pc, uint32_t cpsr);

/* trace_hooks.c */
PyObject *run_engine(Tracer *self, uint64_t begin, uint64_t until);

/* trace_log.c */
PyObject *Tracer_causes(Tracer *self, PyObject *args);
PyObject *Tracer_tally(Tracer *self, PyObject *unused);
PyObject *Tracer_failure_log(Tracer *self, PyObject *args);
PyObject *Tracer_log_split(Tracer *self, PyObject *args);
PyObject *Tracer_logged_pcs(Tracer *self, PyObject *args);

#pragma GCC visibility pop

#endif
