/* The module harness.verify._kernel: the types of rules.c and trace.c, four twins of Python's, and
 * trace.c's store classes (for tests). */
#include "kernel.h"

/* may_start_epilogue(code: bytes) -> bool: sources.c's twin of harness.thumb.encoding's. */
static PyObject *kernel_may_start_epilogue(PyObject *module, PyObject *code) {
    Py_buffer view;
    if (PyObject_GetBuffer(code, &view, PyBUF_SIMPLE)) return NULL;
    const int may = may_start_epilogue(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(may);
}

/* may_store(first, second) -> bool: trace_pcs.c's thumb_may_store, for tests to hold to a disassembler. */
static PyObject *kernel_may_store(PyObject *module, PyObject *args) {
    unsigned int first, second;
    if (!PyArg_ParseTuple(args, "II:may_store", &first, &second)) return NULL;
    if (first > 0xFFFF || second > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "half-words are 16-bit");
        return NULL;
    }
    return PyBool_FromLong(thumb_may_store((uint16_t)first, (uint16_t)second));
}

/* The part of a key at `id` of `parts`, borrowed; NULL with IndexError past its end. */
static PyObject *part_at(PyObject *parts, Py_ssize_t id, const char *what) {
    if (id < 0 || id >= PyList_GET_SIZE(parts)) {
        PyErr_Format(PyExc_IndexError, "a tally entry's %s id %zd is past the %zd %ss given", what, id,
                     PyList_GET_SIZE(parts), what);
        return NULL;
    }
    return PyList_GET_ITEM(parts, id);
}

/* heads[cause] + middles[where] + tails[cause] (lists of tuples or None), the key of a tally entry
 * (harness.verify.tally.KeyParts): a new reference, Py_None where its head or middle is None, NULL with
 * IndexError or TypeError for an id past its list or a part that is no tuple. */
static PyObject *key_of_parts(PyObject *heads, PyObject *middles, PyObject *tails, Py_ssize_t where,
                              Py_ssize_t cause) {
    PyObject *parts[3] = { part_at(heads, cause, "cause"), part_at(middles, where, "where"),
                           part_at(tails, cause, "cause") };
    if (!parts[0] || !parts[1] || !parts[2]) return NULL;
    if (parts[0] == Py_None || parts[1] == Py_None) return Py_NewRef(Py_None);
    Py_ssize_t size = 0;
    for (int p = 0; p < 3; p++) {
        if (!PyTuple_Check(parts[p])) {
            PyErr_SetString(PyExc_TypeError, "a key's parts must be tuples (or None)");
            return NULL;
        }
        size += PyTuple_GET_SIZE(parts[p]);
    }
    PyObject *key = PyTuple_New(size);
    for (Py_ssize_t p = 0, at = 0; key && p < 3; p++)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts[p]); i++)
            PyTuple_SET_ITEM(key, at++, Py_NewRef(PyTuple_GET_ITEM(parts[p], i)));
    if (key) untrack_if_flat(key);
    return key;
}

/* A dict's item under a key hashed once for a lookup and the store that may follow (*hash: the key's
 * hash, for dict_store): a new tuple key does not keep its hash, and a lookup then a store rehashed it
 * (about a seventh of sum_by's instructions). Borrowed, or NULL (an error set where one occurred). */
static PyObject *dict_lookup(PyObject *dict, PyObject *key, Py_hash_t *hash) {
    if ((*hash = PyObject_Hash(key)) == -1) return NULL;
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_GetItem_KnownHash(dict, key, *hash);
#else
    return PyDict_GetItemWithError(dict, key);
#endif
}
static int dict_store(PyObject *dict, PyObject *key, PyObject *value, Py_hash_t hash) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_SetItem_KnownHash(dict, key, value, hash);
#else
    (void)hash;
    return PyDict_SetItem(dict, key, value);
#endif
}

/* sums[key] += count (a new key starts at count); -1 with an exception. */
static int add_count(PyObject *sums, PyObject *key, PyObject *count) {
    Py_hash_t hash;
    PyObject *held = dict_lookup(sums, key, &hash);
    PyObject *sum = held ? PyNumber_Add(held, count) : PyErr_Occurred() ? NULL : Py_NewRef(count);
    const int failed = !sum || dict_store(sums, key, sum, hash);
    Py_XDECREF(sum);
    return failed ? -1 : 0;
}

/* d[key], made by `make` where there is none yet: borrowed, or NULL with an exception. */
static PyObject *item_in(PyObject *d, PyObject *key, PyObject *(*make)(void)) {
    PyObject *inner = PyDict_GetItemWithError(d, key);
    if (inner || PyErr_Occurred()) return inner;
    if (!(inner = make())) return NULL;
    const int failed = PyDict_SetItem(d, key, inner);
    Py_DECREF(inner);
    return failed ? NULL : inner;
}

/* Tally entry n (where id, cause id, walks), unpacked by hand (PyArg_ParseTuple cost a third): 0, or -1 with
 * an exception. */
static int entry_at(PyObject *entries, Py_ssize_t n, Py_ssize_t *where, Py_ssize_t *cause, PyObject **walks) {
    PyObject *entry = PyList_GET_ITEM(entries, n);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
        PyErr_SetString(PyExc_TypeError, "a tally entry must be a tuple (where id, cause id, walks)");
        return -1;
    }
    *where = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
    *cause = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
    *walks = PyTuple_GET_ITEM(entry, 2);
    return (*where == -1 || *cause == -1) && PyErr_Occurred() ? -1 : 0;
}

/* sum_by(target, entries, heads, middles, tails) -> target: harness.verify.tally.sum_by's twin, each
 * entry (where id, cause id, walks) added to target[key_of_parts(...)], but for entries without a key
 * (lists of tuples or None; entries a list of tuples of ints). */
static PyObject *kernel_sum_by(PyObject *module, PyObject *args) {
    PyObject *target, *entries, *heads, *middles, *tails, *walks;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:sum_by", &PyDict_Type, &target, &PyList_Type, &entries, &PyList_Type,
                          &heads, &PyList_Type, &middles, &PyList_Type, &tails))
        return NULL;
    for (Py_ssize_t n = 0; n < PyList_GET_SIZE(entries); n++) {
        Py_ssize_t where, cause;
        if (entry_at(entries, n, &where, &cause, &walks)) return NULL;
        PyObject *key = key_of_parts(heads, middles, tails, where, cause);
        if (!key) return NULL;
        if (key == Py_None) { Py_DECREF(key); continue; }
        const int failed = add_count(target, key, walks);
        Py_DECREF(key);
        if (failed) return NULL;
    }
    return Py_NewRef(target);
}

/* The group of key `key` in `numbers` (key -> group, `keys` by group), numbered now where it is new; -1 on error. */
static Py_ssize_t group_of(PyObject *numbers, PyObject *keys, PyObject *key) {
    Py_hash_t hash;
    PyObject *number = dict_lookup(numbers, key, &hash);
    if (number) return PyLong_AsSsize_t(number);
    if (PyErr_Occurred()) return -1;
    const Py_ssize_t group = PyList_GET_SIZE(keys);
    number = PyLong_FromSsize_t(group);
    const int failed = !number || dict_store(numbers, key, number, hash) || PyList_Append(keys, key);
    Py_XDECREF(number);
    return failed ? -1 : group;
}

/* group_by(entries, heads, middles, tails) -> (keys, walks, of_entry): harness.verify.tally.group_by's twin
 * (see there), the walks of a group added up as int64s. */
static PyObject *kernel_group_by(PyObject *module, PyObject *args) {
    PyObject *entries, *heads, *middles, *tails, *walks;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:group_by", &PyList_Type, &entries, &PyList_Type, &heads, &PyList_Type,
                          &middles, &PyList_Type, &tails))
        return NULL;
    const Py_ssize_t count = PyList_GET_SIZE(entries);
    PyObject *numbers = _PyDict_NewPresized(count), *keys = PyList_New(0), *sums = NULL, *out = NULL;
    PyObject *of_entry = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    int64_t *walked = PyMem_Calloc((size_t)count + 1, sizeof(int64_t));
    if (!numbers || !keys || !of_entry || !walked) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    int64_t *group = (int64_t *)PyBytes_AS_STRING(of_entry);
    for (Py_ssize_t n = 0; n < count; n++) {
        Py_ssize_t where, cause;
        if (entry_at(entries, n, &where, &cause, &walks)) goto done;
        const long long adding = PyLong_AsLongLong(walks);
        PyObject *key = adding == -1 && PyErr_Occurred() ? NULL : key_of_parts(heads, middles, tails, where, cause);
        if (!key) goto done;
        group[n] = key == Py_None ? -1 : group_of(numbers, keys, key);
        Py_DECREF(key);
        if (group[n] >= 0) walked[group[n]] += adding;
        else if (PyErr_Occurred()) goto done;
    }
    if (!(sums = PyList_New(PyList_GET_SIZE(keys)))) goto done;
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(keys); g++) {
        PyObject *sum = PyLong_FromLongLong(walked[g]);
        if (!sum) goto done;
        PyList_SET_ITEM(sums, g, sum);
    }
    out = PyTuple_Pack(3, keys, sums, of_entry);
done:
    PyMem_Free(walked);
    Py_XDECREF(numbers);
    Py_XDECREF(keys);
    Py_XDECREF(sums);
    Py_XDECREF(of_entry);
    return out;
}

/* epilogue_plan(code, address, functions) -> (steps, packed rule), False (declines) or None (Python's to
 * plan): epilogue.c's plan of the epilogue the bytes at `address` start with; `functions` as
 * EpilogueSimulator.functions (functions_of). */
static PyObject *kernel_epilogue_plan(PyObject *module, PyObject *args) {
    Py_buffer code, starts;
    long long address;
    PyObject *functions;
    FunctionStarts found;
    if (!PyArg_ParseTuple(args, "y*LO:epilogue_plan", &code, &address, &functions)) return NULL;
    const int given = functions_of(functions, &starts, &found);
    PyObject *plan = given < 0 ? NULL : epilogue_plan_object(code.buf, code.len, address, given ? &found : NULL);
    if (given > 0) PyBuffer_Release(&starts);
    PyBuffer_Release(&code);
    return plan;
}

/* ------------------------------------------------------------ a summary's blame */

/* A FailureCause's fields (harness.verify.failures), by position. */
enum { CAUSE_UNWINDER = 0, CAUSE_FRAME = 2, CAUSE_REGISTER = 4, CAUSE_TRAITS = 6, CAUSE_FIELDS = 7 };

/* An unwinder's blame as it starts: [stops whose innermost frame went wrong, stops where a caller did,
 * {trait: stops}]. */
static PyObject *new_blame(void) { return Py_BuildValue("[iiN]", 0, 0, PyDict_New()); }

/* Add `stops` to a list item (an int). */
static int add_to_item(PyObject *list, Py_ssize_t at, PyObject *stops) {
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, at), stops);
    return sum ? PyList_SetItem(list, at, sum) : -1;
}

/* A cause's stops, where it has any, to its unwinder's counts in `registers` and `blamed`. */
static int blame_cause(PyObject *registers, PyObject *blamed, PyObject *cause, PyObject *stops) {
    if (!PyTuple_Check(cause) || PyTuple_GET_SIZE(cause) < CAUSE_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "a cause must be a FailureCause");
        return -1;
    }
    PyObject *unwinder = PyTuple_GET_ITEM(cause, CAUSE_UNWINDER), *reg = PyTuple_GET_ITEM(cause, CAUSE_REGISTER);
    const int named = PyObject_IsTrue(reg);
    if (named < 0) return -1;
    PyObject *counts = named ? item_in(registers, unwinder, PyDict_New) : NULL;
    if (named && (!counts || add_count(counts, reg, stops))) return -1;
    PyObject *blame = item_in(blamed, unwinder, new_blame);
    if (!blame) return -1;
    const Py_ssize_t frame = PyLong_AsSsize_t(PyTuple_GET_ITEM(cause, CAUSE_FRAME));
    if ((frame == -1 && PyErr_Occurred()) || add_to_item(blame, frame == 0 ? 0 : 1, stops)) return -1;
    PyObject *traits = PyList_GET_ITEM(blame, 2), *iterator = PyObject_GetIter(PyTuple_GET_ITEM(cause, CAUSE_TRAITS));
    if (!iterator) return -1;
    PyObject *trait;
    while ((trait = PyIter_Next(iterator))) {
        const int failed = add_count(traits, trait, stops);
        Py_DECREF(trait);
        if (failed) break;
    }
    Py_DECREF(iterator);
    return PyErr_Occurred() ? -1 : 0;
}

/* blame(entries, causes) -> (registers, blamed): the twin of harness.report.summary.blame (see there). */
static PyObject *kernel_blame(PyObject *module, PyObject *args) {
    PyObject *entries, *causes;
    if (!PyArg_ParseTuple(args, "O!O!:blame", &PyList_Type, &entries, &PyList_Type, &causes)) return NULL;
    const Py_ssize_t count = PyList_GET_SIZE(causes);
    PyObject **stops_of = PyMem_Calloc((size_t)count + 1, sizeof(PyObject *));
    PyObject *registers = PyDict_New(), *blamed = PyDict_New(), *out = NULL;
    if (!stops_of || !registers || !blamed) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t n = 0; n < PyList_GET_SIZE(entries); n++) {
        Py_ssize_t where, cause;
        PyObject *walks;
        if (entry_at(entries, n, &where, &cause, &walks)) goto done;
        if (cause < 0 || cause >= count) {
            PyErr_Format(PyExc_IndexError, "cause id %zd past the tally's %zd causes", cause, count);
            goto done;
        }
        PyObject *sum = stops_of[cause] ? PyNumber_Add(stops_of[cause], walks) : Py_NewRef(walks);
        if (!sum) goto done;
        Py_XSETREF(stops_of[cause], sum);
    }
    for (Py_ssize_t cause = 0; cause < count; cause++) {
        const int any = stops_of[cause] ? PyObject_IsTrue(stops_of[cause]) : 0;
        if (any < 0 || (any && blame_cause(registers, blamed, PyList_GET_ITEM(causes, cause), stops_of[cause])))
            goto done;
    }
    out = PyTuple_Pack(2, registers, blamed);
done:
    for (Py_ssize_t cause = 0; stops_of && cause < count; cause++) Py_XDECREF(stops_of[cause]);
    PyMem_Free(stops_of);
    Py_XDECREF(registers);
    Py_XDECREF(blamed);
    return out;
}

/* ------------------------------------------------------------ a digest's groups */

/* An unwinder's failing walks in a digest, and those logged (`logged`: any was). */
typedef struct {
    PyObject *name;  /* borrowed: the groups' keys hold it */
    long long total, counted;
    int logged;
    PyObject *groups;  /* its (rest of key) -> Group, once made */
} DigestUnwinder;

/* The place of unwinder `name` in `u` (`*count` of them so far), added where new; -1 on error. A run has some
 * fourteen, mostly the same object for each group: compared by identity first. */
static Py_ssize_t unwinder_at(DigestUnwinder *u, Py_ssize_t *count, PyObject *name) {
    for (Py_ssize_t i = 0; i < *count; i++)
        if (u[i].name == name) return i;
    for (Py_ssize_t i = 0; i < *count; i++) {
        const int equal = PyObject_RichCompareBool(u[i].name, name, Py_EQ);
        if (equal) return equal < 0 ? -1 : i;
    }
    u[*count] = (DigestUnwinder){ name, 0, 0, 0, NULL };
    return (*count)++;
}

/* Each group's unwinder in `of_group`, its walks and those logged added up in `u`; -1 on error. */
static int tally_unwinders(PyObject *keys, PyObject *walks, PyObject *logged, DigestUnwinder *u, Py_ssize_t *count,
                           Py_ssize_t *of_group) {
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(keys); g++) {
        PyObject *key = PyList_GET_ITEM(keys, g), *found = PyList_GET_ITEM(logged, g);
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) < 1) {
            PyErr_SetString(PyExc_TypeError, "a digest's group is a tuple (unwinder, ...)");
            return -1;
        }
        if (found != Py_None && (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 2)) {
            PyErr_SetString(PyExc_TypeError, "a group's logged pcs are (failures logged, ranges) or None");
            return -1;
        }
        const Py_ssize_t at = of_group[g] = unwinder_at(u, count, PyTuple_GET_ITEM(key, 0));
        if (at < 0) return -1;
        u[at].total += PyLong_AsLongLong(PyList_GET_ITEM(walks, g));
        if (found != Py_None) {
            u[at].counted += PyLong_AsLongLong(PyTuple_GET_ITEM(found, 0));
            u[at].logged = 1;
        }
        if (PyErr_Occurred()) return -1;
    }
    return 0;
}

/* digest_groups(keys, walks, logged, cap, Group) -> {unwinder: {rest of key: Group}}: the twin of
 * harness.report.failing.digest_groups (see there); in Python its loops over a run's hundreds of
 * groups were a fifth of its summary. */
static PyObject *kernel_digest_groups(PyObject *module, PyObject *args) {
    PyObject *keys, *walks, *logged;
    Py_ssize_t cap, unwinders = 0;
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!:digest_groups", &PyList_Type, &keys, &PyList_Type, &walks, &PyList_Type,
                          &logged, &cap, &PyType_Type, &type))
        return NULL;
    if (!PyType_IsSubtype(type, &PyTuple_Type))
        return PyErr_Format(PyExc_TypeError, "digest_groups makes its groups of a tuple type");
    const Py_ssize_t groups = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(walks) != groups || PyList_GET_SIZE(logged) != groups)
        return PyErr_Format(PyExc_ValueError, "digest_groups takes walks and logged pcs for each of %zd groups",
                            groups);
    DigestUnwinder *u = PyMem_Calloc((size_t)groups + 1, sizeof *u);
    Py_ssize_t *of_group = PyMem_Calloc((size_t)groups + 1, sizeof *of_group);
    PyObject *out = PyDict_New(), *empty = PyTuple_New(0);
    if (!u || !of_group || !out || !empty) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto failed; }
    if (tally_unwinders(keys, walks, logged, u, &unwinders, of_group)) goto failed;
    for (Py_ssize_t g = 0; g < groups; g++) {
        DigestUnwinder *mine = &u[of_group[g]];
        if (!mine->groups && (!(mine->groups = PyDict_New()) || PyDict_SetItem(out, mine->name, mine->groups)))
            goto failed;
        const int complete = mine->logged && mine->counted == mine->total && mine->total <= cap;
        PyObject *key = PyList_GET_ITEM(keys, g), *found = PyList_GET_ITEM(logged, g);
        PyObject *pcs = !complete ? Py_None : found == Py_None ? empty : PyTuple_GET_ITEM(found, 1);
        PyObject *rest = PyTuple_GetSlice(key, 1, PyTuple_GET_SIZE(key));
        PyObject *group = rest ? tuple_taking(type, 2, (PyObject *[]){ Py_NewRef(PyList_GET_ITEM(walks, g)),
                                                                        Py_NewRef(pcs) }) : NULL;
        const int set = group ? PyDict_SetItem(mine->groups, rest, group) : -1;
        Py_XDECREF(rest);
        Py_XDECREF(group);
        if (set) goto failed;
    }
    goto done;
failed:
    Py_CLEAR(out);
done:
    for (Py_ssize_t i = 0; u && i < unwinders; i++) Py_XDECREF(u[i].groups);
    PyMem_Free(u);
    PyMem_Free(of_group);
    Py_XDECREF(empty);
    return out;
}

/* ------------------------------------------------------------ packing a plain rule */

typedef struct {
    int32_t *items;
    Py_ssize_t count;
    int fits;  /* every value in int32 */
} Packing;

static void pack_value(Packing *p, long long value) {
    if (value < INT32_MIN || value > INT32_MAX) p->fits = 0;
    p->items[p->count++] = (int32_t)value;
}

/* An int field of the rule, or `none` where it is None; 0 with *ok cleared where it is no int in 64 bits. */
static long long int_field(PyObject *value, long long none, int *ok) {
    if (PyErr_Occurred()) return 0;  /* an earlier field was no int: the rule is refused as it is */
    if (value == Py_None) return none;
    int overflow;
    const long long out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (out == -1 && PyErr_Occurred())) *ok = 0;
    return out;
}

/* The (lowest, highest) pair of a field, (0, 0) where it is None. */
static void pair_field(PyObject *pair, long long out[2], int *ok) {
    out[0] = out[1] = 0;
    if (pair == Py_None) return;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) { *ok = 0; return; }
    out[0] = int_field(PyTuple_GET_ITEM(pair, 0), 0, ok);
    out[1] = int_field(PyTuple_GET_ITEM(pair, 1), 0, ok);
}

static int is_text(PyObject *value, const char *text) {
    return PyUnicode_Check(value) && PyUnicode_CompareWithASCIIString(value, text) == 0;
}

/* pack_plain(rule) -> bytes or None: harness.verify.kernel.pack_plain_in_python's twin, a rule with neither
 * alternatives nor a scan as rules.c reads it (abi.RULE_HEADER, then its pre_loads, loads and
 * vfp_loads as (register, offset) pairs); None where a value is beyond int32 (`step` runs there). */
static PyObject *kernel_pack_plain(PyObject *module, PyObject *rule) {
    if (!PyTuple_Check(rule) || PyTuple_GET_SIZE(rule) != RULE_FIELD_COUNT) {
        PyErr_SetString(PyExc_TypeError, "pack_plain takes a Rule");
        return NULL;
    }
#define FIELD(name) PyTuple_GET_ITEM(rule, RULE_##name)
    PyObject *lists[3] = { FIELD(PRE_LOADS), FIELD(LOADS), FIELD(VFP_LOADS) };
    for (int l = 0; l < 3; l++)
        if (!PyTuple_Check(lists[l])) {
            PyErr_SetString(PyExc_TypeError, "a rule's loads are tuples of (register, offset) pairs");
            return NULL;
        }
    static const struct { int field, flag; } truths[] = {
        { RULE_PC_FROM_LR, PC_FROM_LR }, { RULE_ALIGNED, ALIGNED }, { RULE_ABOVE_SP, ABOVE_SP },
        { RULE_LEAF_UNLESS_RECORD, LEAF_UNLESS_RECORD }, { RULE_OUTSIDE_IT, OUTSIDE_IT },
        { RULE_CALLER_ALIGNED8, CALLER_ALIGNED8 },
    };
    long long flags = FIELD(BOUNDS) != Py_None ? BOUNDS : 0;
    for (size_t i = 0; i < sizeof truths / sizeof *truths; i++) {
        const int truth = PyObject_IsTrue(PyTuple_GET_ITEM(rule, truths[i].field));
        if (truth < 0) return NULL;
        if (truth) flags |= truths[i].flag;
    }
    PyObject *failure = FIELD(FAILURE), *guard_kind = FIELD(GUARD_KIND);
    if (failure != Py_None) {
        flags |= FAILS;
        PyObject *kind = PyTuple_Check(failure) && PyTuple_GET_SIZE(failure) > 0 ? PyTuple_GET_ITEM(failure, 0) : NULL;
        if (kind && is_text(kind, "no_info")) flags |= NO_INFO;
    }
    if (FIELD(GUARD_FAILURE) != Py_None) flags |= GUARD_FAILS;
    if (guard_kind != Py_None) {
        flags |= GUARD_KIND_FIXED;
        if (is_text(guard_kind, "no_info")) flags |= NO_INFO;
    }
    const Py_ssize_t pairs = PyTuple_GET_SIZE(lists[0]) + PyTuple_GET_SIZE(lists[1]) + PyTuple_GET_SIZE(lists[2]);
    const Py_ssize_t count = (Py_ssize_t)(sizeof(RuleHeader) / sizeof(int32_t)) + 2 * pairs;
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    if (!out) return NULL;
    Packing p = { (int32_t *)PyBytes_AS_STRING(out), 0, 1 };
    int ok = 1;
    long long bounds[2], pre_bounds[2];
    pair_field(FIELD(BOUNDS), bounds, &ok);
    pair_field(FIELD(PRE_BOUNDS), pre_bounds, &ok);
    const long long header[] = {
        flags, int_field(FIELD(BASE), 0, &ok), int_field(FIELD(INDEX), -1, &ok), int_field(FIELD(OFFSET), 0, &ok),
        int_field(FIELD(END), 0, &ok), bounds[0], bounds[1], PyTuple_GET_SIZE(lists[1]), PyTuple_GET_SIZE(lists[2]),
        PyTuple_GET_SIZE(lists[0]), pre_bounds[0], pre_bounds[1],
    };
#undef FIELD
    for (size_t i = 0; i < sizeof header / sizeof *header; i++) pack_value(&p, header[i]);
    for (int l = 0; l < 3; l++)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(lists[l]); i++) {
            long long pair[2];
            pair_field(PyTuple_GET_ITEM(lists[l], i), pair, &ok);
            pack_value(&p, pair[0]);
            pack_value(&p, pair[1]);
        }
    if (!ok && PyErr_Occurred()) {  /* not an int at all: the rule is malformed */
        Py_DECREF(out);
        return NULL;
    }
    if (!ok || !p.fits) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

static PyMethodDef kernel_functions[] = {
    {"pack_plain", kernel_pack_plain, METH_O, "A rule without alternatives or a scan, as rules.c reads it."},
    {"may_start_epilogue", kernel_may_start_epilogue, METH_O, "May these bytes start an epilogue?"},
    {"may_store", kernel_may_store, METH_VARARGS, "May the Thumb instruction of these half-words write memory?"},
    {"sum_by", kernel_sum_by, METH_VARARGS, "Tally entries added up by keys made of their where's and cause's parts."},
    {"group_by", kernel_group_by, METH_VARARGS, "Tally entries grouped by keys of their where's and cause's parts."},
    {"digest_groups", kernel_digest_groups, METH_VARARGS, "A digest's groups by unwinder, of its sums and logged pcs."},
    {"epilogue_plan", kernel_epilogue_plan, METH_VARARGS, "The plan of the epilogue at an address, or None."},
    {"blame", kernel_blame, METH_VARARGS, "A run's failing stops by unwinder: wrong registers, culprits, traits."},
    {NULL}
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "harness.verify._kernel", "The compiled verification kernel.", -1, kernel_functions
};

PyMODINIT_FUNC PyInit__kernel(void) {
    if (PyType_Ready(&VerifierType) < 0 || PyType_Ready(&TracerType) < 0) return NULL;
    PyObject *module = PyModule_Create(&kernel_module);
    if (!module) return NULL;
    if (PyModule_AddObjectRef(module, "Verifier", (PyObject *)&VerifierType) < 0 ||
        PyModule_AddObjectRef(module, "Tracer", (PyObject *)&TracerType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
