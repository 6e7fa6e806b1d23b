/* The module harness.verify._kernel: the types of rules.c and trace.c. */
#include "kernel.h"

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "harness.verify._kernel", "The compiled verification kernel.", -1, NULL
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
