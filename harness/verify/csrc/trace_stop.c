/* One stop: its class and where (asked of Python's `classify` once per span
 * of pcs alike), every unwinder walked by the Verifier, the passes counted,
 * each failing answer grouped by cause, tallied and (up to log_cap) logged,
 * and `slow` called where a walk defers or the stop is observed. Which
 * stops are verified: every one of this shard's, or seeded samples.
 */
#include "trace.h"

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

/* Is pc in a quiet range? (ends are sorted: pc lies in one when the first
 * end above pc is a range's high end) */
static int quiet_at(const Tracer *t, uint32_t pc) {
    return lower_bound(t->quiet, 2 * t->quiet_count, pc + 1) % 2 == 1;
}

static int observed_at(const Tracer *t, uint32_t pc) {
    return t->observe_all && (!t->observed_count || sorted_holds(t->observed, t->observed_count, pc));
}

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

PyObject *SlowStopType;

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
    /* an abi.SlowStop, its fields in their order */
    PyObject *stop = PyObject_CallFunction(SlowStopType, "KkOIOOOOiL", (unsigned long long)number,
                                           (unsigned long)pc, regs, (unsigned int)cpsr, vfp, which, shadow, serials,
                                           stop_state(t), (long long)thread_label(t));
    if (!stop) goto done;
    result = PyObject_CallOneArg(t->slow, stop);
    Py_DECREF(stop);
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

#define MAX_THREAD_WINDOW (256u << 20)  /* bytes of a thread's stack copied for a stop: more is not a stack */

/* The running thread's own stack as the Verifier reads it: [sp, its top) as
 * it is now, read from the engine (none where sp is not below the top: no
 * walk reads there then). Where that span is larger than a stack or not all
 * mapped (a handler on an alternate signal stack far below the thread's),
 * `window_missing`: the stop's walks are deferred to Python, whose stack
 * reads what is mapped of it (harness.emulation.livestack). */
static int thread_window(Tracer *t, uint32_t sp) {
    static const uint8_t nothing = 0;
    const uint32_t top = t->s.stack_top;
    size_t size = sp < top ? top - sp : 0;
    t->window_missing = size > MAX_THREAD_WINDOW;
    if (t->window_missing) size = 0;
    if (size && reserve(&t->window, &t->window_capacity, size, 1)) return -1;
    if (size && t->engine.mem_read(t->engine.handle, sp, t->window, size)) {
        size = 0;
        t->window_missing = 1;
    }
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
        t->window_missing = 0;
        if (t->s.stack_top && thread_window(t, (uint32_t)t->values[SP])) return -1;
        if (t->window_missing) {
            for (Py_ssize_t i = 0; i < unwinders; i++) deferred[deferrals++] = i;
            return call_slow(t, number, pc, cpsr, deferred, deferrals);
        }
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

/* splitmix64: a stride of mean `every`, in [1, 2 every - 1]. */
uint64_t next_stride(Tracer *t) {
    uint64_t z = (t->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return 1 + z % (2 * t->every - 1);
}

/* The sampled stop at stop number `seen`, at pc: verified when it is this shard's. */
int take_sample(Tracer *t, uint32_t pc, uint32_t cpsr) {
    const uint64_t number = t->next_sample, sample = t->samples++;
    t->next_sample += next_stride(t);
    if (sample % t->shard_count != t->shard_index) return 0;
    if (complete_registers(t, pc)) return -1;
    t->dirty = 1;  /* block hooks see no instruction apart: any may have stored */
    return verify_at(t, number, pc, cpsr);
}

/* The stop before the instruction at pc, in a run that stops at every
 * instruction: verified if it is this shard's, and with every > 1 a sample
 * (harness.verify.sampling). */
int check(Tracer *t, uint32_t pc, uint32_t cpsr) {
    uint64_t number = t->seen++;
    if (t->every == 1) return number % t->shard_count == t->shard_index ? verify_at(t, number, pc, cpsr) : 0;
    return number == t->next_sample ? take_sample(t, pc, cpsr) : 0;
}
