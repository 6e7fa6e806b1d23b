/* The module harness.unwind._rule_map: the twin of harness.unwind.rule_map.partition_of, which every
 * table's kernel set-up runs over its segments (a generated program's tables hold some 750 together:
 * looping over them in Python was about a seventh of the kernel's set-up). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

/* partition_of(segments, base, nowhere, no_row) -> (starts, rows, values): rule_map.partition_of's loop,
 * the starts and rows as native int64 bytes (for array("q")), over (start, value) pairs (value None: no
 * row), each start moved up by base. */
static PyObject *partition_of(PyObject *module, PyObject *args) {
    PyObject *segments;
    long long base, nowhere, no_row;
    if (!PyArg_ParseTuple(args, "OLLL:partition_of", &segments, &base, &nowhere, &no_row)) return NULL;
    PyObject *iterator = PyObject_GetIter(segments);
    if (!iterator) return NULL;
    Column starts = { 0 }, rows = { 0 };
    PyObject *values = PyList_New(0), *numbers = PyDict_New(), *out = NULL, *item = NULL;
    if (!values || !numbers || column_push(&starts, nowhere) || column_push(&rows, no_row)) goto done;
    while ((item = PyIter_Next(iterator))) {
        PyObject *pair = PySequence_Fast(item, "a segment must be a (start, value) pair");
        if (!pair) goto done;
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "a segment must be a (start, value) pair");
            Py_DECREF(pair);
            goto done;
        }
        const long long offset = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(pair, 0));
        long long start;
        if (!PyErr_Occurred() && __builtin_add_overflow(base, offset, &start))
            PyErr_SetString(PyExc_OverflowError, "a segment's start is past 64 bits");
        PyObject *value = PySequence_Fast_GET_ITEM(pair, 1);
        const int64_t row = PyErr_Occurred() ? 0 : value == Py_None ? no_row : row_of(value, numbers, values);
        Py_DECREF(pair);
        Py_CLEAR(item);
        if (PyErr_Occurred()) goto done;
        if (start == starts.items[starts.count - 1]) {
            rows.items[rows.count - 1] = row;
            if (rows.count > 1 && rows.items[rows.count - 2] == row) {  /* now equal to the one before: one segment */
                starts.count--;
                rows.count--;
            }
        } else if (row != rows.items[rows.count - 1] && (column_push(&starts, start) || column_push(&rows, row))) {
            goto done;
        }
    }
    if (!PyErr_Occurred()) out = Py_BuildValue("(NNO)", column_bytes(&starts), column_bytes(&rows), values);
done:
    Py_XDECREF(item);
    Py_DECREF(iterator);
    Py_XDECREF(values);
    Py_XDECREF(numbers);
    PyMem_Free(starts.items);
    PyMem_Free(rows.items);
    return out;
}

static PyMethodDef rule_map_functions[] = {
    {"partition_of", partition_of, METH_VARARGS, "rule_map.partition_of's loop: (starts, rows, values)."},
    {NULL}
};

static struct PyModuleDef rule_map_module = {
    PyModuleDef_HEAD_INIT, "harness.unwind._rule_map", "The compiled twin of rule_map.partition_of.", -1,
    rule_map_functions
};

PyMODINIT_FUNC PyInit__rule_map(void) {
    return PyModule_Create(&rule_map_module);
}
