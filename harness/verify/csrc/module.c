/* The module harness.verify._kernel: the types of rules.c and trace.c. */
#include "kernel.h"

/* may_start_epilogue(code: bytes) -> bool: sources.c's twin of harness.thumb.encoding's. */
static PyObject *kernel_may_start_epilogue(PyObject *module, PyObject *code) {
    Py_buffer view;
    if (PyObject_GetBuffer(code, &view, PyBUF_SIMPLE)) return NULL;
    const int may = may_start_epilogue(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(may);
}

static PyMethodDef kernel_functions[] = {
    {"may_start_epilogue", kernel_may_start_epilogue, METH_O, "May these bytes start an epilogue?"},
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
