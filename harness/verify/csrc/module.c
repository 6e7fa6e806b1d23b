/* The module harness.verify._kernel: the types of rules.c and trace.c, and for tests the C that
 * Python's references hold: sources.c's epilogue filter, epilogue.c's plans, trace_pcs.c's store classes. */
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

static PyMethodDef kernel_functions[] = {
    {"may_start_epilogue", kernel_may_start_epilogue, METH_O, "May these bytes start an epilogue?"},
    {"may_store", kernel_may_store, METH_VARARGS, "May the Thumb instruction of these half-words write memory?"},
    {"epilogue_plan", kernel_epilogue_plan, METH_VARARGS, "The plan of the epilogue at an address, or None."},
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
