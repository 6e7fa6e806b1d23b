/* The shadow stack, one a thread (harness.verify.groundtruth: ShadowStack
 * and SkippedStops, the definitions this mirrors): the calls, returns and
 * non-local exits followed before every instruction or at every block
 * entry, the instructions an IT block passes over, and what Python tells
 * it of faults the program takes, signal handlers and thread switches.
 */
#include "trace.h"

void frame_of(Expected *e, uint32_t pc, const uint64_t *v, int uses_vfp) {
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

int set_bit(uint8_t **bits, size_t *capacity, uint64_t serial) {
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
int push_bottom(Tracer *t) {
    Expected bottom;
    frame_of(&bottom, t->sentinel, t->values, t->uses_vfp);
    if (t->s.tid >= 0) t->serial++;
    return push(t, &bottom, t->serial);
}

static void drop_top(Tracer *t) {
    t->s.depth--;
    if (t->s.frames[t->s.depth].state & SIGNAL_FRAME) t->s.signal_frames--;
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

static int raises_at(const Tracer *t, uint32_t pc) {
    return sorted_holds(t->raises, t->raise_count, pc);
}

/* ShadowStack.observe: account for the instruction that ran since the last
 * stop, and for an exception in flight. */
int observe(Tracer *t, uint32_t pc, uint32_t sp) {
    if (follow(t, pc, sp)) return -1;
    if (t->s.flight && t->s.depth < t->s.flight) t->s.flight = 0;
    if (!t->s.flight && t->raise_count && raises_at(t, pc)) t->s.flight = t->s.depth;
    return 0;
}

/* SkippedStops.at: whether pc is one of the own instructions of the IT
 * block being followed (*skipped: those passed over before it). */
int it_position(const Tracer *t, uint32_t pc, int *skipped) {
    *skipped = 0;
    for (int k = 0; k < t->s.it_count; k++) {
        if (t->s.it_pending[k].address == pc) { *skipped = k; return 1; }
    }
    if (t->s.it_count && pc == t->s.it_end) *skipped = t->s.it_count;
    return 0;
}

/* SkippedStops.passed_over: the block's instructions passed over before pc. */
int passed_over(Tracer *t, uint32_t pc, SkippedStop *skipped) {
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
int entered(Tracer *t, uint32_t pc, uint16_t it_instruction, int block) {
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

/* ShadowStack's view at a block's entry: the call or return the block
 * before ended with (a call frame holds what the registers hold now, but
 * pc: its return address), then the stop's own follow (observe). */
int enter_block(Tracer *t, uint32_t pc, uint32_t cpsr) {
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

/* ShadowStack.interrupted: a signal handler starts, entered with no call;
 * its caller is the context it interrupted (pc, sp, r4-r11, and d8-d15 or
 * None), pushed at the next stop as a call's frame is. */
PyObject *Tracer_interrupted(Tracer *self, PyObject *args) {
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

/* ThreadStacks.faulted: the program takes a fault's handler (Emulator):
 * the shadow stack as at the fault. `data`: the instruction at pc faulted
 * and did not complete (it counts as run; what followed it in its block
 * did not run); else the fetch at pc faulted, and the branch there
 * completed: followed as at a stop at pc. */
PyObject *Tracer_faulted(Tracer *self, PyObject *args) {
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
PyObject *Tracer_switch(Tracer *self, PyObject *args) {
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
