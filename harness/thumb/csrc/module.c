/* harness.thumb._analysis: Code(segments, capstone_library, row_type, problems), a program's
 * loaded bytes, whose analyse(start, end, noreturn, data_spans, labels, bounded, arm, rows)
 * gives a Thumb (or ARM) function's analysis as frame_analysis.analyse_calling's
 * parts, or None where the Python must make it (see analysis.h). */
#include "paths.h"

#include <string.h>
#include <structmember.h>

#define LARGEST_FUNCTION (16 << 20) /* bytes: past this the Python analyses (and refuses) */

const char *capstone_load(const char *path, csh *handle, csh *arm_handle);

static const char *bail_why = "";
static int64_t bail_at;
Refusal last_refusal;

Step give_up(const char *why, int64_t address) {
    bail_why = why;
    bail_at = address;
    return BAIL;
}

Step refuse(const char *why, int64_t address) {
    give_up(why, address);
    last_refusal = (Refusal){why, false, false};
    return REFUSED;
}

Step refuse_insn(const Insn *insn, const char *rest) {
    give_up(rest, insn->address);
    last_refusal = (Refusal){rest, true, insn->arm};
    return REFUSED;
}

static PyObject *last_bail(PyObject *self, PyObject *unused) { return Py_BuildValue("(sL)", bail_why, (long long)bail_at); }

static PyMethodDef functions[] = {
    {"last_bail", last_bail, METH_NOARGS, "(why, address) the last analysis that gave up did"},
    {NULL, NULL, 0, NULL},
};

/* The fields of a row (program.CfiRow, a slotted dataclass), in order: the
 * rows are made here, slot by slot, as its __init__ would (a large
 * program's analysis makes millions). */
static const char *const ROW_FIELDS[] = {"address", "cfa_reg", "cfa_offset", "saved", "problem"};
#define ROW_FIELD_COUNT 5
#define SAVES_KEPT (1 << 16) /* distinct saves kept shared, at most (one object for each value met) */

typedef struct {
    PyObject_HEAD
    Code code;
    PyObject *segments; /* the bytes objects, kept alive */
    PyTypeObject *row_type;
    Py_ssize_t row_slots[ROW_FIELD_COUNT]; /* each field's offset in a row */
    PyObject *problems;                     /* a row's problem by its number (explore.c) */
    PyObject *saves;                        /* a dict: each saves tuple met, itself */
} CodeObject;

static void code_dealloc(CodeObject *self) {
    PyMem_Free(self->code.segments);
    PyMem_Free(self->code.kept), PyMem_Free(self->code.kept_at), PyMem_Free(self->code.kept_decodes);
    Py_XDECREF(self->segments);
    Py_XDECREF(self->row_type), Py_XDECREF(self->problems), Py_XDECREF(self->saves);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The offset of each of the row type's fields, its slots (T_OBJECT_EX members). */
static int read_row_type(CodeObject *self, PyTypeObject *type) {
    for (int i = 0; i < ROW_FIELD_COUNT; i++) {
        PyObject *member = PyObject_GetAttrString((PyObject *)type, ROW_FIELDS[i]);
        if (!member) return -1;
        bool slot = Py_IS_TYPE(member, &PyMemberDescr_Type) && ((PyMemberDescrObject *)member)->d_member->type == T_OBJECT_EX;
        if (slot) self->row_slots[i] = ((PyMemberDescrObject *)member)->d_member->offset;
        Py_DECREF(member);
        if (!slot) return PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, ROW_FIELDS[i]), -1;
    }
    Py_XSETREF(self->row_type, (PyTypeObject *)Py_NewRef(type));
    return 0;
}

static int code_init(CodeObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *segments, *problems;
    PyTypeObject *row_type;
    const char *library;
    if (!PyArg_ParseTuple(args, "O!sO!O!", &PyList_Type, &segments, &library, &PyType_Type, &row_type, &PyTuple_Type,
                          &problems) || read_row_type(self, row_type))
        return -1;
    if (PyTuple_GET_SIZE(problems) != 4) return PyErr_SetString(PyExc_ValueError, "four problems, by number"), -1;
    Py_XSETREF(self->problems, Py_NewRef(problems));
    Py_XSETREF(self->saves, PyDict_New());
    if (!self->saves) return -1;
    Py_ssize_t count = PyList_GET_SIZE(segments);
    self->code.segments = PyMem_Calloc((size_t)count + 1, sizeof(Segment));
    if (!self->code.segments) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(segments, i), *data;
        unsigned long long start;
        if (!PyArg_ParseTuple(item, "KO!", &start, &PyBytes_Type, &data)) return -1;
        self->code.segments[i] = (Segment){(uint32_t)start, (const uint8_t *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)};
    }
    self->code.count = (int)count;
    self->code.kept = PyMem_Malloc(sizeof(Insn) * DECODED_KEPT);
    self->code.kept_at = PyMem_Malloc(sizeof(int64_t) * DECODED_KEPT);
    self->code.kept_decodes = PyMem_Calloc(DECODED_KEPT, sizeof(bool));
    if (!self->code.kept || !self->code.kept_at || !self->code.kept_decodes) return PyErr_NoMemory(), -1;
    for (size_t i = 0; i < DECODED_KEPT; i++) self->code.kept_at[i] = -1;
    Py_XSETREF(self->segments, Py_NewRef(segments));
    const char *why = capstone_load(library, &self->code.handle, &self->code.arm_handle);
    if (why) {
        PyErr_Format(PyExc_ImportError, "%s: %s", library, why);
        return -1;
    }
    return 0;
}

static PyObject *ints_list(const Ints *list) {
    PyObject *out = PyList_New(list->count);
    for (Py_ssize_t i = 0; out && i < list->count; i++) {
        PyObject *value = PyLong_FromLongLong(list->items[i]);
        if (!value) return Py_DECREF(out), NULL;
        PyList_SET_ITEM(out, i, value);
    }
    return out;
}

static bool allocate(Analysis *a) {
    Py_ssize_t bytes = a->end - a->start;
    a->halfwords = (bytes + 1) / 2;
    a->head = PyMem_Malloc(sizeof(int) * (size_t)a->halfwords);
    a->tail = PyMem_Malloc(sizeof(int) * (size_t)a->halfwords);
    a->sizes = PyMem_Calloc((size_t)a->halfwords, 1);
    a->refused = PyMem_Calloc((size_t)a->halfwords, 1);
    a->decoded = PyMem_Calloc((size_t)a->halfwords, 1);
    a->data = PyMem_Calloc((size_t)bytes, 1);
    if (!a->head || !a->tail || !a->sizes || !a->refused || !a->decoded || !a->data) return false;
    memset(a->head, -1, sizeof(int) * (size_t)a->halfwords);
    memset(a->tail, -1, sizeof(int) * (size_t)a->halfwords);
    return true;
}

/* The data spans its mapping symbols mark: bytes no path enters. */
static bool mark_spans(Analysis *a, PyObject *spans) {
    PyObject *iterator = PyObject_GetIter(spans), *span;
    if (!iterator) return false;
    while ((span = PyIter_Next(iterator))) {
        long long low, high;
        int parsed = PyArg_ParseTuple(span, "LL", &low, &high);
        Py_DECREF(span);
        if (!parsed) return Py_DECREF(iterator), false;
        if (high > low) mark_data(a, low, high - low);
    }
    Py_DECREF(iterator);
    return !PyErr_Occurred();
}

/* The labels (sorted) inside the function. */
static bool read_labels(Analysis *a, PyObject *labels) {
    PyObject *iterator = PyObject_GetIter(labels), *label;
    if (!iterator) return false;
    while ((label = PyIter_Next(iterator))) {
        long long value = PyLong_AsLongLong(label);
        Py_DECREF(label);
        if (value == -1 && PyErr_Occurred()) break;
        ints_add(&a->labels, value);
    }
    Py_DECREF(iterator);
    return !PyErr_Occurred();
}

static PyObject *returned_into(const Analysis *a);

/* A row as a row_type object, from explore.c's (address, cfa_reg, offset, saved, problem number). */
static PyObject *row_object(CodeObject *self, PyObject *found) {
    PyObject *fields[ROW_FIELD_COUNT];
    for (int i = 0; i < 3; i++) fields[i] = Py_NewRef(PyTuple_GET_ITEM(found, i));
    PyObject *saved = PyTuple_GET_ITEM(found, 3);
    if (PyDict_GET_SIZE(self->saves) > SAVES_KEPT) PyDict_Clear(self->saves);
    fields[3] = Py_XNewRef(PyDict_SetDefault(self->saves, saved, saved));
    long problem = PyLong_AsLong(PyTuple_GET_ITEM(found, 4));
    fields[4] = problem >= 0 && problem < 4 ? Py_NewRef(PyTuple_GET_ITEM(self->problems, problem)) : NULL;
    PyObject *row = fields[3] && fields[4] ? self->row_type->tp_alloc(self->row_type, 0) : NULL;
    for (int i = 0; i < ROW_FIELD_COUNT; i++) {
        if (row) *(PyObject **)((char *)row + self->row_slots[i]) = fields[i];
        else Py_XDECREF(fields[i]);
    }
    if (!row && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a row's problem out of range");
    return row;
}

/* The rows of explore.c as a tuple of row objects. */
static PyObject *row_objects(CodeObject *self, PyObject *rows) {
    Py_ssize_t count = PyList_GET_SIZE(rows);
    PyObject *out = PyTuple_New(count);
    for (Py_ssize_t i = 0; out && i < count; i++) {
        PyObject *row = row_object(self, PyList_GET_ITEM(rows, i));
        if (!row) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, i, row);
    }
    return out;
}

static PyObject *result_of(CodeObject *self, Analysis *a, bool with_rows) {
    PyObject *rows = PyList_New(0), *spans = NULL, *result = NULL;
    Ints gaps = {0};
    if (!rows) return NULL;
    gap_spans(a, &gaps);
    Step step = with_rows ? rows_of(a, rows) : GO_ON;
    if (step == BAIL) result = Py_NewRef(Py_None);
    if (step == GO_ON && (spans = PyList_New(0))) {
        for (Py_ssize_t i = 0; i < gaps.count; i += 2) {
            PyObject *span = Py_BuildValue("(LL)", (long long)gaps.items[i], (long long)gaps.items[i + 1]);
            if (!span || PyList_Append(spans, span)) {
                Py_XDECREF(span);
                goto done;
            }
            Py_DECREF(span);
        }
        result = Py_BuildValue("(NNOONONNONO)", row_objects(self, rows), ints_list(&a->callees), a->returns ? Py_True : Py_False,
                               spans, ints_list(&a->arm_callees), a->asked, ints_list(&a->branched),
                               ints_list(&a->loaded), a->falls_through ? Py_True : Py_False, returned_into(a),
                               a->problems);
        /* (ints_list's lists are stolen: N) */
    }
done:
    ints_free(&gaps);
    Py_XDECREF(rows);
    Py_XDECREF(spans);
    return result;
}

static PyObject *code_analyse(CodeObject *self, PyObject *args) {
    long long start, end;
    PyObject *noreturn, *data_spans, *labels;
    int bounded, arm, with_rows;
    if (!PyArg_ParseTuple(args, "LLOOOppp", &start, &end, &noreturn, &data_spans, &labels, &bounded, &arm, &with_rows))
        return NULL;
    if (end <= start || end - start > LARGEST_FUNCTION || start % (arm ? 4 : 2) || start < 0) {
        give_up("a span it does not take", start);
        Py_RETURN_NONE;
    }
    Analysis a = {.code = &self->code, .start = start, .end = end, .arm = arm, .noreturn = noreturn,
                  .max_states = end - start > MAX_STATES / STATES_PER_BYTE ? STATES_PER_BYTE * (end - start) : MAX_STATES};
    PyObject *result = NULL;
    if (!(a.asked = PySet_New(NULL))) return NULL;
    if (!(a.problems = PyList_New(0))) return Py_DECREF(a.asked), NULL;
    if (!allocate(&a)) {
        PyErr_NoMemory();
    } else if (mark_spans(&a, data_spans) && read_labels(&a, labels)) {
        State entry = {.depth_known = true, .cfa_reg = REG_SP};
        start_path(&a, a.start, &entry);
        Step step = a.pending ? explore(&a, NULL) : FAILED;
        if (step == GO_ON && bounded && !PyList_GET_SIZE(a.problems)) step = landing_pads(&a); /* (none past a problem) */
        if (step == GO_ON) result = result_of(self, &a, with_rows);
        else if (step != FAILED) result = Py_NewRef(Py_None); /* the Python's: a rule not ported, or a refusal */
        else if (!PyErr_Occurred()) PyErr_NoMemory();
    }
    PyObject *problems = a.problems;
    uint8_t *decoded = a.decoded; /* (the trials' too) */
    analysis_free(&a);
    PyMem_Free(decoded);
    Py_DECREF(problems);
    return result;
}

static PyObject *code_pushes_lr(CodeObject *self, PyObject *args) {
    long long address, end;
    int arm;
    if (!PyArg_ParseTuple(args, "LLp", &address, &end, &arm)) return NULL;
    return PyBool_FromLong(pushes_lr(&self->code, address, end, arm));
}

/* Analysed.returned_into: the targets of the calls whose return address
 * begins code that pushes lr, before the function's end. */
static PyObject *returned_into(const Analysis *a) {
    Ints targets = {0};
    for (Py_ssize_t i = 0; i < a->call_sites.count; i += 2) {
        int64_t after = a->call_sites.items[i + 1];
        if (after < a->end && pushes_lr(a->code, after, a->end, a->arm)) ints_add(&targets, a->call_sites.items[i]);
    }
    PyObject *list = ints_list(&targets);
    ints_free(&targets);
    return list;
}

static PyMethodDef code_methods[] = {
    {"pushes_lr", (PyCFunction)code_pushes_lr, METH_VARARGS,
     "pushes_lr(address, end, arm): start_shapes.pushes_lr"},
    {"analyse", (PyCFunction)code_analyse, METH_VARARGS,
     "analyse(start, end, noreturn, data_spans, labels, bounded, arm, rows): the function's analysis, or None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CodeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "harness.thumb._analysis.Code",
    .tp_basicsize = sizeof(CodeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Code(segments, capstone_library, row_type, problems): a program's loaded [(start, bytes)]",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)code_init,
    .tp_dealloc = (destructor)code_dealloc,
    .tp_methods = code_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_analysis", NULL, -1, functions};

PyMODINIT_FUNC PyInit__analysis(void) {
    if (PyType_Ready(&CodeType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "Code", (PyObject *)&CodeType) < 0) Py_CLEAR(m);
    return m;
}
