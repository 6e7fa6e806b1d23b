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
 * Guards end a runaway run (trace_hooks.c). At most log_cap failing answers
 * are logged one by one; every one is tallied. trace.h says which file
 * holds which part; this one holds the type.
 */
#include "trace.h"

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

/* A Tracer's settings (harness/verify/abi.py's TraceSettings), each field
 * read by its name. */
typedef struct {
    PyObject *held[TRACE_FIELDS];  /* the record's fields, new references; the objects below are among them */
    PyObject *engine, *verifier, *classify, *slow, *raises, *quiet, *resumes, *observed;
    unsigned long sentinel;
    int uses_vfp, observe_all, compare_bottom, by_blocks;
    unsigned long long every, shard_index, shard_count;
} Settings;

static const char *const SETTING_NAMES[TRACE_FIELDS] = { TRACE_FIELD_NAMES };

static void settings_release(Settings *s) {
    for (int i = 0; i < TRACE_FIELDS; i++) Py_XDECREF(s->held[i]);
}

/* A tuple field of the settings, or NULL with TypeError. */
static PyObject *tuple_field(PyObject **held, int field) {
    if (PyTuple_Check(held[field])) return held[field];
    PyErr_Format(PyExc_TypeError, "a Tracer's settings: %s must be a tuple", SETTING_NAMES[field]);
    return NULL;
}

/* Read `record`'s fields by name into *s (released by the caller, read or not); -1 with an exception. */
static int settings_of(PyObject *record, Settings *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < TRACE_FIELDS; i++)
        if (!(s->held[i] = PyObject_GetAttrString(record, SETTING_NAMES[i]))) return -1;
    PyObject **held = s->held;
    if (!(s->engine = tuple_field(held, TRACE_ENGINE)) || !(s->raises = tuple_field(held, TRACE_RAISES)) ||
        !(s->quiet = tuple_field(held, TRACE_QUIET)) || !(s->observed = tuple_field(held, TRACE_OBSERVED)) ||
        !tuple_field(held, TRACE_SHARD) ||
        !PyArg_ParseTuple(held[TRACE_SHARD], "KK;shard is (index, count)", &s->shard_index, &s->shard_count))
        return -1;
    s->verifier = held[TRACE_VERIFIER];
    s->classify = held[TRACE_CLASSIFY];
    s->slow = held[TRACE_SLOW];
    s->resumes = held[TRACE_RESUMES];
    s->sentinel = PyLong_AsUnsignedLongMask(held[TRACE_SENTINEL]);
    s->every = PyLong_AsUnsignedLongLongMask(held[TRACE_EVERY]);
    if (PyErr_Occurred()) return -1;
    s->uses_vfp = PyObject_IsTrue(held[TRACE_USES_VFP]);
    s->observe_all = PyObject_IsTrue(held[TRACE_OBSERVE_ALL]);
    s->compare_bottom = PyObject_IsTrue(held[TRACE_COMPARE_BOTTOM]);
    s->by_blocks = PyObject_IsTrue(held[TRACE_BY_BLOCKS]);
    return s->uses_vfp < 0 || s->observe_all < 0 || s->compare_bottom < 0 || s->by_blocks < 0 ? -1 : 0;
}

/* The engine of the settings: harness/verify/abi.py's Engine, its items by the ENGINE_* indices. */
static int engine_of(const Settings *s, Engine *e) {
    PyObject *engine = s->engine;
    if (PyTuple_GET_SIZE(engine) != ENGINE_FIELDS) {
        PyErr_Format(PyExc_ValueError, "engine must hold %d items", ENGINE_FIELDS);
        return -1;
    }
    memset(e, 0, sizeof *e);
    if (address_of(engine, ENGINE_HANDLE, &e->handle) ||
        address_of(engine, ENGINE_REG_READ_BATCH, (void **)&e->reg_read_batch) ||
        address_of(engine, ENGINE_MEM_READ, (void **)&e->mem_read) ||
        address_of(engine, ENGINE_EMU_START, (void **)&e->emu_start) ||
        address_of(engine, ENGINE_EMU_STOP, (void **)&e->emu_stop) ||
        address_of(engine, ENGINE_HOOK_ADD, (void **)&e->hook_add) ||
        address_of(engine, ENGINE_HOOK_DEL, (void **)&e->hook_del) ||
        address_of(engine, ENGINE_CTL, (void **)&e->ctl))
        return -1;
    e->hook_code = (int)PyLong_AsLong(PyTuple_GET_ITEM(engine, ENGINE_HOOK_CODE));
    e->hook_block = (int)PyLong_AsLong(PyTuple_GET_ITEM(engine, ENGINE_HOOK_BLOCK));
    e->remove_cache = (int)PyLong_AsLong(PyTuple_GET_ITEM(engine, ENGINE_REMOVE_CACHE));
    PyObject *ids = PySequence_Fast(PyTuple_GET_ITEM(engine, ENGINE_REGISTERS), "register ids must be a sequence");
    if (!ids) return -1;
    e->count = (int)PySequence_Fast_GET_SIZE(ids);
    if (e->count != (s->uses_vfp ? MAX_REGISTERS : FIRST_VFP)) {
        PyErr_Format(PyExc_ValueError, "expected %d register ids, got %d", s->uses_vfp ? MAX_REGISTERS : FIRST_VFP,
                     e->count);
        Py_DECREF(ids);
        return -1;
    }
    for (int i = 0; i < e->count; i++) e->ids[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(ids, i));
    Py_DECREF(ids);
    return PyErr_Occurred() ? -1 : 0;
}

/* The tracer set up from its settings (see TraceSettings). */
static int set_up(Tracer *self, const Settings *s) {
    if (s->resumes != Py_None) {
        if (PyObject_GetBuffer(s->resumes, &self->resumes, PyBUF_SIMPLE)) return -1;
        self->has_resumes = 1;
    }
    if (s->verifier != Py_None && !PyObject_TypeCheck(s->verifier, &VerifierType)) {
        PyErr_SetString(PyExc_TypeError, "verifier must be a Verifier or None");
        return -1;
    }
    if (!PyCallable_Check(s->classify) || !PyCallable_Check(s->slow)) {
        PyErr_SetString(PyExc_TypeError, "classify and slow must be callable");
        return -1;
    }
    if (!s->every || !s->shard_count || s->shard_index >= s->shard_count) {
        PyErr_SetString(PyExc_ValueError, "every must be positive, and shard an index below a positive count");
        return -1;
    }
    Engine e;
    if (engine_of(s, &e)) return -1;
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
    self->verifier = s->verifier == Py_None ? NULL : (Verifier *)Py_NewRef(s->verifier);
    self->last_causes = PyMem_Calloc(self->verifier ? verifier_unwinders(self->verifier) + 1 : 1, sizeof(LastCause));
    if (!self->last_causes) { PyErr_NoMemory(); return -1; }
    self->sentinel = (uint32_t)s->sentinel;
    self->uses_vfp = s->uses_vfp;
    self->every = s->every;
    self->by_blocks = s->by_blocks;
    self->shard_index = s->shard_index;
    self->shard_count = s->shard_count;
    self->classify = Py_NewRef(s->classify);
    self->slow = Py_NewRef(s->slow);
    self->observe_all = s->observe_all;
    self->compare_bottom = s->compare_bottom;
    self->causes.key_size = sizeof(CauseKey);
    self->tally.key_size = sizeof(TallyKey);
    if (sorted_pcs(s->raises, "raises", &self->raises, &self->raise_count) ||
        sorted_pcs(s->observed, "observed", &self->observed, &self->observed_count))
        return -1;
    return quiet_ranges(self, s->quiet);
}

/* Tracer(settings): `settings` a harness/verify/abi.py TraceSettings (any
 * object with its fields' names). */
static int Tracer_init(Tracer *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"settings", NULL};
    PyObject *record;
    if (self->engine.handle) {
        PyErr_SetString(PyExc_TypeError, "a Tracer is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", names, &record)) return -1;
    Settings settings;
    const int failed = settings_of(record, &settings) || set_up(self, &settings);
    settings_release(&settings);
    return failed ? -1 : 0;
}

/* run(begin, until, limits, log_cap=FAILURE_LOG_CAP) -> (engine status,
 * guard, pc): limits is harness/verify/abi.py's Limits (instructions,
 * seconds, memory_bytes, depth); guard the GUARD_* that ended the run at pc
 * (GUARD_NONE and 0: none did). Raises what a callback raised. */
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

/* set_memory(bytes): the resident size the run may reach from now on (a
 * process mapped a file: harness.emulation.guards.memory_ceiling). */
static PyObject *Tracer_set_memory(Tracer *self, PyObject *arg) {
    const unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
    if (bytes == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    self->max_memory = bytes;
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

static PyMethodDef Tracer_methods[] = {
    {"resume", (PyCFunction)Tracer_resume, METH_VARARGS, "On from begin after a fault the program's handler takes."},
    {"finish", (PyCFunction)Tracer_finish, METH_NOARGS, "The run is over: let go of what it called."},
    {"set_memory", (PyCFunction)Tracer_set_memory, METH_O,
     "set_memory(bytes): the resident size past which the run ends (GUARD_MEMORY) from now on."},
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
