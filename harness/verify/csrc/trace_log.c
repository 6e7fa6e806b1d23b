/* After the run: its causes (most made here as Python would make them), its
 * tally, its failure log merged with the walks Python made, and the
 * logged pcs of each of a digest's groups, as ranges.
 */
#include "trace.h"

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
PyObject *Tracer_causes(Tracer *self, PyObject *args) {
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
PyObject *Tracer_tally(Tracer *self, PyObject *unused) {
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
PyObject *Tracer_failure_log(Tracer *self, PyObject *args) {
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
PyObject *Tracer_log_split(Tracer *self, PyObject *args) {
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
PyObject *Tracer_logged_pcs(Tracer *self, PyObject *args) {
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
