/* The module harness.verify._kernel: the types of rules.c and trace.c, two twins of Python's, and
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

/* may_store(first, second) -> bool: trace.c's thumb_may_store, for tests to hold to a disassembler. */
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

PyObject *key_of_parts(PyObject *heads, PyObject *middles, PyObject *tails, Py_ssize_t where, Py_ssize_t cause) {
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

/* sum_by(target, entries, heads, middles, tails) -> target: harness.verify.tally.sum_by's twin, each
 * entry (where id, cause id, walks) added to target[key_of_parts(...)], but for entries without a key
 * (lists of tuples or None; entries a list of tuples of ints). */
static PyObject *kernel_sum_by(PyObject *module, PyObject *args) {
    PyObject *target, *entries, *heads, *middles, *tails;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:sum_by", &PyDict_Type, &target, &PyList_Type, &entries, &PyList_Type,
                          &heads, &PyList_Type, &middles, &PyList_Type, &tails))
        return NULL;
    for (Py_ssize_t n = 0; n < PyList_GET_SIZE(entries); n++) {
        PyObject *entry = PyList_GET_ITEM(entries, n);  /* unpacked by hand: PyArg_ParseTuple cost a third */
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
            PyErr_SetString(PyExc_TypeError, "a tally entry must be a tuple (where id, cause id, walks)");
            return NULL;
        }
        const Py_ssize_t where = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
        const Py_ssize_t cause = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
        PyObject *walks = PyTuple_GET_ITEM(entry, 2);
        if ((where == -1 || cause == -1) && PyErr_Occurred()) return NULL;
        PyObject *key = key_of_parts(heads, middles, tails, where, cause);
        if (!key) return NULL;
        if (key == Py_None) { Py_DECREF(key); continue; }
        PyObject *held = PyDict_GetItemWithError(target, key);
        PyObject *sum = held ? PyNumber_Add(held, walks) : PyErr_Occurred() ? NULL : Py_NewRef(walks);
        const int failed = !sum || PyDict_SetItem(target, key, sum);
        Py_DECREF(key);
        Py_XDECREF(sum);
        if (failed) return NULL;
    }
    return Py_NewRef(target);
}

static PyMethodDef kernel_functions[] = {
    {"may_start_epilogue", kernel_may_start_epilogue, METH_O, "May these bytes start an epilogue?"},
    {"may_store", kernel_may_store, METH_VARARGS, "May the Thumb instruction of these half-words write memory?"},
    {"sum_by", kernel_sum_by, METH_VARARGS, "Tally entries added up by keys made of their where's and cause's parts."},
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
