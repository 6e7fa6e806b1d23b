/* Tracer: the per-instruction hook of a verified run, in C.
 *
 * Before every instruction it does what harness.verify.stops' Python hook does:
 * follow the shadow stack (harness.verify.groundtruth: ShadowStack and
 * SkippedStops, the definitions this mirrors), and at every verified stop let
 * the Verifier walk each unwinder. It calls into Python only where C cannot
 * answer: to classify a pc met for the first time, for a rule not made yet
 * (through the Verifier), and, at a stop where a walk defers or everything is
 * observed, `slow`. Failing answers are grouped by cause and tallied here;
 * Python describes each cause once, after the run.
 *
 * It runs the engine itself (run() calls the emulator's start function with
 * the hook installed, holding the GIL throughout), through function addresses
 * the emulator module hands over; it knows no engine beyond their signatures.
 *
 * Guards end a runaway run (harness.verify.abi.Limits, GUARD_*), as the Python
 * hook's do: more instructions than the budget; a stop at the pc of the stop
 * before with every register read unchanged (an endless loop); more shadow
 * frames than the limit; and, every CHECK_EVERY instructions, the wall clock
 * and the process's resident size. At most log_cap failing answers are
 * logged one by one; every one is tallied.
 */
#include "kernel.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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

#define MAX_THREAD_WINDOW (256u << 20)  /* bytes of a thread's stack copied for a stop: more is not a stack */

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
    PyObject *slow;      /* slow(number, pc, regs, cpsr, vfp, deferred, shadow, serials, stop state, thread) */
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
static int reserve(void *array, size_t *capacity, size_t needed, size_t item) {
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

/* FNV-1a over a key's 64-bit words (keys are arrays of int64), then mixed. */
static size_t hash_key(const uint8_t *key, size_t size) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i + 8 <= size; i += 8) {
        uint64_t word;
        memcpy(&word, key + i, 8);
        h = (h ^ word) * 1099511628211ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h ^ h >> 32);
}

/* The id of `key` (key_size bytes, padding zeroed), numbered on first
 * sight (then *added is set); -1 with MemoryError. */
static int64_t intern(Interned *t, const void *key, int *added) {
    *added = 0;
    if (2 * (t->count + 1) > t->slot_count) {
        size_t slot_count = t->slot_count ? 2 * t->slot_count : 1024;
        int64_t *slots = PyMem_Calloc(slot_count, sizeof(int64_t));
        if (!slots) { PyErr_NoMemory(); return -1; }
        for (size_t id = 0; id < t->count; id++) {
            size_t j = hash_key(t->keys + id * t->key_size, t->key_size) & (slot_count - 1);
            while (slots[j]) j = (j + 1) & (slot_count - 1);
            slots[j] = (int64_t)id + 1;
        }
        PyMem_Free(t->slots);
        t->slots = slots;
        t->slot_count = slot_count;
    }
    size_t mask = t->slot_count - 1, j = hash_key(key, t->key_size) & mask;
    for (; t->slots[j]; j = (j + 1) & mask) {
        int64_t id = t->slots[j] - 1;
        if (!memcmp(t->keys + id * t->key_size, key, t->key_size)) return id;
    }
    if (reserve(&t->keys, &t->capacity, t->count + 1, t->key_size)) return -1;
    memcpy(t->keys + t->count * t->key_size, key, t->key_size);
    t->slots[j] = (int64_t)t->count + 1;
    *added = 1;
    return (int64_t)t->count++;
}

/* ------------------------------------------------------------ pcs */

/* harness.thumb.encoding.arm_call_length and arm_return_kind, for ARM state. */
static void decode_arm(PcInfo *info, uint32_t word) {
    const uint32_t cond = word >> 28;
    info->cond = (uint8_t)cond;
    info->call_length = (cond != 0xF && (word & 0x0F000000) == 0x0B000000)     /* BL */
                     || (word & 0xFE000000) == 0xFA000000                      /* BLX (immediate) */
                     || (cond != 0xF && (word & 0x0FFFFFF0) == 0x012FFF30)     /* BLX (register) */
                     ? 4 : 0;
    const uint32_t w = word & 0x0FFFFFFF;
    info->returns = cond != 0xF && (w == 0x012FFF1E || w == 0x01A0F00E || w == 0x049DF004
                                    || (word & 0x0FFF8000) == 0x08BD8000);
}

/* The decoded instruction at pc in the state `thumb` says: harness.thumb.encoding's
 * call_length, it_block_length and return_kind (or their ARM twins);
 * memory the engine cannot read counts as zeros. */
/* Whether a 32-bit Thumb instruction may write memory or trap: 0 only for
 * the classes of the ARM ARM's Thumb-2 tables that surely do not. */
static int thumb32_may_store(uint16_t first, uint16_t second) {
    if ((first & 0xFE40) == 0xE800) return !(first & 0x10);  /* stm, push.w, srs; ldm, pop.w, rfe */
    if ((first & 0xFE40) == 0xE840) return !(first & 0x10);  /* strex*, strd; ldrex*, ldrd, tbb, tbh */
    if ((first & 0xFE00) == 0xEA00) return 0;                /* data processing (shifted register) */
    if ((first & 0xF800) == 0xF000)                          /* data processing (immediate), branches, */
        return (first & 0xFFE0) == 0xF7E0 && (second & 0xD000) == 0x8000;  /* hints; but hvc, smc, udf.w trap */
    if ((first & 0xFE00) == 0xF800) return !(first & 0x10);  /* str, strb, strh, simd element stores; loads, pld */
    if ((first & 0xFE00) == 0xFA00) return 0;                /* data processing (register), multiply, divide */
    if ((first & 0xEE00) == 0xEC00) return !(first & 0x10);  /* stc, vstr, vstm, vpush, mcrr; their loads */
    if ((first & 0xEE00) == 0xEE00) return 0;                /* cdp, mcr, mrc, vfp and simd data processing */
    return 1;
}

/* Whether a Thumb instruction may write memory, or trap to the system (a
 * system call's answer writes memory too): 0 only where it surely does
 * not, so that a kept walk's bytes need no comparing after it (memo.c). */
int thumb_may_store(uint16_t first, uint16_t second) {
    if (first >= 0xE800) return thumb32_may_store(first, second);
    if (first < 0x5000) return 0;                     /* shift, add, sub, mov, cmp, data processing, bx, ldr literal */
    if (first < 0x5600) return 1;                     /* str, strh, strb (register) */
    if (first < 0x6000) return 0;                     /* ldrsb, ldr, ldrh, ldrb, ldrsh (register) */
    if (first < 0xA000) return !(first & 0x0800);     /* str, strb, strh, str sp-relative (immediate); their loads */
    if (first < 0xB000) return 0;                     /* adr, add sp */
    if (first < 0xC000) return (first & 0xFE00) == 0xB400 || (first & 0xFF00) == 0xBE00;  /* push; bkpt traps */
    if (first < 0xD000) return !(first & 0x0800);     /* stm; ldm */
    if (first < 0xE000) return (first & 0x0F00) >= 0x0E00;  /* b<cond>; udf and svc trap */
    return 0;                                         /* b */
}

static PcInfo *decoded(Tracer *t, uint32_t pc, int thumb) {
    if (2 * (t->table_used + 1) > t->table_size) {
        size_t size = t->table_size ? 2 * t->table_size : 4096;
        PcInfo *table = PyMem_Calloc(size, sizeof(PcInfo));
        if (!table) { PyErr_NoMemory(); return NULL; }
        for (size_t i = 0; i < t->table_size; i++) {
            if (!t->table[i].used) continue;
            size_t j = (size_t)(t->table[i].key * 2654435761u) & (size - 1);
            while (table[j].used) j = (j + 1) & (size - 1);
            table[j] = t->table[i];
        }
        PyMem_Free(t->table);
        t->table = table;
        t->table_size = size;
    }
    const uint64_t key = (uint64_t)pc << 1 | (thumb != 0);
    size_t mask = t->table_size - 1, i = (size_t)(key * 2654435761u) & mask;
    for (; t->table[i].used; i = (i + 1) & mask) {
        if (t->table[i].key == key) return &t->table[i];
    }
    PcInfo *info = &t->table[i];
    t->table_used++;
    uint8_t code[4] = {0};
    if (t->engine.mem_read(t->engine.handle, pc, code, 4)) t->engine.mem_read(t->engine.handle, pc, code, 2);
    uint16_t first = code[0] | code[1] << 8, second = code[2] | code[3] << 8;
    unsigned mask_bits = first & 0xF;
    if (!thumb) {  /* an ARM instruction may store, for all the memo knows */
        *info = (PcInfo){ .key = key, .used = 1, .first = first, .may_store = 1 };
        decode_arm(info, (uint32_t)first | (uint32_t)second << 16);
        return info;
    }
    *info = (PcInfo){
        .key = key, .used = 1, .first = first, .cond = 0xE,
        .call_length = (first & 0xFF87) == 0x4780 ? 2
                     : (first & 0xF800) == 0xF000 && ((second & 0xD000) == 0xD000 || (second & 0xD001) == 0xC000) ? 4
                     : 0,
        .it_length = (first & 0xFF00) == 0xBF00 && mask_bits ? 4 - __builtin_ctz(mask_bits) : 0,
        .returns = first == 0x4770 || first == 0x46F7 || (first & 0xFF00) == 0xBD00
                || (first == 0xE8BD && (second & 0x8000)) || (first == 0xF85D && second == 0xFB04),
        .may_store = (uint8_t)thumb_may_store(first, second),
    };
    return info;
}

/* The stop class and where id of pc in a stop state (STOP_STATES bits),
 * asking `classify` once per span of pcs alike; -1 on a Python error. */
/* The thread a stop is labelled with: a thread the process made, by its
 * tid; 0 for the process's first thread. */
static int64_t thread_label(const Tracer *t) { return t->s.spawned ? t->s.tid : 0; }

/* The stop class and where id of a stop at pc in `state`, labelled with the
 * running thread where the state says it is one the process made (the
 * classes of those states are cleared at every switch: Tracer_switch). */
static int classified(Tracer *t, uint32_t pc, int state, Py_ssize_t *stop_class, int32_t *where) {
    Py_ssize_t slot;
    Ranges *classes = &t->classes[state];
    const Range *found = ranges_find(classes, pc, &slot);
    Py_ssize_t id;
    if (found) {
        id = found->id;
    } else {
        PyObject *made = PyObject_CallFunction(t->classify, "kiL", (unsigned long)pc, state,
                                               (long long)(state & IN_SPAWNED_THREAD ? thread_label(t) : 0));
        if (!made) return -1;
        int class_id, where_id;
        long long low, high;
        int ok = PyArg_ParseTuple(made, "iiLL", &class_id, &where_id, &low, &high);
        Py_DECREF(made);
        if (!ok) return -1;
        if (class_id < 0 || where_id < 0 || !(low <= pc && pc < high)) {
            PyErr_Format(PyExc_ValueError, "classify gave a negative id or a span without pc %#lx", (unsigned long)pc);
            return -1;
        }
        id = (Py_ssize_t)class_id << 32 | where_id;
        if (ranges_insert(classes, slot, (Range){ low, high, NULL, id })) return -1;
    }
    *stop_class = id >> 32;
    *where = (int32_t)(id & 0xFFFFFFFF);
    return 0;
}

/* harness.thumb.encoding.instruction_size */
static int instruction_size(uint16_t first) {
    unsigned top = first >> 11;
    return top == 0x1D || top == 0x1E || top == 0x1F ? 4 : 2;
}

/* ------------------------------------------------------------ shadow stack */

static void frame_of(Expected *e, uint32_t pc, const uint64_t *v, int uses_vfp) {
    memset(e, 0, sizeof *e);
    e->pc = pc;
    e->sp = (uint32_t)v[SP];
    for (int i = 0; i < 8; i++) e->r[i] = (uint32_t)v[4 + i];
    e->state = uses_vfp ? VFP_KNOWN : 0;
    if (uses_vfp) memcpy(e->d, &v[FIRST_VFP], sizeof e->d);
}

static int bit_of(const uint8_t *bits, size_t size, uint64_t serial) {
    return serial / 8 < size && (bits[serial / 8] >> (serial % 8) & 1);
}

static int set_bit(uint8_t **bits, size_t *capacity, uint64_t serial) {
    const size_t had = *capacity;
    if (reserve(bits, capacity, serial / 8 + 1, 1)) return -1;
    memset(*bits + had, 0, *capacity - had);
    (*bits)[serial / 8] |= (uint8_t)(1u << (serial % 8));
    return 0;
}

static int push(Tracer *t, const Expected *frame, uint64_t serial) {
    if (reserve(&t->s.frames, &t->s.frames_capacity, t->s.depth + 1, sizeof(Expected)) ||
        reserve(&t->s.serials, &t->s.serials_capacity, t->s.depth + 1, sizeof(uint64_t)))
        return -1;
    t->s.frames[t->s.depth] = *frame;
    if (frame->state & SIGNAL_FRAME) t->s.signal_frames++;
    if (t->has_resumes && t->s.depth && !bit_of(t->resumes.buf, (size_t)t->resumes.len, serial))
        t->s.frames[t->s.depth].state |= NEVER_RESUMES;
    t->s.serials[t->s.depth] = serial;
    t->s.depth++;
    return 0;
}

/* A thread's outermost frame, at its first stop: "no caller" (the sentinel),
 * serial 0 for the process's first thread, a new one for each later one. */
static int push_bottom(Tracer *t) {
    Expected bottom;
    frame_of(&bottom, t->sentinel, t->values, t->uses_vfp);
    if (t->s.tid >= 0) t->serial++;
    return push(t, &bottom, t->serial);
}

static void drop_top(Tracer *t) {
    t->s.depth--;
    if (t->s.frames[t->s.depth].state & SIGNAL_FRAME) t->s.signal_frames--;
}

/* ShadowStack.state: the stop's STOP_STATES bits. */
static int stop_state(const Tracer *t) {
    return (t->s.flight ? IN_FLIGHT : 0) | (t->s.depth && (t->s.frames[t->s.depth - 1].state & SIGNAL_FRAME) ? IN_HANDLER : 0)
         | (t->s.signal_frames ? ABOVE_SIGNAL_FRAME : 0) | (t->s.spawned ? IN_SPAWNED_THREAD : 0);
}

/* ShadowStack._follow: the calls, returns and non-local exits. */
static int follow(Tracer *t, uint32_t pc, uint32_t sp) {
    if (t->s.call_pending) {
        t->s.call_pending = 0;
        return push(t, &t->s.pending_frame, t->s.pending_serial);
    }
    const int returned = t->s.return_pending && pc != t->s.return_fall_through;
    t->s.return_pending = 0;
    /* NON_LOCAL_EXIT: frames whose caller's sp lies below sp are gone */
    while (t->s.depth > 1 && t->s.frames[t->s.depth - 1].sp < sp) drop_top(t);
    const Expected *top = &t->s.frames[t->s.depth - 1];
    if (t->s.depth > 1 && sp == top->sp && (pc == top->pc || returned)) {  /* the frame resumes */
        if (set_bit(&t->resumed, &t->resumed_capacity, t->s.serials[t->s.depth - 1])) return -1;
        drop_top(t);
    }
    return 0;
}

/* The index of the first of `count` sorted values above or at pc. */
static size_t lower_bound(const uint32_t *values, size_t count, uint32_t pc) {
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = (low + high) / 2;
        if (values[middle] < pc) low = middle + 1; else high = middle;
    }
    return low;
}

static int sorted_holds(const uint32_t *values, size_t count, uint32_t pc) {
    size_t at = lower_bound(values, count, pc);
    return at < count && values[at] == pc;
}

static int raises_at(const Tracer *t, uint32_t pc) {
    return sorted_holds(t->raises, t->raise_count, pc);
}

static int observed_at(const Tracer *t, uint32_t pc) {
    return t->observe_all && (!t->observed_count || sorted_holds(t->observed, t->observed_count, pc));
}

/* Is pc in a quiet range? (ends are sorted: pc lies in one when the first
 * end above pc is a range's high end) */
static int quiet_at(const Tracer *t, uint32_t pc) {
    return lower_bound(t->quiet, 2 * t->quiet_count, pc + 1) % 2 == 1;
}

/* ShadowStack.observe: account for the instruction that ran since the last
 * stop, and for an exception in flight. */
static int observe(Tracer *t, uint32_t pc, uint32_t sp) {
    if (follow(t, pc, sp)) return -1;
    if (t->s.flight && t->s.depth < t->s.flight) t->s.flight = 0;
    if (!t->s.flight && t->raise_count && raises_at(t, pc)) t->s.flight = t->s.depth;
    return 0;
}

/* ------------------------------------------------------------ IT blocks */

/* SkippedStops.at: whether pc is one of the own instructions of the IT
 * block being followed (*skipped: those passed over before it). */
static int it_position(const Tracer *t, uint32_t pc, int *skipped) {
    *skipped = 0;
    for (int k = 0; k < t->s.it_count; k++) {
        if (t->s.it_pending[k].address == pc) { *skipped = k; return 1; }
    }
    if (t->s.it_count && pc == t->s.it_end) *skipped = t->s.it_count;
    return 0;
}

/* SkippedStops.passed_over: the block's instructions passed over before pc. */
static int passed_over(Tracer *t, uint32_t pc, SkippedStop *skipped) {
    int count = t->s.it_count;
    if (!count) return 0;
    for (int k = 0; k < count; k++) {
        if (t->s.it_pending[k].address == pc) {
            memcpy(skipped, t->s.it_pending, k * sizeof *skipped);
            memmove(t->s.it_pending, &t->s.it_pending[k + 1], (count - k - 1) * sizeof *skipped);
            t->s.it_count = count - k - 1;
            return k;
        }
    }
    t->s.it_count = 0;
    if (pc != t->s.it_end) return 0;  /* a branch inside the block left it */
    memcpy(skipped, t->s.it_pending, count * sizeof *skipped);
    return count;
}

/* SkippedStops.entered (harness.thumb.encoding.it_advance for each instruction) */
static int entered(Tracer *t, uint32_t pc, uint16_t it_instruction, int block) {
    uint8_t state = it_instruction & 0xFF;
    uint32_t address = pc + 2;
    for (int i = 0; i < block; i++) {
        t->s.it_pending[i] = (SkippedStop){ address, state };
        PcInfo *info = decoded(t, address, 1);
        if (!info) return -1;
        address += instruction_size(info->first);
        state = (state & 0x7) == 0 ? 0 : (state & 0xE0) | ((state << 1) & 0x1F);
    }
    t->s.it_count = block;
    t->s.it_end = address;
    return 0;
}

/* harness.thumb.encoding.executes */
static int executes(unsigned cond, uint32_t cpsr) {
    const int state = it_state(cpsr);
    if (state) cond = (unsigned)state >> 4;
    return condition_holds(cond, cpsr);
}

/* harness.thumb.encoding.with_it_state */
static uint32_t with_it_state(uint32_t cpsr, uint8_t state) {
    return (cpsr & ~CPSR_IT_BITS) | ((uint32_t)(state & 0x3) << 25) | ((uint32_t)(state >> 2) << 10);
}

/* ------------------------------------------------------------ one stop */

static PyObject *register_tuple(const uint64_t *v, int count) {
    PyObject *out = PyTuple_New(count);
    if (!out) return NULL;
    for (int i = 0; i < count; i++) {
        PyObject *value = PyLong_FromUnsignedLongLong(v[i]);
        if (!value) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, value);
    }
    return out;
}

static int call_slow(Tracer *t, uint64_t number, uint32_t pc, uint32_t cpsr, const Py_ssize_t *deferred, int count) {
    PyObject *regs = register_tuple(t->values, 15);
    PyObject *vfp = t->uses_vfp ? register_tuple(&t->values[FIRST_VFP], 8) : (Py_INCREF(Py_None), Py_None);
    PyObject *which = PyTuple_New(count);
    PyObject *shadow = PyBytes_FromStringAndSize((const char *)t->s.frames, t->s.depth * sizeof(Expected));
    PyObject *serials = register_tuple(t->s.serials, (int)t->s.depth);
    PyObject *result = NULL;
    if (!regs || !vfp || !which || !shadow || !serials) goto done;
    for (int i = 0; i < count; i++) {
        PyObject *index = PyLong_FromSsize_t(deferred[i]);
        if (!index) goto done;
        PyTuple_SET_ITEM(which, i, index);
    }
    result = PyObject_CallFunction(t->slow, "KkOIOOOOiL", (unsigned long long)number, (unsigned long)pc, regs,
                                   (unsigned int)cpsr, vfp, which, shadow, serials, stop_state(t),
                                   (long long)thread_label(t));
done:
    Py_XDECREF(regs);
    Py_XDECREF(vfp);
    Py_XDECREF(which);
    Py_XDECREF(shadow);
    Py_XDECREF(serials);
    if (!result) return -1;
    Py_DECREF(result);
    return 0;
}

/* The pc whose function an answer's wrong frame is in: a caller's pc is a
 * return address, its call one byte before. */
static inline uint32_t culprit_pc(const Answer *a) { return (uint32_t)(a->frame ? a->pc - 1 : a->pc); }

/* Log a failing answer at a stop of `where`, under its cause, and tally it. */
static int log_answer(Tracer *t, uint64_t number, uint32_t pc, int32_t where, Py_ssize_t unwinder,
                      const Answer *a) {
    CauseKey key;
    memset(&key, 0, sizeof key);
    key.unwinder = unwinder;
    key.kind = a->kind;
    key.frame = a->frame;
    if (a->kind != ANSWER_GUARD_FAILS || a->merged) {
        /* Alike wherever the wrong frame is in the same function. */
        Py_ssize_t ignored;
        int32_t culprit;
        if (classified(t, culprit_pc(a), 0, &ignored, &culprit)) return -1;
        /* a rejected caller: its kind (bad_read where its sp is misaligned, else limit) whatever the rule */
        key.detail = a->kind == ANSWER_MISMATCH ? a->reg : a->kind == ANSWER_CALLER_FAILS ? (a->got & 3) != 0
                   : a->rule_id;
        key.culprit = culprit;
        if (a->kind == ANSWER_GUARD_FAILS) key.kind = MERGED_GUARD;
    } else {
        key.detail = a->rule_id;
        key.culprit = a->pc;
        if (a->kind == ANSWER_GUARD_FAILS) {
            key.base = a->base;
            key.sp = a->sp;
            key.low = a->low;
            key.high = a->high;
        }
    }
    LastCause *last = &t->last_causes[unwinder];
    if (!last->known || last->where != where || memcmp(&last->key, &key, sizeof key)) {
        int added;
        const int64_t cause = intern(&t->causes, &key, &added);
        if (cause < 0) return -1;
        if (added) {
            if (reserve(&t->cause_answers, &t->cause_answers_capacity, (size_t)cause + 1, sizeof(Answer))) return -1;
            t->cause_answers[cause] = *a;
        }
        TallyKey tally_key = { where, cause };
        const int64_t tallied = intern(&t->tally, &tally_key, &added);
        if (tallied < 0) return -1;
        if (added) {
            if (reserve(&t->tally_counts, &t->tally_counts_capacity, (size_t)tallied + 1, sizeof(uint64_t)))
                return -1;
            t->tally_counts[tallied] = 0;
        }
        *last = (LastCause){ 1, key, where, cause, tallied };
    }
    t->tally_counts[last->tallied]++;
    if (t->logged >= t->log_cap) return 0;  /* tallied, not logged */
    /* A stop in a library: not a failure, no sample (a chain's failure comes here only as one), whether
     * its rule refuses with no_info or its guards fail with no_info whatever the values (a scan that finds
     * no return address): harness.verify.tally.is_stop. */
    const int refuses = a->kind == ANSWER_FAILS ||
                        (a->kind == ANSWER_GUARD_FAILS && (a->rule_flags & GUARD_KIND_FIXED));
    if (a->kind == ANSWER_CHAIN_FAILS || (refuses && (a->rule_flags & NO_INFO) && quiet_at(t, culprit_pc(a))))
        return 0;
    if (reserve(&t->log, &t->log_capacity, t->logged + 1, sizeof(Logged))) return -1;
    if (key.kind == MERGED_GUARD) {
        t->log[t->logged++] = (Logged){ number, pc, (int32_t)unwinder, GUARD_VALUES, a->base,
                                        (uint64_t)a->sp, a->low, a->high, last->tallied };
        return 0;
    }
    if (a->kind == ANSWER_CALLER_FAILS) {
        t->log[t->logged++] = (Logged){ number, pc, (int32_t)unwinder, CALLER_VALUES, a->got,
                                        (uint64_t)a->sp, 0, 0, last->tallied };
        return 0;
    }
    int values = a->kind == ANSWER_FAILS ? FAILS_VALUES : a->kind != ANSWER_MISMATCH ? NO_VALUES
               : a->reg > PC ? VFP_VALUES : CORE_VALUES;
    t->log[t->logged++] = (Logged){ number, pc, (int32_t)unwinder, values,
                                    a->kind == ANSWER_FAILS ? a->pc : a->got, a->want, 0, 0, last->tallied };
    return 0;
}

/* Walk every unwinder from `frame` at stop `number`: count passes, log
 * failures, and list in `deferred` those whose walks their step must make. */
static int walk_unwinders(Tracer *t, uint64_t number, const KFrame *frame, uint32_t cpsr, Py_ssize_t stop_class,
                          int32_t where, Py_ssize_t *deferred, int *deferrals) {
    const size_t skip = !t->compare_bottom;
    for (Py_ssize_t i = 0; i < verifier_unwinders(t->verifier); i++) {
        Answer answer;
        if (verifier_walk(t->verifier, i, frame, (uint32_t)t->values[SP], cpsr, t->s.frames + skip,
                          (Py_ssize_t)(t->s.depth - skip), &answer))
            return -1;
        /* A chain whose methods all fail is a stop where the frame is in a library; elsewhere `step` words it. */
        const int chain_words = answer.kind == ANSWER_CHAIN_FAILS && !quiet_at(t, culprit_pc(&answer));
        if (answer.kind == ANSWER_PASS) {
            if (verifier_count_pass(t->verifier, stop_class, i, &answer)) return -1;
        } else if (answer.kind == ANSWER_DEFER || chain_words) {
            deferred[(*deferrals)++] = i;
        } else if (log_answer(t, number, (uint32_t)frame->r[PC], where, i, &answer)) {
            return -1;
        }
        /* a wrong register of the caller of frame `frame`: the shadow frame depth - 1 - frame */
        if (answer.kind == ANSWER_MISMATCH && answer.reg != PC && answer.reg != SP && !t->has_resumes &&
            set_bit(&t->questioned, &t->questioned_capacity, t->s.serials[t->s.depth - 1 - answer.frame]))
            return -1;
    }
    return 0;
}

/* The running thread's own stack as the Verifier reads it: [sp, its top) as
 * it is now, read from the engine (none where sp is not below the top, or
 * where that span is not all mapped: no walk reads there then). */
static int thread_window(Tracer *t, uint32_t sp) {
    static const uint8_t nothing = 0;
    const uint32_t top = t->s.stack_top;
    size_t size = sp < top && top - sp <= MAX_THREAD_WINDOW ? top - sp : 0;
    if (size && reserve(&t->window, &t->window_capacity, size, 1)) return -1;
    if (size && t->engine.mem_read(t->engine.handle, sp, t->window, size)) size = 0;
    verifier_window(t->verifier, size ? t->window : &nothing, sp, (int64_t)sp + (int64_t)size);
    return 0;
}

/* Verify every unwinder at stop `number`, before the instruction at pc. */
static int verify_at(Tracer *t, uint64_t number, uint32_t pc, uint32_t cpsr) {
    t->stops++;
    Py_ssize_t unwinders = t->verifier ? verifier_unwinders(t->verifier) : 0;
    Py_ssize_t deferred[unwinders + 1];
    int deferrals = 0;
    if (unwinders) {
        Py_ssize_t stop_class;
        int32_t where;
        if (classified(t, pc, stop_state(t), &stop_class, &where)) return -1;
        KFrame frame;
        memset(&frame, 0, sizeof frame);
        for (int i = 0; i < 15; i++) frame.r[i] = (int64_t)t->values[i];
        frame.r[PC] = pc;
        if (t->uses_vfp) {
            memcpy(frame.d, &t->values[FIRST_VFP], sizeof frame.d);
            frame.d_known = 0xFF;
        }
        if (t->s.stack_top && thread_window(t, (uint32_t)t->values[SP])) return -1;
        /* Stops one instruction apart (or a shard's of them): the outer frames of a walk mostly repeat
         * (on the Verifier's own stack: a thread's window moves with its sp). */
        const int consecutive = t->every == 1 && !t->s.stack_top;
        const size_t skip = !t->compare_bottom;
        if (consecutive) verifier_begin_stop(t->verifier, t->s.frames + skip, (Py_ssize_t)(t->s.depth - skip), t->dirty);
        t->dirty = 0;
        const int failed = walk_unwinders(t, number, &frame, cpsr, stop_class, where, deferred, &deferrals);
        if (consecutive) verifier_end_stop(t->verifier);
        if (failed) return -1;
    }
    if (deferrals || observed_at(t, pc)) return call_slow(t, number, pc, cpsr, deferred, deferrals);
    return 0;
}

static int take_sample(Tracer *t, uint32_t pc, uint32_t cpsr);

/* The stop before the instruction at pc, in a run that stops at every
 * instruction: verified if it is this shard's, and with every > 1 a sample
 * (harness.verify.sampling). */
static int check(Tracer *t, uint32_t pc, uint32_t cpsr) {
    uint64_t number = t->seen++;
    if (t->every == 1) return number % t->shard_count == t->shard_index ? verify_at(t, number, pc, cpsr) : 0;
    return number == t->next_sample ? take_sample(t, pc, cpsr) : 0;
}

/* ------------------------------------------------------------ the hook */

static void halt(Tracer *t) {
    t->halted = 1;
    t->engine.emu_stop(t->engine.handle);
}

/* Keep the Python error raised in a callback for run() to raise, and stop. */
static void fail(Tracer *t) {
    PyErr_Fetch(&t->error_type, &t->error_value, &t->error_traceback);
    halt(t);
}

/* End the run at pc: past the limit of `guard`. */
static void guard_stop(Tracer *t, int guard, uint32_t pc) {
    t->guard = guard;
    t->guard_pc = pc;
    halt(t);
}

/* The process's resident size now (Linux: /proc/self/statm, kept open: it
 * is read every CHECK_EVERY instructions; a forked worker opens its own), or
 * its peak where there is no such file. Now, not the peak: a pool worker that
 * once held much for one program must not fault every later one. */
static uint64_t resident_bytes(void) {
    static int statm = -1;
    static pid_t opened_by = 0;
    const pid_t pid = getpid();
    if (statm < 0 || opened_by != pid) {
        if (statm >= 0 && opened_by != pid) statm = -1;  /* the parent's: not ours to close */
        statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
        opened_by = pid;
    }
    char text[96];
    const ssize_t got = statm >= 0 ? pread(statm, text, sizeof text - 1, 0) : -1;
    unsigned long size = 0, resident = 0;
    if (got > 0) {
        text[got] = 0;
        if (sscanf(text, "%lu %lu", &size, &resident) == 2) return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
    }
    struct rusage usage;
#ifdef __APPLE__
    const uint64_t unit = 1;     /* ru_maxrss in bytes */
#else
    const uint64_t unit = 1024;  /* in KiB */
#endif
    return getrusage(RUSAGE_SELF, &usage) ? 0 : (uint64_t)usage.ru_maxrss * unit;
}

/* GUARD_SECONDS or GUARD_MEMORY when the run is past that limit, else GUARD_NONE. */
static int exhausted(const Tracer *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = (double)(now.tv_sec - t->started.tv_sec) + (now.tv_nsec - t->started.tv_nsec) / 1e9;
    if (elapsed > t->max_seconds) return GUARD_SECONDS;
    if (resident_bytes() > t->max_memory) return GUARD_MEMORY;
    return GUARD_NONE;
}

/* The deadline is reached: expire() (Emulator._expire); *moved: the engine
 * goes on elsewhere (a handler, another thread, the process's end). */
static int expire_now(Tracer *t, int *moved) {
    t->deadline = UINT64_MAX;
    PyObject *result = PyObject_CallNoArgs(t->expire);
    if (!result) return -1;
    *moved = PyObject_IsTrue(result);
    Py_DECREF(result);
    return *moved < 0 ? -1 : 0;
}

static int stop_at(Tracer *t, uint32_t pc) {
    const uint64_t *v = t->values;
    const uint32_t cpsr = (uint32_t)v[CPSR];
    if (!t->s.depth) {  /* a thread's first stop: the harness's own call into the entry, or clone's */
        if (push_bottom(t)) return -1;
    } else if (observe(t, pc, (uint32_t)v[SP])) {
        return -1;
    }
    if (t->s.depth > t->max_depth) {
        guard_stop(t, GUARD_DEPTH, pc);
        return 0;
    }
    int ignored;
    const int inside = t->deadline != UINT64_MAX && it_position(t, pc, &ignored);
    SkippedStop skipped[IT_BLOCK];
    int passed = passed_over(t, pc, skipped);
    for (int i = 0; i < passed; i++) {
        if (check(t, skipped[i].address, with_it_state(cpsr, skipped[i].state))) return -1;
    }
    /* A timer or a time slice ends before this instruction; not inside an IT block: the engine neither says
     * its state there nor goes elsewhere from it. */
    if (t->seen >= t->deadline && !inside) {
        int moved;
        if (expire_now(t, &moved)) return -1;
        if (moved) return 0;  /* the engine goes on elsewhere: this instruction runs later */
    }
    if (check(t, pc, cpsr)) return -1;
    const int thumb = (cpsr & 0x20) != 0;
    PcInfo *info = decoded(t, pc, thumb);
    if (!info) return -1;
    if (info->returns) {  /* ShadowStack.before_return */
        t->s.return_pending = 1;
        t->s.return_fall_through = pc + (thumb ? instruction_size(info->first) : 4);
    }
    if (info->call_length && executes(info->cond, cpsr)) {  /* ShadowStack.before */
        t->serial++;
        t->s.call_pending = 1;
        t->s.fall_through = pc + info->call_length;
        frame_of(&t->s.pending_frame, t->s.fall_through, v, t->uses_vfp);
        t->s.pending_serial = t->serial;
    }
    if (info->it_length && entered(t, pc, info->first, info->it_length)) return -1;
    t->dirty |= info->may_store;  /* the stack may differ at the next stop */
    return 0;
}

static int read_failed(Tracer *t, int status, uint64_t address) {
    PyErr_Format(PyExc_OSError, "batch register read failed with status %d at pc %#llx", status,
                 (unsigned long long)address);
    return -1;
}

/* The bank the previous stop's registers are not in, read nothing yet. */
static void next_bank(Tracer *t) {
    t->bank ^= 1;
    t->values = t->banks[t->bank];
    t->complete[t->bank] = 0;
}

/* Every register of the current stop, read where only sp and cpsr were. */
static int complete_registers(Tracer *t, uint64_t address) {
    if (t->complete[t->bank]) return 0;
    t->complete[t->bank] = 1;
    int status = t->engine.reg_read_batch(t->engine.handle, t->engine.ids, t->pointers[t->bank], t->engine.count);
    return status ? read_failed(t, status, address) : 0;
}

/* Every register, into the next bank; -1 (and the run failed) when the
 * engine cannot read them. */
static int read_registers(Tracer *t, uint64_t address) {
    next_bank(t);
    if (!complete_registers(t, address)) return 0;
    fail(t);
    return -1;
}

/* A block's entry needs sp and cpsr alone, unless it ends a call or holds
 * a sample: those two into the next bank, the rest when wanted
 * (complete_registers). */
static int read_entry_registers(Tracer *t, uint64_t address) {
    next_bank(t);
    int status = t->engine.reg_read_batch(t->engine.handle, t->entry_ids, t->entry_pointers[t->bank], 2);
    if (!status) return 0;
    read_failed(t, status, address);
    fail(t);
    return -1;
}

static void on_code(void *engine, uint64_t address, uint32_t size, void *user_data) {
    Tracer *t = user_data;
    if (t->halted) return;
    if (++t->instructions > t->budget) {
        guard_stop(t, GUARD_INSTRUCTIONS, (uint32_t)address);
        return;
    }
    if (t->instructions % CHECK_EVERY == 0) {
        if (PyErr_CheckSignals()) { fail(t); return; }
        int guard = exhausted(t);
        if (guard) { guard_stop(t, guard, (uint32_t)address); return; }
    }
    if (read_registers(t, address)) return;
    /* an instruction that repeats with the same registers loops for ever, unless a timer or another thread
     * (a deadline) may change what it waits on */
    if (address == t->last_pc && t->deadline == UINT64_MAX &&
        !memcmp(t->banks[0], t->banks[1], t->engine.count * sizeof(uint64_t))) {
        guard_stop(t, GUARD_SELF_LOOP, (uint32_t)address);
        return;
    }
    t->last_pc = address;
    if (stop_at(t, (uint32_t)address)) fail(t);
}

/* ------------------------------------------------------------ sampled runs
 *
 * With every > 1 the run stops at seeded random strides of mean `every`
 * instructions (each in [1, 2 every - 1], so that no loop aliases with the
 * sample), and the shadow stack is kept from a hook at the entry of each
 * translation block instead of one before every instruction: a call or a
 * return is the last instruction of its block (it writes pc), so what it
 * did shows at the next entry, and the registers a call frame keeps (sp,
 * r4-r11, d8-d15) are the same there as at the call. A sample inside a
 * block is reached by stopping before the block, dropping its translation
 * and running up to the sampled instruction (the engine's `until`); the
 * stop there is the entry of the block that follows. Stops are numbered
 * as in a run that stops at every instruction: a block's instructions,
 * those an IT block skips included. */

/* splitmix64: a stride of mean `every`, in [1, 2 every - 1]. */
static uint64_t next_stride(Tracer *t) {
    uint64_t z = (t->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return 1 + z % (2 * t->every - 1);
}


/* harness.thumb.encoding.it_advance */
static inline uint8_t it_advance(uint8_t state) {
    return (state & 0x7) == 0 ? 0 : (uint8_t)((state & 0xE0) | ((state << 1) & 0x1F));
}

/* Decode the block [address, address + size) from its entry state. */
static int decode_block(Tracer *t, BlockInfo *b) {
    uint8_t state = b->it_state;
    uint32_t pc = b->address;
    b->count = 0;
    while (pc < b->address + b->size) {
        PcInfo *info = decoded(t, pc, b->thumb);
        if (!info) return -1;
        const uint8_t length = b->thumb ? (uint8_t)instruction_size(info->first) : 4;
        b->last = pc;
        b->last_size = length;
        b->call_length = info->call_length;
        b->returns = info->returns;
        b->cond = !b->thumb ? info->cond : state ? (uint8_t)(state >> 4) : 0xE;
        state = info->it_length ? (uint8_t)(info->first & 0xFF) : it_advance(state);
        pc += length;
        b->count++;
    }
    return 0;
}

/* The block entered at address (in the state cpsr says), decoded once. */
static const BlockInfo *block_of(Tracer *t, uint32_t address, uint32_t size, uint32_t cpsr) {
    const uint8_t thumb = (cpsr & 0x20) != 0, state = thumb ? (uint8_t)it_state(cpsr) : 0;
    if (2 * (t->blocks_used + 1) > t->blocks_size) {
        size_t grown = t->blocks_size ? 2 * t->blocks_size : 4096;
        BlockInfo *table = PyMem_Calloc(grown, sizeof(BlockInfo));
        if (!table) { PyErr_NoMemory(); return NULL; }
        for (size_t i = 0; i < t->blocks_size; i++) {
            if (!t->blocks[i].used) continue;
            size_t j = (size_t)(t->blocks[i].address * 2654435761u ^ t->blocks[i].size) & (grown - 1);
            while (table[j].used) j = (j + 1) & (grown - 1);
            table[j] = t->blocks[i];
        }
        PyMem_Free(t->blocks);
        t->blocks = table;
        t->blocks_size = grown;
    }
    size_t mask = t->blocks_size - 1, i = (size_t)(address * 2654435761u ^ size) & mask;
    for (; t->blocks[i].used; i = (i + 1) & mask) {
        const BlockInfo *b = &t->blocks[i];
        if (b->address == address && b->size == size && b->thumb == thumb && b->it_state == state) return b;
    }
    BlockInfo made = { .address = address, .size = size, .used = 1, .thumb = thumb, .it_state = state };
    if (decode_block(t, &made)) return NULL;
    t->blocks[i] = made;
    t->blocks_used++;
    return &t->blocks[i];
}

/* ShadowStack's view at a block's entry: the call or return the block
 * before ended with (a call frame holds what the registers hold now, but
 * pc: its return address), then the stop's own follow (observe). */
static int enter_block(Tracer *t, uint32_t pc, uint32_t cpsr) {
    const uint64_t *v = t->values;
    const int calls = t->s.has_ended && t->s.ended.call_length && condition_holds(t->s.ended.cond, cpsr);
    if ((!t->s.depth || calls) && complete_registers(t, pc)) return -1;
    if (!t->s.depth) return push_bottom(t);  /* a thread's first stop */
    if (t->s.has_ended) {
        const BlockInfo *e = &t->s.ended;
        t->s.has_ended = 0;
        if (e->returns) {
            t->s.return_pending = 1;
            t->s.return_fall_through = e->last + e->last_size;
        }
        if (calls) {  /* a call ended the block (its flags are as the call saw them) */
            t->serial++;
            t->s.call_pending = 1;
            frame_of(&t->s.pending_frame, e->last + e->call_length, v, t->uses_vfp);
            t->s.pending_serial = t->serial;
        }
    }
    return observe(t, pc, (uint32_t)v[SP]);
}

/* The sampled stop at stop number `seen`, at pc: verified when it is this shard's. */
static int take_sample(Tracer *t, uint32_t pc, uint32_t cpsr) {
    const uint64_t number = t->next_sample, sample = t->samples++;
    t->next_sample += next_stride(t);
    if (sample % t->shard_count != t->shard_index) return 0;
    if (complete_registers(t, pc)) return -1;
    t->dirty = 1;  /* block hooks see no instruction apart: any may have stored */
    return verify_at(t, number, pc, cpsr);
}

/* *at: the index of the block's first instruction, from `from` on, that is
 * not inside an IT block (its count where none is). */
static int outside_it_from(Tracer *t, const BlockInfo *b, uint64_t from, uint64_t *at) {
    uint8_t state = b->it_state;
    uint32_t pc = b->address;
    for (uint64_t i = 0; i < b->count; i++) {
        if (i >= from && !state) { *at = i; return 0; }
        PcInfo *info = decoded(t, pc, b->thumb);
        if (!info) return -1;
        state = info->it_length ? (uint8_t)(info->first & 0xFF) : it_advance(state);
        pc += b->thumb ? (uint32_t)instruction_size(info->first) : 4;
    }
    *at = b->count;
    return 0;
}

/* The address of the block's `index`-th instruction. */
static int instruction_at(Tracer *t, const BlockInfo *b, uint64_t index, uint32_t *out) {
    uint32_t pc = b->address;
    for (uint64_t i = 0; i < index; i++) {
        PcInfo *info = decoded(t, pc, b->thumb);
        if (!info) return -1;
        pc += b->thumb ? (uint32_t)instruction_size(info->first) : 4;
    }
    *out = pc;
    return 0;
}

static int entered_block(Tracer *t, uint32_t pc, uint32_t size) {
    const uint32_t cpsr = (uint32_t)t->values[CPSR];
    const BlockInfo *block = block_of(t, pc, size, cpsr);
    if (!block) return -1;
    const int resumed = t->resuming;
    if (resumed) {
        t->resuming = 0;  /* its entry was followed before the split */
    } else {
        if (enter_block(t, pc, cpsr)) return -1;
        if (t->s.depth > t->max_depth) {
            guard_stop(t, GUARD_DEPTH, pc);
            return 0;
        }
        while (t->next_sample == t->seen) {
            if (take_sample(t, pc, cpsr)) return -1;
        }
        if (t->seen >= t->deadline && !block->it_state) {  /* a timer or a time slice ends before this block */
            int moved;
            if (expire_now(t, &moved)) return -1;
            if (moved) return 0;  /* the engine goes on elsewhere: this block runs later */
        }
    }
    uint64_t split = t->next_sample < t->seen + block->count ? t->next_sample - t->seen : block->count;
    if (t->deadline < t->seen + block->count) {  /* its first instruction outside an IT block, from the deadline */
        uint64_t at;
        if (outside_it_from(t, block, t->deadline > t->seen ? t->deadline - t->seen : 1, &at)) return -1;
        if (at < split) split = at;
    }
    if (split < block->count) {  /* a sample or a deadline inside: run up to it first */
        if (resumed) {
            PyErr_Format(PyExc_RuntimeError, "the engine ran the block at %#lx on past the stop at %#lx",
                         (unsigned long)pc, (unsigned long)t->split_until);
            return -1;
        }
        if (instruction_at(t, block, split, &t->split_until)) return -1;
        t->split_low = pc;
        t->split_high = pc + size;
        t->split_requested = t->resuming = 1;
        t->engine.emu_stop(t->engine.handle);
        return 0;
    }
    const uint64_t before = t->instructions;
    t->seen += block->count;
    t->instructions += block->count;
    t->s.ended = *block;
    t->s.has_ended = 1;
    if (t->instructions > t->budget) {
        guard_stop(t, GUARD_INSTRUCTIONS, pc);
    } else if (before / CHECK_EVERY != t->instructions / CHECK_EVERY) {
        if (PyErr_CheckSignals()) return -1;
        int guard = exhausted(t);
        if (guard) guard_stop(t, guard, pc);
    }
    return 0;
}

static void on_block(void *engine, uint64_t address, uint32_t size, void *user_data) {
    Tracer *t = user_data;
    if (t->halted) return;
    if (read_entry_registers(t, address)) return;
    /* the same block again with the same registers: a self loop, unless a deadline may end it */
    if (!t->resuming && address == t->last_pc && t->deadline == UINT64_MAX) {
        if (complete_registers(t, address)) { fail(t); return; }
        if (t->complete[t->bank ^ 1] && !memcmp(t->banks[0], t->banks[1], t->engine.count * sizeof(uint64_t))) {
            guard_stop(t, GUARD_SELF_LOOP, (uint32_t)address);
            return;
        }
    }
    t->last_pc = address;
    if (entered_block(t, (uint32_t)address, size)) fail(t);
}

/* The engine's pc, in the form emu_start wants it (bit 0: Thumb). */
static int resume_pc(Tracer *t, uint64_t *pc) {
    int ids[2] = { t->engine.ids[PC], t->engine.ids[CPSR] };
    uint64_t values[2] = {0, 0};
    void *pointers[2] = { &values[0], &values[1] };
    int status = t->engine.reg_read_batch(t->engine.handle, ids, pointers, 2);
    *pc = (values[0] & 0xFFFFFFFF) | ((values[1] >> 5) & 1);
    return status;
}

/* A run with block hooks from `begin` to `until`: each split runs up to
 * its sample, then on; the engine's status of the last start. */
static int run_by_blocks(Tracer *t, uint64_t begin, uint64_t until) {
    uint64_t pc = begin, end = until;
    for (;;) {
        int status = t->engine.emu_start(t->engine.handle, pc, end, 0, 0);
        if (status || t->halted || t->error_type) return status;
        if (t->split_requested) {  /* stopped before a block with a sample inside */
            t->split_requested = 0;
            t->engine.ctl(t->engine.handle, t->engine.remove_cache, (uint64_t)t->split_low, (uint64_t)t->split_high);
            end = t->split_until;
            if ((status = resume_pc(t, &pc))) return status;
        } else if (end != until) {  /* at the sample: on from there (the block cut short there may stay
                                     * translated: the engine checks `until` when a block is entered) */
            if ((status = resume_pc(t, &pc))) return status;
            if ((pc & ~(uint64_t)1) != t->split_until) return 0;  /* stopped before it, by the program */
            end = until;
        } else {
            return 0;
        }
    }
}

/* ------------------------------------------------------------ the type */

static int Tracer_traverse(Tracer *self, visitproc visit, void *arg) {
    Py_VISIT(self->verifier);
    Py_VISIT(self->classify);
    Py_VISIT(self->slow);
    Py_VISIT(self->expire);
    Py_VISIT(self->error_type);
    Py_VISIT(self->error_value);
    Py_VISIT(self->error_traceback);
    return 0;
}

static int Tracer_clear(Tracer *self) {
    Py_CLEAR(self->verifier);
    Py_CLEAR(self->classify);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->expire);
    Py_CLEAR(self->error_type);
    Py_CLEAR(self->error_value);
    Py_CLEAR(self->error_traceback);
    return 0;
}

static void Tracer_dealloc(Tracer *self) {
    PyObject_GC_UnTrack(self);
    Tracer_clear(self);
    PyMem_Free(self->s.frames);
    PyMem_Free(self->s.serials);
    for (size_t i = 0; i < self->parked_count; i++) {
        PyMem_Free(self->parked[i].frames);
        PyMem_Free(self->parked[i].serials);
    }
    PyMem_Free(self->parked);
    PyMem_Free(self->window);
    PyMem_Free(self->resumed);
    PyMem_Free(self->questioned);
    if (self->has_resumes) PyBuffer_Release(&self->resumes);
    PyMem_Free(self->table);
    PyMem_Free(self->blocks);
    for (int state = 0; state < STOP_STATE_COUNT; state++) ranges_clear(&self->classes[state]);
    PyMem_Free(self->raises);
    PyMem_Free(self->observed);
    PyMem_Free(self->quiet);
    PyMem_Free(self->log);
    PyMem_Free(self->causes.keys);
    PyMem_Free(self->causes.slots);
    PyMem_Free(self->tally.keys);
    PyMem_Free(self->tally.slots);
    PyMem_Free(self->cause_answers);
    PyMem_Free(self->last_causes);
    PyMem_Free(self->tally_counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int address_of(PyObject *engine, Py_ssize_t index, void **out) {
    *out = PyLong_AsVoidPtr(PyTuple_GET_ITEM(engine, index));
    if (!*out && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "engine item %zd is a null address", index);
    return *out ? 0 : -1;
}

/* The quiet ranges, a tuple of (low, high) pairs, sorted and disjoint. */
static int quiet_ranges(Tracer *self, PyObject *quiet) {
    Py_ssize_t count = PyTuple_GET_SIZE(quiet);
    if (!count) return 0;
    self->quiet = PyMem_Calloc(2 * (size_t)count, sizeof(uint32_t));
    if (!self->quiet) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < count; i++) {
        unsigned long low, high;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(quiet, i), "kk", &low, &high)) return -1;
        if (low >= high || high > 0xFFFFFFFFul || (i && low < self->quiet[2 * i - 1])) {
            PyErr_SetString(PyExc_ValueError, "quiet ranges must be sorted, disjoint and not empty");
            return -1;
        }
        self->quiet[2 * i] = (uint32_t)low;
        self->quiet[2 * i + 1] = (uint32_t)high;
    }
    self->quiet_count = (size_t)count;
    return 0;
}

/* A tuple of sorted, distinct pcs as an array (*values NULL for none). */
static int sorted_pcs(PyObject *tuple, const char *name, uint32_t **values, size_t *count) {
    Py_ssize_t size = tuple ? PyTuple_GET_SIZE(tuple) : 0;
    if (!size) return 0;
    *values = PyMem_Calloc((size_t)size, sizeof(uint32_t));
    if (!*values) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < size; i++) {
        (*values)[i] = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(tuple, i));
        if (PyErr_Occurred()) return -1;
        if (i && (*values)[i] <= (*values)[i - 1]) {
            PyErr_Format(PyExc_ValueError, "%s must be sorted and distinct", name);
            return -1;
        }
    }
    *count = (size_t)size;
    return 0;
}

/* Tracer(engine, verifier, sentinel, uses_vfp, every, shard_index,
 * shard_count, classify, slow, observe_all, compare_bottom=True, raises=(),
 * quiet=(), resumes=None, observed=()): engine is harness/verify/abi.py's
 * Engine (its items by the ENGINE_* indices); raises the entry points that
 * raise an exception, sorted; quiet the pcs of modules not the program's
 * own; observed, sorted, the only pcs observe_all calls slow at. */
static int Tracer_init(Tracer *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"engine", "verifier", "sentinel", "uses_vfp", "every", "shard_index", "shard_count",
                            "classify", "slow", "observe_all", "compare_bottom", "raises", "quiet", "resumes",
                            "observed", "by_blocks", NULL};
    PyObject *engine, *verifier, *classify, *slow, *raises = NULL, *quiet = NULL, *resumes = Py_None,
             *observed = NULL;
    unsigned long sentinel;
    int uses_vfp, observe_all, compare_bottom = 1, by_blocks = 0;
    unsigned long long every, shard_index, shard_count;
    if (self->engine.handle) {
        PyErr_SetString(PyExc_TypeError, "a Tracer is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OkpKKKOOp|pO!O!OO!p", names, &PyTuple_Type, &engine, &verifier,
                                     &sentinel, &uses_vfp, &every, &shard_index, &shard_count, &classify, &slow,
                                     &observe_all, &compare_bottom, &PyTuple_Type, &raises, &PyTuple_Type, &quiet,
                                     &resumes, &PyTuple_Type, &observed, &by_blocks))
        return -1;
    if (resumes != Py_None) {
        if (PyObject_GetBuffer(resumes, &self->resumes, PyBUF_SIMPLE)) return -1;
        self->has_resumes = 1;
    }
    if (verifier != Py_None && !PyObject_TypeCheck(verifier, &VerifierType)) {
        PyErr_SetString(PyExc_TypeError, "verifier must be a Verifier or None");
        return -1;
    }
    if (!PyCallable_Check(classify) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "classify and slow must be callable");
        return -1;
    }
    if (!every || !shard_count || shard_index >= shard_count) {
        PyErr_SetString(PyExc_ValueError, "every and shard_count must be positive, shard_index below shard_count");
        return -1;
    }
    if (PyTuple_GET_SIZE(engine) != ENGINE_FIELDS) {
        PyErr_Format(PyExc_ValueError, "engine must hold %d items", ENGINE_FIELDS);
        return -1;
    }
    Engine e;
    memset(&e, 0, sizeof e);
    if (address_of(engine, ENGINE_HANDLE, &e.handle) ||
        address_of(engine, ENGINE_REG_READ_BATCH, (void **)&e.reg_read_batch) ||
        address_of(engine, ENGINE_MEM_READ, (void **)&e.mem_read) ||
        address_of(engine, ENGINE_EMU_START, (void **)&e.emu_start) ||
        address_of(engine, ENGINE_EMU_STOP, (void **)&e.emu_stop) ||
        address_of(engine, ENGINE_HOOK_ADD, (void **)&e.hook_add) ||
        address_of(engine, ENGINE_HOOK_DEL, (void **)&e.hook_del) ||
        address_of(engine, ENGINE_CTL, (void **)&e.ctl))
        return -1;
    e.hook_code = (int)PyLong_AsLong(PyTuple_GET_ITEM(engine, ENGINE_HOOK_CODE));
    e.hook_block = (int)PyLong_AsLong(PyTuple_GET_ITEM(engine, ENGINE_HOOK_BLOCK));
    e.remove_cache = (int)PyLong_AsLong(PyTuple_GET_ITEM(engine, ENGINE_REMOVE_CACHE));
    PyObject *ids = PySequence_Fast(PyTuple_GET_ITEM(engine, ENGINE_REGISTERS), "register ids must be a sequence");
    if (!ids) return -1;
    e.count = (int)PySequence_Fast_GET_SIZE(ids);
    if (e.count != (uses_vfp ? MAX_REGISTERS : FIRST_VFP)) {
        PyErr_Format(PyExc_ValueError, "expected %d register ids, got %d", uses_vfp ? MAX_REGISTERS : FIRST_VFP, e.count);
        Py_DECREF(ids);
        return -1;
    }
    for (int i = 0; i < e.count; i++) e.ids[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(ids, i));
    Py_DECREF(ids);
    if (PyErr_Occurred()) return -1;
    for (int b = 0; b < 2; b++) {  /* 32-bit registers fill the low half of their slot */
        for (int i = 0; i < MAX_REGISTERS; i++) self->pointers[b][i] = &self->banks[b][i];
        self->entry_pointers[b][0] = &self->banks[b][SP];
        self->entry_pointers[b][1] = &self->banks[b][CPSR];
    }
    self->entry_ids[0] = e.ids[SP];
    self->entry_ids[1] = e.ids[CPSR];
    self->values = self->banks[0];
    self->last_pc = UINT64_MAX;  /* no stop before the first */
    self->s.tid = -1;
    self->deadline = UINT64_MAX;
    self->dirty = 1;
    self->engine = e;
    self->verifier = verifier == Py_None ? NULL : (Verifier *)verifier;
    Py_XINCREF(self->verifier);
    self->last_causes = PyMem_Calloc(self->verifier ? verifier_unwinders(self->verifier) + 1 : 1, sizeof(LastCause));
    if (!self->last_causes) { PyErr_NoMemory(); return -1; }
    self->sentinel = (uint32_t)sentinel;
    self->uses_vfp = uses_vfp;
    self->every = every;
    self->by_blocks = by_blocks;
    self->shard_index = shard_index;
    self->shard_count = shard_count;
    Py_INCREF(classify);
    self->classify = classify;
    Py_INCREF(slow);
    self->slow = slow;
    self->observe_all = observe_all;
    self->compare_bottom = compare_bottom;
    self->causes.key_size = sizeof(CauseKey);
    self->tally.key_size = sizeof(TallyKey);
    if (sorted_pcs(raises, "raises", &self->raises, &self->raise_count) ||
        sorted_pcs(observed, "observed", &self->observed, &self->observed_count))
        return -1;
    return quiet ? quiet_ranges(self, quiet) : 0;
}

/* run(begin, until, limits, log_cap=FAILURE_LOG_CAP) -> (engine status,
 * guard, pc): limits is harness/verify/abi.py's Limits (instructions,
 * seconds, memory_bytes, depth); guard the GUARD_* that ended the run at pc
 * (GUARD_NONE and 0: none did). Raises what a callback raised. */
static PyObject *run_engine(Tracer *self, uint64_t begin, uint64_t until);

static PyObject *Tracer_run(Tracer *self, PyObject *args) {
    unsigned long long begin, until, budget, memory, depth;
    double seconds;
    Py_ssize_t log_cap = FAILURE_LOG_CAP;
    if (!PyArg_ParseTuple(args, "KK(KdKK)|n", &begin, &until, &budget, &seconds, &memory, &depth, &log_cap))
        return NULL;
    if (!self->engine.handle || self->ran) {
        PyErr_SetString(PyExc_RuntimeError, "a Tracer runs once, after it is initialised");
        return NULL;
    }
    if (log_cap < 0) {
        PyErr_SetString(PyExc_ValueError, "log_cap must not be negative");
        return NULL;
    }
    self->ran = 1;
    self->budget = budget;
    self->max_seconds = seconds;
    self->max_memory = memory;
    self->max_depth = depth;
    self->log_cap = (size_t)log_cap;
    clock_gettime(CLOCK_MONOTONIC, &self->started);
    self->rng = self->every;  /* the same strides for every run of a program */
    self->next_sample = self->every > 1 ? next_stride(self) - 1 : 0;
    if (self->by_blocks && !self->verifier && !self->observe_all) self->next_sample = UINT64_MAX;  /* ground truth alone */
    return run_engine(self, begin, until);
}

/* resume(begin, until) -> as run: on after a fault whose handler the
 * program takes (Emulator.call_traced), with the same limits, clock and
 * counts; faulted() and interrupted() have told the shadow stack. */
static PyObject *Tracer_resume(Tracer *self, PyObject *args) {
    unsigned long long begin, until;
    if (!PyArg_ParseTuple(args, "KK", &begin, &until)) return NULL;
    if (!self->ran || !self->slow || self->halted) {
        PyErr_SetString(PyExc_RuntimeError, "a Tracer resumes only a run a fault stopped, until finish()");
        return NULL;
    }
    self->split_requested = self->resuming = 0;  /* a split the fault cut short is not resumed */
    return run_engine(self, begin, until);
}

/* finish(): the run is over: `slow`, which holds the emulator, is let go
 * (the engine need not live on with this tracer and its failure log). */
static PyObject *Tracer_finish(Tracer *self, PyObject *unused) {
    (void)unused;
    Py_CLEAR(self->slow);
    Py_CLEAR(self->expire);
    self->deadline = UINT64_MAX;
    Py_RETURN_NONE;
}

/* set_deadline(count, expire): before the instruction at which the stops
 * seen reach `count` (None: never), call expire(); from block entries, the
 * block that holds it is run up to it first, as for a sample. */
static PyObject *Tracer_set_deadline(Tracer *self, PyObject *args) {
    PyObject *count, *expire;
    if (!PyArg_ParseTuple(args, "OO", &count, &expire)) return NULL;
    if (count == Py_None) {
        self->deadline = UINT64_MAX;
        Py_CLEAR(self->expire);
        Py_RETURN_NONE;
    }
    const unsigned long long value = PyLong_AsUnsignedLongLong(count);
    if (PyErr_Occurred()) return NULL;
    if (!PyCallable_Check(expire)) {
        PyErr_SetString(PyExc_TypeError, "expire must be callable");
        return NULL;
    }
    Py_INCREF(expire);
    Py_XSETREF(self->expire, expire);
    self->deadline = value;
    Py_RETURN_NONE;
}

/* The engine from `begin` to `until` under the tracer's hook: (engine
 * status, guard, pc), or NULL with what a callback raised. */
static PyObject *run_engine(Tracer *self, uint64_t begin, uint64_t until) {
    size_t hook = 0;
    int status = self->by_blocks
        ? self->engine.hook_add(self->engine.handle, &hook, self->engine.hook_block, (void *)on_block, self,
                                (uint64_t)1, (uint64_t)0)
        : self->engine.hook_add(self->engine.handle, &hook, self->engine.hook_code, (void *)on_code, self,
                                (uint64_t)1, (uint64_t)0);
    if (status) return PyErr_Format(PyExc_OSError, "adding the tracer's hook failed with status %d", status);
    status = self->by_blocks ? run_by_blocks(self, begin, until)
                           : self->engine.emu_start(self->engine.handle, begin, until, 0, 0);
    self->engine.hook_del(self->engine.handle, hook);
    if (self->error_type) {
        PyErr_Restore(self->error_type, self->error_value, self->error_traceback);
        self->error_type = self->error_value = self->error_traceback = NULL;
        return NULL;
    }
    return Py_BuildValue("(iik)", status, self->guard, (unsigned long)self->guard_pc);
}

/* Where Tracer.causes finds what a cause is made of (Verification.cause_parts): the unwinders'
 * names, the run's wheres, (kind, register name) by mismatched register, the cause's type and the
 * kernel's book's rules by id. */
typedef struct {
    PyObject *names, *wheres, *mismatches, *rules;
    PyTypeObject *type;
} CauseParts;

/* The rule `id` of the book (borrowed), or NULL where it is none there. */
static PyObject *book_rule(const CauseParts *parts, Py_ssize_t id) {
    if (id < 0 || id >= PyList_GET_SIZE(parts->rules)) return NULL;
    PyObject *rule = PyList_GET_ITEM(parts->rules, id);
    return PyTuple_Check(rule) && PyTuple_GET_SIZE(rule) == RULE_FIELD_COUNT ? rule : NULL;
}

/* The kind and register name (borrowed both) of a cause Python words as StopKernel.kind_of does: a
 * mismatch's by its register, a failure rule's the kind of its failure, a merged guard failure's its
 * rule's guard kind (bad_read where none); 0, or -1 where it cannot tell (Python then makes the cause). */
static int kind_and_register(const CauseKey *key, const Answer *a, const CauseParts *parts, PyObject **kind,
                             PyObject **name) {
    static PyObject *bad_read;
    if (!bad_read && !(bad_read = PyUnicode_InternFromString("bad_read"))) return -1;
    *name = Py_None;
    if (a->kind == ANSWER_MISMATCH) {
        PyObject *reg = PyLong_FromLong(a->reg);
        PyObject *pair = reg ? PyDict_GetItemWithError(parts->mismatches, reg) : NULL;  /* borrowed */
        Py_XDECREF(reg);
        if (!pair || !PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) return -1;
        *kind = PyTuple_GET_ITEM(pair, 0);
        *name = PyTuple_GET_ITEM(pair, 1);
        return 0;
    }
    PyObject *rule = a->kind == ANSWER_FAILS || key->kind == MERGED_GUARD ? book_rule(parts, a->rule_id) : NULL;
    if (!rule) return -1;
    if (a->kind == ANSWER_FAILS) {
        PyObject *failure = PyTuple_GET_ITEM(rule, RULE_FAILURE);
        if (!PyTuple_Check(failure) || PyTuple_GET_SIZE(failure) < 1) return -1;
        *kind = PyTuple_GET_ITEM(failure, 0);
        return 0;
    }
    PyObject *guard_kind = PyTuple_GET_ITEM(rule, RULE_GUARD_KIND);
    const int some = PyObject_IsTrue(guard_kind);
    if (some < 0) return -1;
    *kind = some ? guard_kind : bad_read;
    return 0;
}

/* A cause made as Python's Verification.kernel_causes makes it of a mismatch, a failure rule's
 * answer or a merged guard failure (most of a run's): type(unwinder name, kind, frame, culprit
 * function, register name, "", culprit traits), (function, traits, ...) = wheres[culprit]; NULL
 * without an exception where a part is not what it should be (Python then makes it). */
static PyObject *cause_in_c(const CauseKey *key, const Answer *a, const CauseParts *parts) {
    if (key->unwinder < 0 || key->unwinder >= PyList_GET_SIZE(parts->names) || key->culprit < 0 ||
        key->culprit >= PyList_GET_SIZE(parts->wheres) || key->kind == ANSWER_GUARD_FAILS)
        return NULL;
    PyObject *where = PyList_GET_ITEM(parts->wheres, key->culprit), *kind, *name;
    if (!PyTuple_Check(where) || PyTuple_GET_SIZE(where) < 2 || kind_and_register(key, a, parts, &kind, &name)) {
        PyErr_Clear();  /* unreadable: Python's to make, and to say what is wrong */
        return NULL;
    }
    return tuple_taking(parts->type, 7, (PyObject *[]){
        Py_NewRef(PyList_GET_ITEM(parts->names, key->unwinder)), Py_NewRef(kind), PyLong_FromSsize_t(a->frame),
        Py_NewRef(PyTuple_GET_ITEM(where, 0)), Py_NewRef(name), PyUnicode_FromStringAndSize("", 0),
        Py_NewRef(PyTuple_GET_ITEM(where, 1)) });
}

/* causes([names, wheres, mismatches, type, rules]) -> by cause id, the first answer of each as
 * (unwinder, answer, culprit where id or -1) (see answer_object); given the parts, a mismatch's, a
 * failure rule's and a merged guard failure's as its cause (cause_in_c): Python made each from its
 * record, a fifth of a program's work after its run. */
static PyObject *Tracer_causes(Tracer *self, PyObject *args) {
    CauseParts parts = { NULL, NULL, NULL, NULL, NULL };
    if (!PyArg_ParseTuple(args, "|O!O!O!O!O!:causes", &PyList_Type, &parts.names, &PyList_Type, &parts.wheres,
                          &PyDict_Type, &parts.mismatches, &PyType_Type, &parts.type, &PyList_Type, &parts.rules))
        return NULL;
    if (parts.names && !(parts.rules && PyType_IsSubtype(parts.type, &PyTuple_Type)))
        return PyErr_Format(PyExc_TypeError, "causes: names, wheres, mismatches, a tuple type and rules, or nothing");
    PyObject *out = PyList_New((Py_ssize_t)self->causes.count);
    if (!out) return NULL;
    for (size_t id = 0; id < self->causes.count; id++) {
        const CauseKey *key = (const CauseKey *)(self->causes.keys + id * sizeof(CauseKey));
        const Answer *answer = &self->cause_answers[id];
        PyObject *item = parts.names ? cause_in_c(key, answer, &parts) : NULL;
        if (!item && PyErr_Occurred()) { Py_DECREF(out); return NULL; }
        if (!item) {
            const int culprit = key->kind != ANSWER_GUARD_FAILS;
            item = Py_BuildValue("(LNL)", (long long)key->unwinder, answer_object(answer),
                                 (long long)(culprit ? key->culprit : -1));
        }
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)id, item);
    }
    return out;
}

/* The (where, cause) of tally entry `id`. */
static inline const TallyKey *tally_key(const Tracer *t, int64_t id) {
    return (const TallyKey *)(t->tally.keys + id * sizeof(TallyKey));
}

/* tally() -> [(where id, cause id, stops)] */
static PyObject *Tracer_tally(Tracer *self, PyObject *unused) {
    PyObject *out = PyList_New((Py_ssize_t)self->tally.count);
    if (!out) return NULL;
    for (size_t id = 0; id < self->tally.count; id++) {
        const TallyKey *key = tally_key(self, (int64_t)id);
        PyObject *item = int_triple(key->where, key->cause, self->tally_counts[id]);
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)id, item);
    }
    return out;
}

/* (stop, pc, where, cause, values or None): a failure log entry; a
 * failure rule's values are ("fails", rule id, frame pc), a merged guard
 * failure's ("guard", rule id, base, sp, low, high), a rejected caller's
 * ("caller", caller sp, callee sp), worded in Python. */
static PyObject *log_entry(const Tracer *self, const Logged *entry, PyObject *wheres, PyObject *causes) {
    const TallyKey *ids = tally_key(self, entry->tallied);
    if (ids->where >= PyList_GET_SIZE(wheres) || ids->cause >= PyList_GET_SIZE(causes)) {
        PyErr_SetString(PyExc_IndexError, "a failure's where or cause id is past the lists given");
        return NULL;
    }
    PyObject *where = PyList_GET_ITEM(wheres, ids->where), *cause = PyList_GET_ITEM(causes, ids->cause);
    unsigned long long number = entry->number, want = entry->want;
    unsigned long pc = entry->pc;
    const Py_ssize_t rule_id = self->cause_answers[ids->cause].rule_id;
    switch (entry->values) {
    case CORE_VALUES: return Py_BuildValue("(KkOO(LK))", number, pc, where, cause, (long long)entry->got, want);
    case VFP_VALUES:
        return Py_BuildValue("(KkOO(KK))", number, pc, where, cause, (unsigned long long)entry->got, want);
    case GUARD_VALUES:
        return Py_BuildValue("(KkOO(snLLLL))", number, pc, where, cause, "guard", rule_id, (long long)entry->got,
                             (long long)entry->want, (long long)entry->low, (long long)entry->high);
    case FAILS_VALUES:
        return Py_BuildValue("(KkOO(snL))", number, pc, where, cause, "fails", rule_id, (long long)entry->got);
    case CALLER_VALUES:
        return Py_BuildValue("(KkOO(sLK))", number, pc, where, cause, "caller", (long long)entry->got, want);
    }
    return Py_BuildValue("(KkOOO)", number, pc, where, cause, Py_None);
}

/* The merge of this tracer's log with `others` (a list of (stop,
 * unwinder, entry), in stop order) in (stop, unwinder) order: the entries
 * taken from each so far. */
typedef struct { size_t mine; Py_ssize_t theirs; } Merged;

/* Take the next entry of the merge: from `others` (*entry borrowed) or this
 * tracer's log (*entry NULL), and its unwinder; 0, 1 at the end (or at
 * `total` entries, when positive), -1 on error. */
static int merge_next(const Tracer *self, PyObject *others, Py_ssize_t total, Merged *m, PyObject **entry,
                      int *unwinder) {
    const Py_ssize_t count = PyList_GET_SIZE(others);
    if ((m->mine >= self->logged && m->theirs >= count) || (total > 0 && (Py_ssize_t)m->mine + m->theirs >= total))
        return 1;
    unsigned long long number = 0;
    *entry = NULL;
    if (m->theirs < count) {
        if (!PyArg_ParseTuple(PyList_GET_ITEM(others, m->theirs), "KiO", &number, unwinder, entry)) return -1;
        Py_ssize_t unwinders = self->verifier ? verifier_unwinders(self->verifier) : 0;
        if (*unwinder < 0 || *unwinder >= unwinders) {
            PyErr_SetString(PyExc_IndexError, "a failure names an unwinder the verifier does not have");
            return -1;
        }
    }
    const Logged *next = m->mine < self->logged ? &self->log[m->mine] : NULL;
    if (*entry && (!next || number < next->number || (number == next->number && *unwinder < next->unwinder))) {
        m->theirs++;
        return 0;
    }
    *entry = NULL;
    *unwinder = next->unwinder;
    m->mine++;
    return 0;
}

/* failure_log(wheres, causes, others, limit, total=0) -> the failure log
 * (harness.verify.failures.FailureLog): this tracer's failing answers, their where
 * and cause ids looked up in `wheres` and `causes`, merged in (stop,
 * unwinder) order with `others`, [(stop, unwinder, entry)] in that order;
 * with a total, only the first `total` of the merged answers; of those, with
 * a limit, only the first `limit` of each unwinder. */
static PyObject *Tracer_failure_log(Tracer *self, PyObject *args) {
    PyObject *wheres, *causes, *others;
    Py_ssize_t limit, total = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!n|n", &PyList_Type, &wheres, &PyList_Type, &causes, &PyList_Type, &others,
                          &limit, &total))
        return NULL;
    Py_ssize_t unwinders = self->verifier ? verifier_unwinders(self->verifier) : 0;
    Py_ssize_t *taken = PyMem_Calloc(unwinders + 1, sizeof(Py_ssize_t));
    PyObject *out = PyList_New(0);
    if (!taken || !out) goto error;
    Merged merged = { 0, 0 };
    for (;;) {
        PyObject *entry;
        int unwinder;
        const int status = merge_next(self, others, total, &merged, &entry, &unwinder);
        if (status < 0) goto error;
        if (status) break;
        if (limit && taken[unwinder] >= limit) continue;
        taken[unwinder]++;
        PyObject *item = entry ? Py_NewRef(entry) : log_entry(self, &self->log[merged.mine - 1], wheres, causes);
        if (!item || PyList_Append(out, item)) {
            Py_XDECREF(item);
            goto error;
        }
        Py_DECREF(item);
    }
    PyMem_Free(taken);
    return out;
error:
    PyMem_Free(taken);
    Py_XDECREF(out);
    return PyErr_Occurred() ? NULL : PyErr_NoMemory();
}

/* log_split(others, total) -> (mine, theirs): how many entries of this
 * tracer's log and of `others` the first `total` of their merge hold
 * (see failure_log), without building any. */
static PyObject *Tracer_log_split(Tracer *self, PyObject *args) {
    PyObject *others;
    Py_ssize_t total;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &others, &total)) return NULL;
    Merged merged = { 0, 0 };
    for (;;) {
        PyObject *entry;
        int unwinder;
        const int status = merge_next(self, others, total, &merged, &entry, &unwinder);
        if (status < 0) return NULL;
        if (status) break;
    }
    return Py_BuildValue("(nn)", (Py_ssize_t)merged.mine, merged.theirs);
}

/* Sort `count` pcs (`spare`: room for as many). A group's are mostly few and in order already (a loop's stops come
 * round again): by insertion. Those of an unwinder failing all over hold thousands: by their bytes, the lowest
 * first, passing over the bytes every pc shares (a program's pcs share their highest), where qsort was a fifth of
 * the grouping. */
static void sort_pcs(uint32_t *pcs, uint32_t *spare, size_t count) {
    if (count <= 64) {
        for (size_t i = 1; i < count; i++) {
            const uint32_t pc = pcs[i];
            size_t j = i;
            for (; j && pcs[j - 1] > pc; j--) pcs[j] = pcs[j - 1];
            pcs[j] = pc;
        }
        return;
    }
    uint32_t any = 0, every = UINT32_MAX;
    for (size_t i = 0; i < count; i++) {
        any |= pcs[i];
        every &= pcs[i];
    }
    uint32_t *from = pcs, *to = spare;
    for (int shift = 0; shift < 32; shift += 8) {
        if (!(((any ^ every) >> shift) & 0xFF)) continue;  /* the same byte in every pc */
        size_t at[256] = { 0 };
        for (size_t i = 0; i < count; i++) at[(from[i] >> shift) & 0xFF]++;
        for (size_t byte = 0, first = 0; byte < 256; byte++) {
            const size_t n = at[byte];
            at[byte] = first;
            first += n;
        }
        for (size_t i = 0; i < count; i++) to[at[(from[i] >> shift) & 0xFF]++] = from[i];
        uint32_t *sorted = to;
        to = from;
        from = sorted;
    }
    if (from != pcs) memcpy(pcs, from, count * sizeof *pcs);
}

/* The end of the range of sorted distinct pcs that starts at `i`: pcs at most `gap` bytes apart. */
static size_t range_end(const uint32_t *pcs, size_t count, size_t i, long gap) {
    size_t end = i + 1;
    while (end < count && pcs[end] <= pcs[end - 1] + (uint64_t)gap) end++;
    return end;
}

/* The ranges of the `count` sorted distinct pcs: ((low, high), ...), pcs at
 * most `gap` bytes apart in one (harness.verify.failures.ranges_of). Made
 * without Py_BuildValue or a list: a run has hundreds, which cost most of
 * the digest's grouping that way. */
static PyObject *ranges_of(const uint32_t *pcs, size_t count, long gap) {
    Py_ssize_t ranges = 0;
    for (size_t i = 0; i < count; i = range_end(pcs, count, i, gap)) ranges++;
    PyObject *out = PyTuple_New(ranges);
    Py_ssize_t at = 0;
    for (size_t i = 0, end; out && i < count; i = end) {
        end = range_end(pcs, count, i, gap);
        PyObject *range = tuple_taking(NULL, 2, (PyObject *[]){ PyLong_FromUnsignedLong(pcs[i]),
                                                                PyLong_FromUnsignedLong(pcs[end - 1]) });
        if (!range) {
            Py_CLEAR(out);
            break;
        }
        PyObject_GC_UnTrack(range);  /* two ints: in no cycle */
        PyTuple_SET_ITEM(out, at++, range);
    }
    if (out) PyObject_GC_UnTrack(out);
    return out;
}

/* logged_pcs(count, gap, of_entry, groups) -> [(failures, ranges) or None] by group: the first `count` log
 * entries (every one where count < 0) by the group of their tally entry (`of_entry`: the int64 group of each
 * entry of the run's tally, whose first ones are the kernel's; -1: left out), each group's distinct pcs as ranges
 * of pcs at most `gap` bytes apart: what the digest of a run needs (harness.report.failing), without an object
 * per logged failure. Entries are put in their group's place by one count of each group's. */
static PyObject *Tracer_logged_pcs(Tracer *self, PyObject *args) {
    Py_ssize_t wanted, groups;
    long gap;
    Py_buffer of_entry;
    if (!PyArg_ParseTuple(args, "nly*n", &wanted, &gap, &of_entry, &groups)) return NULL;
    if (groups < 0 || of_entry.len % sizeof(int64_t)) {
        PyBuffer_Release(&of_entry);
        PyErr_SetString(PyExc_ValueError, "logged_pcs takes each tally entry's group as int64s, and groups >= 0");
        return NULL;
    }
    const size_t count = wanted < 0 || (size_t)wanted > self->logged ? self->logged : (size_t)wanted;
    const int64_t *group_of_entry = of_entry.buf;
    const size_t entries = (size_t)of_entry.len / sizeof(int64_t);
    int64_t *group_of = PyMem_Malloc((count ? count : 1) * sizeof(int64_t));
    uint32_t *pcs = PyMem_Malloc((count ? count : 1) * sizeof(uint32_t));
    uint32_t *spare = PyMem_Malloc((count ? count : 1) * sizeof(uint32_t));  /* sort_pcs's */
    size_t *first = PyMem_Calloc((size_t)groups + 1, sizeof(size_t));
    PyObject *out = PyList_New(groups);
    if (!group_of || !pcs || !spare || !first || !out) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto error;
    }
    for (size_t i = 0; i < count; i++) {  /* every logged answer was tallied, under its entry */
        const size_t tallied = (size_t)self->log[i].tallied;
        group_of[i] = tallied < entries ? group_of_entry[tallied] : groups;
        if (group_of[i] >= groups || group_of[i] < -1) {
            PyErr_Format(PyExc_ValueError, "logged failure %zu's tally entry %zu has no group of the %zd given", i,
                         tallied, groups);
            goto error;
        }
        if (group_of[i] >= 0) first[group_of[i] + 1]++;
    }
    for (Py_ssize_t g = 0; g < groups; g++) first[g + 1] += first[g];
    for (size_t i = 0; i < count; i++)  /* each group's end, now */
        if (group_of[i] >= 0) pcs[first[group_of[i]]++] = self->log[i].pc;
    for (Py_ssize_t g = 0; g < groups; g++) {
        const size_t begin = g ? first[g - 1] : 0, end = first[g];
        if (begin == end) {
            PyList_SET_ITEM(out, g, Py_NewRef(Py_None));
            continue;
        }
        uint32_t *mine = pcs + begin;
        sort_pcs(mine, spare, end - begin);
        size_t distinct = 1;
        for (size_t i = 1; i < end - begin; i++)
            if (mine[i] != mine[distinct - 1]) mine[distinct++] = mine[i];
        PyObject *item = tuple_taking(NULL, 2, (PyObject *[]){ PyLong_FromSize_t(end - begin),
                                                               ranges_of(mine, distinct, gap) });
        if (!item) goto error;
        PyList_SET_ITEM(out, g, item);
    }
    PyBuffer_Release(&of_entry);
    PyMem_Free(group_of);
    PyMem_Free(pcs);
    PyMem_Free(spare);
    PyMem_Free(first);
    return out;
error:
    PyBuffer_Release(&of_entry);
    PyMem_Free(group_of);
    PyMem_Free(pcs);
    PyMem_Free(spare);
    PyMem_Free(first);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *Tracer_stops(Tracer *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->stops);
}

static PyObject *Tracer_seen(Tracer *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->seen);
}

static PyObject *Tracer_questioned(Tracer *self, PyObject *unused) {
    return PyBytes_FromStringAndSize((const char *)self->questioned, (Py_ssize_t)self->questioned_capacity);
}

static PyObject *Tracer_resumed(Tracer *self, PyObject *unused) {
    (void)unused;
    return PyBytes_FromStringAndSize((const char *)self->resumed, (Py_ssize_t)self->resumed_capacity);
}

/* ShadowStack.interrupted: a signal handler starts, entered with no call;
 * its caller is the context it interrupted (pc, sp, r4-r11, and d8-d15 or
 * None), pushed at the next stop as a call's frame is. */
static PyObject *Tracer_interrupted(Tracer *self, PyObject *args) {
    unsigned long pc, sp;
    PyObject *callee_saved, *vfp;
    if (!PyArg_ParseTuple(args, "kkO!O", &pc, &sp, &PyTuple_Type, &callee_saved, &vfp)) return NULL;
    if (PyTuple_GET_SIZE(callee_saved) != 8 || (vfp != Py_None && (!PyTuple_Check(vfp) || PyTuple_GET_SIZE(vfp) != 8))) {
        PyErr_SetString(PyExc_ValueError, "interrupted: r4-r11 and d8-d15 (or None) as tuples of eight");
        return NULL;
    }
    Expected frame;
    memset(&frame, 0, sizeof frame);
    frame.pc = (uint32_t)pc;
    frame.sp = (uint32_t)sp;
    for (int i = 0; i < 8; i++) {
        frame.r[i] = (uint32_t)PyLong_AsUnsignedLongMask(PyTuple_GET_ITEM(callee_saved, i));
        if (vfp != Py_None) frame.d[i] = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(vfp, i));
    }
    if (PyErr_Occurred()) return NULL;
    frame.state = (self->uses_vfp ? VFP_KNOWN : 0) | SIGNAL_FRAME;
    self->serial++;
    self->s.call_pending = 1;
    self->s.pending_frame = frame;
    self->s.pending_serial = self->serial;
    Py_RETURN_NONE;
}

/* The index of pc among the block's instructions (its count where pc is none of them). */
static int index_in_block(Tracer *t, const BlockInfo *b, uint32_t pc, uint64_t *index) {
    uint32_t at = b->address;
    for (uint64_t i = 0; i < b->count; i++) {
        if (at == pc) { *index = i; return 0; }
        PcInfo *info = decoded(t, at, b->thumb);
        if (!info) return -1;
        at += b->thumb ? (uint32_t)instruction_size(info->first) : 4;
    }
    *index = b->count;
    return 0;
}

/* ThreadStacks.faulted: the program takes a fault's handler (Emulator):
 * the shadow stack as at the fault. `data`: the instruction at pc faulted
 * and did not complete (it counts as run; what followed it in its block
 * did not run); else the fetch at pc faulted, and the branch there
 * completed: followed as at a stop at pc. */
static PyObject *Tracer_faulted(Tracer *self, PyObject *args) {
    unsigned long pc;
    int data;
    if (!PyArg_ParseTuple(args, "kp", &pc, &data)) return NULL;
    ThreadShadow *s = &self->s;
    self->dirty = 1;
    if (!s->depth) Py_RETURN_NONE;  /* before the thread's first stop: nothing to follow */
    if (data) {
        if (self->by_blocks && s->has_ended) {
            uint64_t index;
            if (index_in_block(self, &s->ended, (uint32_t)pc, &index)) return NULL;
            if (index < s->ended.count) {
                const uint64_t unrun = s->ended.count - index - 1;
                self->seen -= unrun;
                self->instructions -= unrun;
            }
            s->has_ended = 0;
        }
        s->call_pending = s->return_pending = 0;
        Py_RETURN_NONE;
    }
    next_bank(self);
    if (complete_registers(self, pc)) return NULL;
    const int failed = self->by_blocks ? enter_block(self, (uint32_t)pc, (uint32_t)self->values[CPSR])
                                       : observe(self, (uint32_t)pc, (uint32_t)self->values[SP]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* ShadowStack per thread (harness.verify.stops): at a system call the
 * processor goes from thread `left` to thread `tid`, whose stack is the
 * Verifier's (stack_top 0) or its own up to stack_top. The running
 * thread's shadow is parked, tid's taken up; a new thread's starts at its
 * first stop. */
static PyObject *Tracer_switch(Tracer *self, PyObject *args) {
    long long left, tid;
    unsigned long stack_top;
    if (!PyArg_ParseTuple(args, "LLk", &left, &tid, &stack_top)) return NULL;
    if (reserve(&self->parked, &self->parked_capacity, self->parked_count + 1, sizeof(ThreadShadow))) return NULL;
    self->s.tid = left;
    self->parked[self->parked_count++] = self->s;
    size_t i = 0;
    while (i < self->parked_count && self->parked[i].tid != tid) i++;
    if (i < self->parked_count) {
        self->s = self->parked[i];
        self->parked[i] = self->parked[--self->parked_count];
    } else {
        memset(&self->s, 0, sizeof self->s);
        self->s.tid = tid;
        self->s.spawned = 1;
    }
    self->s.stack_top = (uint32_t)stack_top;
    for (int state = 0; state < STOP_STATE_COUNT; state++)  /* a spawned thread's stops are labelled with it */
        if (state & IN_SPAWNED_THREAD) ranges_clear(&self->classes[state]);
    self->dirty = 1;
    if (self->verifier) verifier_window(self->verifier, NULL, 0, 0);
    Py_RETURN_NONE;
}

static PyMethodDef Tracer_methods[] = {
    {"resume", (PyCFunction)Tracer_resume, METH_VARARGS, "On from begin after a fault the program's handler takes."},
    {"finish", (PyCFunction)Tracer_finish, METH_NOARGS, "The run is over: let go of what it called."},
    {"set_deadline", (PyCFunction)Tracer_set_deadline, METH_VARARGS,
     "Before the instruction at which the stops seen reach count, call expire()."},
    {"faulted", (PyCFunction)Tracer_faulted, METH_VARARGS,
     "The program takes a fault's handler: the shadow stack as at the fault (data: the instruction at pc faulted)."},
    {"switch", (PyCFunction)Tracer_switch, METH_VARARGS,
     "At a system call the processor goes from thread left to thread tid (its stack's top, 0: the process's)."},
    {"run", (PyCFunction)Tracer_run, METH_VARARGS, "Run the engine from begin to until, verifying every stop."},
    {"interrupted", (PyCFunction)Tracer_interrupted, METH_VARARGS,
     "A signal handler starts: the context it interrupted is its caller's frame."},
    {"causes", (PyCFunction)Tracer_causes, METH_VARARGS,
     "The first failing answer of each cause, by cause id (most as their causes, given their parts)."},
    {"tally", (PyCFunction)Tracer_tally, METH_NOARGS, "Failing stops per (where id, cause id)."},
    {"failure_log", (PyCFunction)Tracer_failure_log, METH_VARARGS, "Every failing answer, merged with others."},
    {"logged_pcs", (PyCFunction)Tracer_logged_pcs, METH_VARARGS,
     "The failures logged and the ranges of their pcs, by the group of their tally entry."},
    {"log_split", (PyCFunction)Tracer_log_split, METH_VARARGS,
     "How many entries of the log and of others the first total of their merge hold."},
    {"resumed", (PyCFunction)Tracer_resumed, METH_NOARGS, "The frames that resumed, a bit per serial (bytes)."},
    {"questioned", (PyCFunction)Tracer_questioned, METH_NOARGS,
     "Without resumes: the frames a walk found a wrong register of, a bit per serial (bytes)."},
    {NULL}
};

static PyGetSetDef Tracer_getset[] = {
    {"stops", (getter)Tracer_stops, NULL, "Stops verified.", NULL},
    {"seen", (getter)Tracer_seen, NULL, "Stops run past, verified or not: the instructions run, "
                                        "those an IT block skips included.", NULL},
    {NULL}
};

PyTypeObject TracerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "harness.verify._kernel.Tracer",
    .tp_basicsize = sizeof(Tracer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Tracer_traverse,
    .tp_clear = (inquiry)Tracer_clear,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tracer_init,
    .tp_dealloc = (destructor)Tracer_dealloc,
    .tp_methods = Tracer_methods,
    .tp_getset = Tracer_getset,
    .tp_doc = "The shadow stack and every unwinder's walk before every instruction, in a compiled hook.",
};
