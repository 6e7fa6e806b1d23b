/* Sources: where each unwinder's rule for a frame at a pc comes from
 * (harness/unwind/rule_map.py, harness/verify/kernel.py).
 *
 * MAP       its table as a partition of the pcs: sorted starts, each with the
 *           row every pc up to the next start finds, looked up at pc - shift
 *           (a caller's return address one byte back, in its call), and the
 *           number of each row's rule in the process's book of rules
 *           (harness/verify/rule_book.py): rules the book holds made are
 *           taken from it, the others asked of Python once (provide_book).
 * CHAIN     a chain of methods, each with its partition: the chain's rule is
 *           its methods' rules at their rows, one after the other (as
 *           harness.unwind.scan.chain_rule and kernel.pack_rule write it),
 *           each method's by its rows, as for MAP, or taken from the source
 *           of the method where the Verifier walks it too.
 * EPILOGUE  v2+epilogue's innermost frame: its fallback's partition, except
 *           at a pc whose code may start an epilogue (the C twin of
 *           harness.thumb.encoding.may_start_epilogue), where the epilogue
 *           is planned (in C where epilogue.c knows its instructions, else
 *           by Python's provide_plan) and the pc alone takes its rule, or
 *           the tables' where there is no epilogue to simulate.
 * PROVIDE   any other unwinder: Python's rule_at for each range of pcs.
 * Every kind but MAP keeps the rules of the ranges it made in Ranges.
 */
#include "kernel.h"

#include <stdarg.h>

#include <string.h>

enum { FROM_PROVIDE, FROM_MAP, FROM_CHAIN, FROM_EPILOGUE };  /* a Source's kind */

/* provide_plan's rule id where no epilogue is simulated (harness.verify.kernel.DECLINES). */
#define DECLINES (-2)

/* Bytes an epilogue scan looks ahead (harness.unwind.v2_epilogue.EpilogueFirst.rule_at). */
#define EPILOGUE_REACH 256

struct Partition {
    Py_buffer starts, rows;  /* int64 each, `count` of them; starts[0] is the lowest pc */
    Py_ssize_t count, last;  /* `last`: the segment found last */
    int64_t shift;
};

typedef struct { Py_ssize_t id; PyObject *rule; } KeptRule;  /* rule: bytes or Py_None; NULL: not made yet */
/* By row + 1; `book` the list of packed rules they were taken from (a strong reference), where a rule not made
 * at first may be made since, for another row or table that names it too. */
typedef struct { KeptRule *items; Py_ssize_t count; PyObject *book; } KeptRules;

typedef struct { int64_t start; Py_buffer data; } CodeSegment;

/* A chain's method: its partition, and its rules by row (its own, or those
 * of source `unwinder` where the method is one of the Verifier's). */
typedef struct {
    Partition map;
    Py_ssize_t unwinder;   /* -1: none */
    KeptRules kept;
} Method;

struct Source {
    int kind;
    Partition map;                  /* MAP, EPILOGUE (the fallback's) */
    KeptRules kept;                 /* MAP, EPILOGUE */
    Method *methods;                /* CHAIN */
    int method_count;
    CodeSegment *code;              /* EPILOGUE */
    Py_ssize_t code_count;
    PyObject *plans;                /* EPILOGUE: the book's {steps (epilogue.c): packed rule or None} */
    Py_buffer function_starts;      /* EPILOGUE: what `functions` reads (no obj: tail calls are Python's) */
    FunctionStarts functions;
    Ranges ranges;                  /* rules of the ranges made (every kind but MAP) */
    /* The rule found last and the pcs [hit_low, hit_high) that find it too (empty at first): a frame's
     * pc mostly stays in one segment from stop to stop, and a rule once found never changes. */
    int64_t hit_low, hit_high;
    PyObject *hit_rule;             /* borrowed from `kept` or `ranges` */
    Py_ssize_t hit_id;
};

static void partition_release(Partition *p) {
    if (p->starts.obj) PyBuffer_Release(&p->starts);
    if (p->rows.obj) PyBuffer_Release(&p->rows);
    memset(p, 0, sizeof *p);
}

static void kept_clear(KeptRules *kept) {
    for (Py_ssize_t i = 0; i < kept->count; i++) Py_XDECREF(kept->items[i].rule);
    PyMem_Free(kept->items);
    Py_XDECREF(kept->book);
    memset(kept, 0, sizeof *kept);
}

/* Rules of rows -1 (NO_ROW) to max_row: `numbers` (int64, by row + 1) in
 * the book (a list of packed rules, Ellipsis where not made yet), those
 * made taken now. */
static int kept_init(KeptRules *kept, int64_t max_row, PyObject *numbers, PyObject *book) {
    Py_buffer view;
    if (!PyList_Check(book)) {
        PyErr_SetString(PyExc_TypeError, "the book of rules is a list");
        return -1;
    }
    if (PyObject_GetBuffer(numbers, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) return -1;
    if (view.itemsize != 8 || strcmp(view.format, "q") || view.len / 8 < max_row + 2) {
        PyErr_SetString(PyExc_ValueError, "rule numbers are an int64 array (\"q\"), one a row and one for none");
        PyBuffer_Release(&view);
        return -1;
    }
    kept->count = max_row + 2;
    kept->items = PyMem_Calloc((size_t)kept->count, sizeof(KeptRule));
    if (!kept->items) { kept->count = 0; PyBuffer_Release(&view); PyErr_NoMemory(); return -1; }
    Py_INCREF(book);
    kept->book = book;
    const int64_t *number = view.buf;
    for (Py_ssize_t i = 0; i < kept->count; i++) {
        if (number[i] < 0 || number[i] >= PyList_GET_SIZE(book)) {
            PyErr_Format(PyExc_ValueError, "rule number %lld is not in the book", (long long)number[i]);
            PyBuffer_Release(&view);
            return -1;
        }
        PyObject *packed = PyList_GET_ITEM(book, number[i]);
        kept->items[i].id = number[i];
        if (packed != Py_Ellipsis) {
            Py_INCREF(packed);
            kept->items[i].rule = packed;
        }
    }
    PyBuffer_Release(&view);
    return 0;
}

static void source_clear(Source *s) {
    partition_release(&s->map);
    kept_clear(&s->kept);
    for (int i = 0; i < s->method_count; i++) {
        partition_release(&s->methods[i].map);
        kept_clear(&s->methods[i].kept);
    }
    PyMem_Free(s->methods);
    for (Py_ssize_t i = 0; i < s->code_count; i++) PyBuffer_Release(&s->code[i].data);
    PyMem_Free(s->code);
    Py_XDECREF(s->plans);
    if (s->function_starts.obj) PyBuffer_Release(&s->function_starts);
    ranges_clear(&s->ranges);
    memset(s, 0, sizeof *s);
}

int sources_init(Sources *s, Py_ssize_t unwinders, PyObject *provide, PyObject *provide_book, PyObject *provide_plan) {
    memset(s, 0, sizeof *s);
    s->items = PyMem_Calloc(2 * unwinders + 1, sizeof(Source));
    if (!s->items) { PyErr_NoMemory(); return -1; }
    s->count = unwinders;
    Py_INCREF(provide);
    Py_INCREF(provide_book);
    Py_INCREF(provide_plan);
    s->provide = provide;
    s->provide_book = provide_book;
    s->provide_plan = provide_plan;
    return 0;
}

void sources_release(Sources *s) {
    Py_CLEAR(s->provide);
    Py_CLEAR(s->provide_book);
    Py_CLEAR(s->provide_plan);
}

void sources_free(Sources *s) {
    if (s->items)
        for (Py_ssize_t i = 0; i < 2 * s->count; i++) source_clear(&s->items[i]);
    PyMem_Free(s->items);
    sources_release(s);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ partitions */

/* Take (starts, rows, shift): two int64 buffers of one length >= 1, starts
 * increasing, rows >= -1 (NO_ROW). The highest row in *max_row. */
static int partition_from(Partition *p, PyObject *triple, int64_t *max_row) {
    PyObject *starts, *rows;
    long long shift;
    memset(p, 0, sizeof *p);
    if (!PyArg_ParseTuple(triple, "OOL", &starts, &rows, &shift)) return -1;
    if (PyObject_GetBuffer(starts, &p->starts, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) ||
        PyObject_GetBuffer(rows, &p->rows, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)) {
        partition_release(p);
        return -1;
    }
    p->count = p->starts.len / 8;
    if (p->starts.itemsize != 8 || p->rows.itemsize != 8 || p->rows.len != p->starts.len || !p->count ||
        strcmp(p->starts.format, "q") || strcmp(p->rows.format, "q")) {
        PyErr_SetString(PyExc_ValueError, "a partition is two int64 arrays (\"q\") of one length, not empty");
        partition_release(p);
        return -1;
    }
    const int64_t *start = p->starts.buf, *row = p->rows.buf;
    *max_row = -1;
    for (Py_ssize_t i = 0; i < p->count; i++) {
        if ((i && start[i] <= start[i - 1]) || row[i] < -1) {
            PyErr_Format(PyExc_ValueError, "partition segment %zd: starts must increase, rows be >= -1", i);
            partition_release(p);
            return -1;
        }
        if (row[i] > *max_row) *max_row = row[i];
    }
    p->shift = shift;
    return 0;
}

/* The segment holding lookup pc (the last one starting at or below it; -1 if none). */
static Py_ssize_t segment_of(Partition *p, int64_t pc) {
    const int64_t *start = p->starts.buf;
    const Py_ssize_t last = p->last;
    if (start[last] <= pc) {
        if (last + 1 == p->count || pc < start[last + 1]) return last;
        if (last + 2 == p->count || pc < start[last + 2]) return p->last = last + 1;  /* on into the next one */
    }
    Py_ssize_t lo = 0, hi = p->count;
    while (lo < hi) {  /* the first segment starting above pc */
        const Py_ssize_t mid = lo + (hi - lo) / 2;
        if (start[mid] <= pc) lo = mid + 1; else hi = mid;
    }
    if (lo) p->last = lo - 1;
    return lo - 1;
}

/* The row a frame at pc finds, and the frame pcs [*low, *high) that find the
 * same; -2 where no segment holds it. */
static int64_t row_at(Partition *p, int64_t pc, int64_t *low, int64_t *high) {
    const Py_ssize_t segment = segment_of(p, pc - p->shift);
    if (segment < 0) return -2;
    const int64_t *start = p->starts.buf;
    *low = start[segment] + p->shift;
    *high = segment + 1 < p->count ? start[segment + 1] + p->shift : INT64_MAX;
    return ((const int64_t *)p->rows.buf)[segment];
}

/* provider(args...), or an error where the Verifier was released (its run over). */
static PyObject *asked(PyObject *provider, const char *format, ...) {
    if (!provider) {
        PyErr_SetString(PyExc_RuntimeError, "a rule was asked for after the verifier's run (released)");
        return NULL;
    }
    va_list values;
    va_start(values, format);
    PyObject *args = Py_VaBuildValue(format, values);
    va_end(values);
    if (!args) return NULL;
    PyObject *reply = PyObject_CallObject(provider, args);
    Py_DECREF(args);
    return reply;
}

/* Python's (rule id, bytes or None) reply, checked; 0 or -1. */
static int take_reply(PyObject *reply, Py_ssize_t *id, PyObject **rule) {
    if (!reply) return -1;
    if (!PyArg_ParseTuple(reply, "nO", id, rule) || (*rule != Py_None && !PyBytes_Check(*rule))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "provide_book gave no (rule id, bytes or None)");
        return -1;
    }
    return 0;
}

/* The rule of `row` (made by Python the first time, where the book had not). */
static PyObject *kept_rule(Sources *s, KeptRules *rules, int64_t row, Py_ssize_t *id) {
    KeptRule *kept = &rules->items[row + 1];
    if (!kept->rule && kept->id < PyList_GET_SIZE(rules->book)) {  /* made since the rules were taken? */
        PyObject *packed = PyList_GET_ITEM(rules->book, kept->id);
        if (packed != Py_Ellipsis) {
            Py_INCREF(packed);
            kept->rule = packed;
        }
    }
    if (!kept->rule) {
        PyObject *reply = asked(s->provide_book, "(n)", kept->id);
        PyObject *rule;
        if (take_reply(reply, &kept->id, &rule)) { Py_XDECREF(reply); return NULL; }
        Py_INCREF(rule);
        kept->rule = rule;
        Py_DECREF(reply);
    }
    *id = kept->id;
    return kept->rule;
}

/* ------------------------------------------------------------ Python's ranges */

/* Keep `rule` for [low, high) (clipped to the gap at `slot`); the rule, borrowed. */
static PyObject *keep_range(Source *src, Py_ssize_t slot, int64_t low, int64_t high, PyObject *rule, Py_ssize_t id) {
    if (ranges_insert(&src->ranges, slot, (Range){ low, high, rule, id })) return NULL;
    return src->ranges.items[src->ranges.last].value;
}

/* The rule Python's rule_at gives for pc, kept for the range it gives. */
static PyObject *provided(Sources *s, Source *src, Py_ssize_t unwinder, int64_t pc, int innermost, Py_ssize_t slot,
                          Py_ssize_t *id) {
    PyObject *made = asked(s->provide, "(nLi)", unwinder, (long long)pc, innermost);
    if (!made) return NULL;
    PyObject *rule;
    long long low, high;
    if (!PyArg_ParseTuple(made, "nOLL", id, &rule, &low, &high)) { Py_DECREF(made); return NULL; }
    if ((rule != Py_None && !PyBytes_Check(rule)) || !(low <= pc && pc < high)) {
        PyErr_Format(PyExc_ValueError, "provide gave no rule bytes, or a range without pc %lld", (long long)pc);
        Py_DECREF(made);
        return NULL;
    }
    PyObject *kept = keep_range(src, slot, low, high, rule, *id);
    Py_DECREF(made);
    return kept;
}

/* ------------------------------------------------------------ chains */

/* The chain's rule from its methods' (bytes or None each): their rules in
 * turn up to one that defers (None, or a chain: not packed), each after
 * its int32 length (0 for one that defers); None where every one fails
 * outright (harness.unwind.scan.chain_rule, harness.verify.kernel.pack_rule). */
static PyObject *chain_of(PyObject *const *rules, int count) {
    int taken = 0, all_fail = 1;
    Py_ssize_t size = sizeof(RuleHeader);
    for (; taken < count; ) {
        PyObject *rule = rules[taken++];
        const RuleHeader *h = rule == Py_None ? NULL : (const RuleHeader *)PyBytes_AS_STRING(rule);
        if (!h || (h->flags & CHAIN)) { all_fail = 0; size += 4; break; }
        if (!(h->flags & FAILS)) all_fail = 0;
        size += 4 + PyBytes_GET_SIZE(rule);
    }
    if (all_fail) Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) return NULL;
    uint8_t *at = (uint8_t *)PyBytes_AS_STRING(out);
    const RuleHeader header = { .flags = CHAIN, .base = SP, .index = -1, .highest = taken };
    memcpy(at, &header, sizeof header);
    at += sizeof header;
    for (int m = 0; m < taken; m++) {
        const int defers = rules[m] == Py_None || (((const RuleHeader *)PyBytes_AS_STRING(rules[m]))->flags & CHAIN);
        const int32_t length = defers ? 0 : (int32_t)PyBytes_GET_SIZE(rules[m]);
        memcpy(at, &length, sizeof length);
        at += sizeof length;
        if (length) memcpy(at, PyBytes_AS_STRING(rules[m]), (size_t)length);
        at += length;
    }
    return out;
}

static PyObject *chain_rule(Sources *s, Source *src, Py_ssize_t unwinder, int64_t pc, int innermost, Py_ssize_t slot,
                            Py_ssize_t *id) {
    int64_t low = INT64_MIN, high = INT64_MAX;
    PyObject *rules[CHAIN_METHODS];
    for (int m = 0; m < src->method_count; m++) {
        Method *method = &src->methods[m];
        int64_t method_low, method_high;
        const int64_t row = row_at(&method->map, pc, &method_low, &method_high);
        if (row == -2) return provided(s, src, unwinder, pc, innermost, slot, id);  /* below every segment */
        if (method_low > low) low = method_low;
        if (method_high < high) high = method_high;
        Py_ssize_t ignored;
        rules[m] = method->unwinder >= 0
            ? kept_rule(s, &s->items[2 * method->unwinder + innermost].kept, row, &ignored)
            : kept_rule(s, &method->kept, row, &ignored);
        if (!rules[m]) return NULL;
    }
    PyObject *rule = chain_of(rules, src->method_count);
    if (!rule) return NULL;
    *id = -1;  /* a chain is worded by its methods' step (a refusal, by a fixed text): no id of its own */
    PyObject *kept = keep_range(src, slot, low, high, rule, -1);
    Py_DECREF(rule);
    return kept;
}

/* ------------------------------------------------------------ epilogues */

/* harness.thumb.encoding._data_processing_teardown */
static int data_processing_teardown(uint32_t first, unsigned rd) {
    const unsigned rn = first & 0xF;
    const int add_immediate = (first & 0xFBE0) == 0xF100 || (first & 0xFBF0) == 0xF200;
    if (rd == SP)
        return add_immediate || (first & 0xFFE0) == 0xEB00 ||
               (((first & 0xFBE0) == 0xF1A0 || (first & 0xFBF0) == 0xF2A0) && (rn == 7 || rn == 11)) ||
               (first & 0xFFEF) == 0xEA4F;
    return (rd == 7 || rd == 11) && add_immediate && rn == rd;
}

/* harness.thumb.encoding.may_start_epilogue over the n bytes at `code`. */
int may_start_epilogue(const uint8_t *code, Py_ssize_t n) {
    if (n < 2) return 1;
    const uint32_t first = code[0] | (uint32_t)code[1] << 8;
    if (first >> 11 != 0x1D && first >> 11 != 0x1E && first >> 11 != 0x1F)  /* a 16-bit instruction */
        return (first & 0xFE00) == 0xBC00 || (first & 0xFF80) == 0xB000 || (first & 0xFF87) == 0x4485 ||
               (first & 0xFF87) == 0x4685 || (first & 0xFF80) == 0x4700 || (first & 0xF800) == 0xE000 ||
               (first & 0xFF00) == 0x3700 || (first & 0xFE3F) == 0x1C3F;
    if (n < 4) return 1;
    const uint32_t second = code[2] | (uint32_t)code[3] << 8;
    return (first & 0xFFDF) == 0xE89D || (first == 0xF85D && (second & 0x0FFF) == 0x0B04) ||
           (first & 0xFFBF) == 0xECBD || ((first & 0xF800) == 0xF000 && (second & 0xD000) == 0x9000) ||
           (!(second & 0x8000) && data_processing_teardown(first, (second >> 8) & 0xF));
}

/* The fallback's rule of `row`, kept for [low, high) (clipped to the gap at `slot`). */
static PyObject *tables_rule(Sources *s, Source *src, int64_t row, Py_ssize_t slot, int64_t low, int64_t high,
                             Py_ssize_t *id) {
    PyObject *rule = kept_rule(s, &src->kept, row, id);
    return rule ? keep_range(src, slot, low, high, rule, *id) : NULL;
}

/* As EpilogueFirst.rule_at: from pc on, the halfword-aligned pcs (at most
 * EPILOGUE_REACH bytes, and within the fallback's range) whose code cannot
 * start an epilogue take the fallback's rule; a pc that may start one takes
 * its plan's rule, or the fallback's where the plan declines; a pc with no
 * code, the rule Python's rule_at gives. */
static PyObject *epilogue_rule(Sources *s, Source *src, Py_ssize_t unwinder, int64_t pc, Py_ssize_t slot,
                               Py_ssize_t *id) {
    int64_t low, high;
    const int64_t row = row_at(&src->map, pc, &low, &high);
    const CodeSegment *segment = NULL;
    for (Py_ssize_t i = 0; i < src->code_count; i++)
        if (src->code[i].start <= pc && pc < src->code[i].start + src->code[i].data.len) segment = &src->code[i];
    if (row == -2 || !segment) return provided(s, src, unwinder, pc, 1, slot, id);
    const int64_t limit = high - pc < EPILOGUE_REACH ? high - pc : EPILOGUE_REACH;
    const uint8_t *code = (const uint8_t *)segment->data.buf + (pc - segment->start);
    int64_t bytes = segment->start + segment->data.len - pc;
    if (bytes > limit + 4) bytes = limit + 4;
    int64_t end = 0;
    while (end < limit && bytes - end >= 4 && !may_start_epilogue(code + end, 4)) end += 2;
    if (end > limit) end = limit;
    if (end) return tables_rule(s, src, row, slot, pc, pc + end, id);
    /* An epilogue of instructions epilogue.c knows is planned here, its rule packed here too and kept by
     * its steps (one met before, in this program or another, is packed once): not numbered in the book,
     * as a chain composed here is not (id -1; such a rule never fails, so nothing words it by its id);
     * where the plan declines (a branch within the function), the tables' rule holds. Any other epilogue
     * is Python's to plan. */
    PlanStep steps[EPILOGUE_LIMIT];
    const int count = epilogue_plan(code, segment->start + segment->data.len - pc, pc,
                                    src->function_starts.obj ? &src->functions : NULL, steps);
    if (count == PLAN_DECLINES) return tables_rule(s, src, row, slot, pc, pc + 1, id);
    if (count > 0) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)steps, count * (Py_ssize_t)sizeof *steps);
        PyObject *rule = key ? PyDict_GetItemWithError(src->plans, key) : NULL;
        if (rule) {
            Py_INCREF(rule);
        } else if (key && !PyErr_Occurred() && (rule = epilogue_packed_rule(steps, count)) &&
                   PyDict_SetItem(src->plans, key, rule)) {
            Py_CLEAR(rule);
        }
        Py_XDECREF(key);
        if (!rule) return NULL;
        *id = -1;
        PyObject *kept = keep_range(src, slot, pc, pc + 1, rule, -1);
        Py_DECREF(rule);
        return kept;
    }
    PyObject *reply = asked(s->provide_plan, "(nL)", unwinder, (long long)pc), *rule;
    if (take_reply(reply, id, &rule)) { Py_XDECREF(reply); return NULL; }
    if (*id == DECLINES) rule = kept_rule(s, &src->kept, row, id);
    PyObject *kept = rule ? keep_range(src, slot, pc, pc + 1, rule, *id) : NULL;
    Py_DECREF(reply);
    return kept;
}

/* ------------------------------------------------------------ the rule at a pc */

/* Remember `rule` (id `id`) as the one every pc in [low, high) of `src` finds; the rule. */
static inline PyObject *hit(Source *src, int64_t low, int64_t high, PyObject *rule, Py_ssize_t id) {
    src->hit_low = low, src->hit_high = high, src->hit_rule = rule, src->hit_id = id;
    return rule;
}

PyObject *sources_rule(Sources *s, Py_ssize_t unwinder, int64_t pc, int innermost, Py_ssize_t *id) {
    Source *src = &s->items[2 * unwinder + innermost];
    if (src->hit_low <= pc && pc < src->hit_high) {
        *id = src->hit_id;
        return src->hit_rule;
    }
    if (src->kind == FROM_MAP) {
        int64_t low, high;
        const int64_t row = row_at(&src->map, pc, &low, &high);
        if (row != -2) {
            PyObject *rule = kept_rule(s, &src->kept, row, id);
            return rule ? hit(src, low, high, rule, *id) : NULL;
        }
    }
    Py_ssize_t slot;
    const Range *found = ranges_find(&src->ranges, pc, &slot);
    if (found) {
        *id = found->id;
        return hit(src, found->low, found->high, found->value, found->id);
    }
    switch (src->kind) {
    case FROM_CHAIN: return chain_rule(s, src, unwinder, pc, innermost, slot, id);
    case FROM_EPILOGUE: return epilogue_rule(s, src, unwinder, pc, slot, id);
    default: return provided(s, src, unwinder, pc, innermost, slot, id);
    }
}

PyObject *sources_fallback_rule(Sources *s, Py_ssize_t unwinder, int64_t pc, Py_ssize_t *id) {
    Source *src = &s->items[2 * unwinder + 1];
    int64_t low, high;
    const int64_t row = src->kind == FROM_EPILOGUE ? row_at(&src->map, pc, &low, &high) : -2;
    return row == -2 ? Py_None : kept_rule(s, &src->kept, row, id);
}

/* ------------------------------------------------------------ set up from Python */

static Source *source_at(Sources *s, Py_ssize_t unwinder, int innermost) {
    if (unwinder < 0 || unwinder >= s->count || innermost < 0 || innermost > 1) {
        PyErr_Format(PyExc_IndexError, "no unwinder %zd (innermost %d) to take rules for", unwinder, innermost);
        return NULL;
    }
    Source *src = &s->items[2 * unwinder + innermost];
    if (src->kind != FROM_PROVIDE || src->ranges.count) {
        PyErr_Format(PyExc_ValueError, "unwinder %zd (innermost %d) already has its rules", unwinder, innermost);
        return NULL;
    }
    return src;
}

/* set_map(unwinder, innermost, starts, rows, shift, numbers, book) */
int sources_set_map(Sources *s, PyObject *args) {
    Py_ssize_t unwinder;
    int innermost;
    PyObject *starts, *rows, *shift, *numbers, *book;
    if (!PyArg_ParseTuple(args, "npOOOOO", &unwinder, &innermost, &starts, &rows, &shift, &numbers, &book))
        return -1;
    Source *src = source_at(s, unwinder, innermost);
    if (!src) return -1;
    PyObject *triple = PyTuple_Pack(3, starts, rows, shift);
    int64_t max_row;
    const int failed = !triple || partition_from(&src->map, triple, &max_row);
    Py_XDECREF(triple);
    if (failed) return -1;
    if (kept_init(&src->kept, max_row, numbers, book)) { source_clear(src); return -1; }
    src->kind = FROM_MAP;
    return 0;
}

/* set_chain(unwinder, innermost, ((starts, rows, shift, unwinder or -1, numbers), ...), book): one per
 * method, with the Verifier's unwinder that is that method where there is one (its source set first, by
 * set_map). */
int sources_set_chain(Sources *s, PyObject *args) {
    Py_ssize_t unwinder;
    int innermost;
    PyObject *methods, *book;
    if (!PyArg_ParseTuple(args, "npO!O", &unwinder, &innermost, &PyTuple_Type, &methods, &book)) return -1;
    Source *src = source_at(s, unwinder, innermost);
    if (!src) return -1;
    const Py_ssize_t count = PyTuple_GET_SIZE(methods);
    if (!count || count > CHAIN_METHODS) {
        PyErr_Format(PyExc_ValueError, "a chain has 1 to %d methods, not %zd", CHAIN_METHODS, count);
        return -1;
    }
    src->methods = PyMem_Calloc((size_t)count, sizeof(Method));
    if (!src->methods) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t m = 0; m < count; m++) {
        PyObject *method = PyTuple_GET_ITEM(methods, m), *triple;
        Method *into = &src->methods[m];
        int64_t max_row;
        src->method_count = (int)m + 1;
        if (!PyTuple_Check(method) || PyTuple_GET_SIZE(method) != 5) {
            PyErr_SetString(PyExc_ValueError, "a chain's method is (starts, rows, shift, unwinder or -1, numbers)");
            source_clear(src);
            return -1;
        }
        into->unwinder = PyLong_AsSsize_t(PyTuple_GET_ITEM(method, 3));
        triple = PyTuple_GetSlice(method, 0, 3);
        const int failed = !triple || partition_from(&into->map, triple, &max_row);
        Py_XDECREF(triple);
        if (failed || (into->unwinder >= 0 && (into->unwinder >= s->count ||
                                              s->items[2 * into->unwinder + innermost].kind != FROM_MAP ||
                                              s->items[2 * into->unwinder + innermost].kept.count != max_row + 2))) {
            if (!failed) PyErr_Format(PyExc_ValueError, "method %zd is no unwinder with its partition", m);
            source_clear(src);
            return -1;
        }
        if (into->unwinder < 0 && kept_init(&into->kept, max_row, PyTuple_GET_ITEM(method, 4), book)) {
            source_clear(src);
            return -1;
        }
    }
    src->kind = FROM_CHAIN;
    return 0;
}

/* set_epilogue(unwinder, ((start, bytes), ...)): the innermost frame of an
 * unwinder whose rules are set_map's, but where its code may start an epilogue. */
int sources_set_epilogue(Sources *s, PyObject *args) {
    Py_ssize_t unwinder;
    PyObject *segments, *plans, *functions;
    if (!PyArg_ParseTuple(args, "nO!O!O", &unwinder, &PyTuple_Type, &segments, &PyDict_Type, &plans, &functions))
        return -1;
    if (unwinder < 0 || unwinder >= s->count || s->items[2 * unwinder + 1].kind != FROM_MAP) {
        PyErr_Format(PyExc_ValueError, "unwinder %zd has no partition for its innermost frame", unwinder);
        return -1;
    }
    Source *src = &s->items[2 * unwinder + 1];
    const Py_ssize_t count = PyTuple_GET_SIZE(segments);
    src->code = PyMem_Calloc((size_t)count + 1, sizeof(CodeSegment));
    if (!src->code) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < count; i++) {
        long long start;
        PyObject *data;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(segments, i), "LO", &start, &data) ||
            PyObject_GetBuffer(data, &src->code[i].data, PyBUF_SIMPLE))
            return -1;
        src->code[i].start = start;
        src->code_count = i + 1;
    }
    Py_INCREF(plans);
    src->plans = plans;
    if (functions_of(functions, &src->function_starts, &src->functions) < 0) return -1;
    src->kind = FROM_EPILOGUE;
    return 0;
}
