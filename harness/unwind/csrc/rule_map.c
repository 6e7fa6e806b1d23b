/* The module harness.unwind._rule_map: the twin of harness.unwind.rule_map.partition_of, which every
 * table's kernel set-up runs over its segments (a generated program's tables hold some 750 together:
 * looping over them in Python was about a seventh of the kernel's set-up). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t *items;
    Py_ssize_t count, capacity;
} Column;

static int column_push(Column *c, int64_t value) {
    if (c->count == c->capacity) {
        const Py_ssize_t capacity = c->capacity ? 2 * c->capacity : 64;
        int64_t *items = PyMem_Realloc(c->items, (size_t)capacity * sizeof(int64_t));
        if (!items) { PyErr_NoMemory(); return -1; }
        c->items = items;
        c->capacity = capacity;
    }
    c->items[c->count++] = value;
    return 0;
}

static PyObject *column_bytes(const Column *c) {
    return PyBytes_FromStringAndSize((const char *)c->items, c->count * (Py_ssize_t)sizeof(int64_t));
}

/* The row of `value`, numbered in `numbers` (value -> row) and `values` (by row) where new; -1 on error. */
static int64_t row_of(PyObject *value, PyObject *numbers, PyObject *values) {
    PyObject *number = PyDict_GetItemWithError(numbers, value);
    if (number) return PyLong_AsLongLong(number);
    if (PyErr_Occurred()) return -1;
    PyObject *row = PyLong_FromSsize_t(PyList_GET_SIZE(values));
    const int failed = !row || PyDict_SetItem(numbers, value, row) || PyList_Append(values, value);
    Py_XDECREF(row);
    return failed ? -1 : PyList_GET_SIZE(values) - 1;
}

/* A partition as it is made: starts and rows so far, and the rows' values numbered. */
typedef struct {
    Column starts, rows;
    PyObject *values, *numbers;  /* values by row; value -> row */
} Partitioning;

static int partitioning_init(Partitioning *p, long long nowhere, long long no_row) {
    memset(p, 0, sizeof *p);
    p->values = PyList_New(0);
    p->numbers = PyDict_New();
    return !p->values || !p->numbers || column_push(&p->starts, nowhere) || column_push(&p->rows, no_row) ? -1 : 0;
}

/* (starts, rows, values), the starts and rows as native int64 bytes (for array("q")); NULL on error. Frees. */
static PyObject *partitioning_done(Partitioning *p, int failed) {
    PyObject *out = failed || PyErr_Occurred() ? NULL
                  : Py_BuildValue("(NNO)", column_bytes(&p->starts), column_bytes(&p->rows), p->values);
    Py_XDECREF(p->values);
    Py_XDECREF(p->numbers);
    PyMem_Free(p->starts.items);
    PyMem_Free(p->rows.items);
    return out;
}

/* The row from `start` on: a later one at the same start replaces the earlier, neighbours alike are one. */
static int partitioning_push(Partitioning *p, int64_t start, int64_t row) {
    Column *starts = &p->starts, *rows = &p->rows;
    if (start == starts->items[starts->count - 1]) {
        rows->items[rows->count - 1] = row;
        if (rows->count > 1 && rows->items[rows->count - 2] == row) {  /* now equal to the one before: one segment */
            starts->count--;
            rows->count--;
        }
        return 0;
    }
    return row != rows->items[rows->count - 1] && (column_push(starts, start) || column_push(rows, row)) ? -1 : 0;
}

/* The row of a segment's value (None: no_row); -1 with an exception. */
static int64_t row_of_value(Partitioning *p, PyObject *value, long long no_row) {
    return value == Py_None ? no_row : row_of(value, p->numbers, p->values);
}

/* base + offset, or an OverflowError. */
static long long moved(long long base, long long offset) {
    long long start = 0;
    if (!PyErr_Occurred() && __builtin_add_overflow(base, offset, &start))
        PyErr_SetString(PyExc_OverflowError, "a segment's start is past 64 bits");
    return start;
}

/* partition_of(segments, base, nowhere, no_row) -> (starts, rows, values): rule_map.partition_of's loop over
 * (start, value) pairs (value None: no row), each start moved up by base. */
static PyObject *partition_of(PyObject *module, PyObject *args) {
    PyObject *segments, *item;
    long long base, nowhere, no_row;
    if (!PyArg_ParseTuple(args, "OLLL:partition_of", &segments, &base, &nowhere, &no_row)) return NULL;
    PyObject *iterator = PyObject_GetIter(segments);
    if (!iterator) return NULL;
    Partitioning p;
    int failed = partitioning_init(&p, nowhere, no_row);
    while (!failed && (item = PyIter_Next(iterator))) {
        PyObject *pair = PySequence_Fast(item, "a segment must be a (start, value) pair");
        Py_DECREF(item);
        if (!pair || PySequence_Fast_GET_SIZE(pair) != 2) {
            if (pair) PyErr_SetString(PyExc_ValueError, "a segment must be a (start, value) pair");
            Py_XDECREF(pair);
            failed = 1;
            break;
        }
        const long long start = moved(base, PyLong_AsLongLong(PySequence_Fast_GET_ITEM(pair, 0)));
        const int64_t row = PyErr_Occurred() ? 0 : row_of_value(&p, PySequence_Fast_GET_ITEM(pair, 1), no_row);
        Py_DECREF(pair);
        failed = PyErr_Occurred() || partitioning_push(&p, start, row);
    }
    Py_DECREF(iterator);
    return partitioning_done(&p, failed);
}

/* One v2 entry's segments: the (offset, run index) pairs of its offset list (offsets in half-words,
 * decreasing), from the last, while start + 2 * offset lies before `end`. */
static int push_entry(Partitioning *p, PyObject *pairs, long long start, long long end, long long base,
                      long long no_row) {
    if (!PyTuple_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "a v2 offset list must be a tuple of (offset, run index) pairs");
        return -1;
    }
    for (Py_ssize_t j = PyTuple_GET_SIZE(pairs) - 1; j >= 0; j--) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, j);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a v2 offset list must be a tuple of (offset, run index) pairs");
            return -1;
        }
        const long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0));
        if (PyErr_Occurred()) return -1;
        const long long at = start + offset * 2;
        if (at >= end) break;
        const long long moved_at = moved(base, at);
        const int64_t row = PyErr_Occurred() ? 0 : row_of_value(p, PyTuple_GET_ITEM(pair, 1), no_row);
        if (PyErr_Occurred() || partitioning_push(p, moved_at, row)) return -1;
    }
    return 0;
}

/* v2_partition_of(starts, pages_end, offset_lists, base, nowhere, no_row) -> (starts, rows, values):
 * partition_of over a v2 table's segments (harness.formats.chrome_v2.reader.V2Reader.segments, its
 * reference), given each entry's first pc offset (increasing) and offset list, and the end of the pages:
 * the Python generator of its segments was most of a v2 table's partition. */
static PyObject *v2_partition_of(PyObject *module, PyObject *args) {
    PyObject *starts, *lists;
    long long pages_end, base, nowhere, no_row;
    if (!PyArg_ParseTuple(args, "O!LO!LLL:v2_partition_of", &PyList_Type, &starts, &pages_end, &PyList_Type, &lists,
                          &base, &nowhere, &no_row))
        return NULL;
    const Py_ssize_t entries = PyList_GET_SIZE(starts);
    if (PyList_GET_SIZE(lists) != entries)
        return PyErr_Format(PyExc_ValueError, "v2_partition_of takes an offset list for each of %zd entries", entries);
    Partitioning p;
    int failed = partitioning_init(&p, nowhere, no_row) || partitioning_push(&p, moved(base, 0), no_row);
    long long start = entries ? PyLong_AsLongLong(PyList_GET_ITEM(starts, 0)) : 0;
    for (Py_ssize_t i = 0; !failed && i < entries; i++) {
        const long long end = i + 1 < entries ? PyLong_AsLongLong(PyList_GET_ITEM(starts, i + 1)) : pages_end;
        failed = PyErr_Occurred() || push_entry(&p, PyList_GET_ITEM(lists, i), start, end, base, no_row);
        start = end;
    }
    failed = failed || partitioning_push(&p, moved(base, pages_end), no_row);
    return partitioning_done(&p, failed);
}

static PyMethodDef rule_map_functions[] = {
    {"partition_of", partition_of, METH_VARARGS, "rule_map.partition_of's loop: (starts, rows, values)."},
    {"v2_partition_of", v2_partition_of, METH_VARARGS, "partition_of over a v2 table's segments."},
    {NULL}
};

static struct PyModuleDef rule_map_module = {
    PyModuleDef_HEAD_INIT, "harness.unwind._rule_map", "The compiled twin of rule_map.partition_of.", -1,
    rule_map_functions
};

PyMODINIT_FUNC PyInit__rule_map(void) {
    return PyModule_Create(&rule_map_module);
}
