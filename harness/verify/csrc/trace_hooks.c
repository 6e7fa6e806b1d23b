/* The engine's hooks: before every instruction (on_code) or, in a sampled
 * run, at every translation block's entry (on_block); each reads the
 * registers, follows the shadow stack and verifies the stops due. Guards
 * end a runaway run (harness.verify.abi.Limits, GUARD_*), as the Python
 * hook's do: more instructions than the budget; a stop at the pc of the
 * stop before with every register read unchanged (an endless loop); more
 * shadow frames than the limit; and, every CHECK_EVERY instructions, the
 * wall clock and the process's resident size.
 */
#include "trace.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

static void halt(Tracer *t) {
    t->halted = 1;
    t->engine.emu_stop(t->engine.handle);
}

/* A hook called after the run halted: the engine lost the stop request (a
 * store into a page of translated code invalidates the block that runs and
 * restarts it, csmith seed 81's clang -O2 build ran 50 minutes past its
 * budget so), so it is asked again, each time, until it stops. */
static void halted_yet_running(Tracer *t) {
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
    if (t->halted) {
        halted_yet_running(t);
        return;
    }
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

/* Sampled runs. With every > 1 the run stops at seeded random strides of mean `every`
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
    if (t->halted) {
        halted_yet_running(t);
        return;
    }
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

/* The engine from `begin` to `until` under the tracer's hook: (engine
 * status, guard, pc), or NULL with what a callback raised. */
PyObject *run_engine(Tracer *self, uint64_t begin, uint64_t until) {
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
