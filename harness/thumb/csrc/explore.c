/* frame_analysis._Analysis.explore, _join, gap_spans and _rows: every path
 * of the function followed from its entry, and the rows written from the
 * states before each instruction. */
#include "paths.h"

#include <stdio.h>
#include <string.h>

#define LANDING_ROUNDS 8 /* frame_analysis.LANDING_ROUNDS */

enum { PROBLEM_NONE, PROBLEM_UNREACHED, PROBLEM_NOT_SINGLE, PROBLEM_LOST_RETURN }; /* frame_analysis.PROBLEMS */

/* _join: the state where two paths meet, false where the frames differ;
 * UNKNOWN past a refusal; `fp` the frame pointer. */
static bool join(const State *known, const State *other, int fp, State *out) {
    if (known->unknown || other->unknown) {
        *out = UNKNOWN_STATE;
        return true;
    }
    bool fp_agree = known->fp_known == other->fp_known && (!known->fp_known || known->fp_offset == other->fp_offset);
    bool fp_known = fp_agree && known->fp_known;
    *out = *known;
    out->clobbered = known->clobbered | other->clobbered;
    out->fp_known = fp_known;
    State same = *known;
    same.clobbered = other->clobbered;
    same.fp_known = other->fp_known;
    same.fp_offset = other->fp_offset;
    if (state_equal(&same, other) && (fp_known || known->cfa_reg == REG_SP)) return true;
    bool saves_agree = known->nsaved == other->nsaved
        && !memcmp(known->saved, other->saved, sizeof(Save) * (size_t)known->nsaved);
    if (fp_known && saves_agree) {
        out->depth_known = false;
        out->cfa_reg = fp;
        return true;
    }
    return false;
}

static Entry *entry_of(Analysis *a, Py_ssize_t index, int fact) {
    for (int at = a->head[index]; at >= 0; at = a->entries[at].next)
        if (a->entries[at].path.fact == fact) return &a->entries[at];
    return NULL;
}

static void add_entry(Analysis *a, Py_ssize_t index, const Path *path) {
    if (a->nentries == a->entries_capacity) {
        a->entries_capacity = a->entries_capacity ? 2 * a->entries_capacity : 64;
        a->entries = PyMem_Realloc(a->entries, sizeof(Entry) * (size_t)a->entries_capacity);
    }
    Entry *entry = &a->entries[a->nentries];
    entry->next = -1;
    entry->path = *path;
    if (a->tail[index] >= 0) a->entries[a->tail[index]].next = a->nentries;
    else a->head[index] = a->nentries;
    a->tail[index] = a->nentries++;
}

/* _Analysis._refuse: the problem the last refuse named, at `address` (one
 * a pc; a trial's only counted). FAILED on a Python error, else GO_ON:
 * the analysis goes on, as the Python's does. */
static Step note_problem(Analysis *a, int64_t address) {
    Py_ssize_t index = (address - a->start) / 2;
    if (a->refused[index]) return GO_ON;
    a->refused[index] = 1;
    if (a->trial) {
        a->trial_problems++;
        return GO_ON;
    }
    char text[200], problem[400];
    if (!last_refusal.named) snprintf(problem, sizeof problem, "0x%llx: %s", (long long)address, last_refusal.why);
    else if (insn_text(a->code, address, last_refusal.arm, text, sizeof text))
        snprintf(problem, sizeof problem, "0x%llx: '%s'%s", (long long)address, text, last_refusal.why);
    else
        return give_up("an instruction with no text", address);
    PyObject *item = PyUnicode_FromString(problem);
    int failed = !item || PyList_Append(a->problems, item);
    Py_XDECREF(item);
    return failed ? FAILED : GO_ON;
}

/* What explore does at one instruction before its successors; `leaves_to`
 * where a thunk's tail call goes (frame_analysis._note_targets), else -1. */
static Step visit(Analysis *a, const Insn *insn, const State *state, int64_t *leaves_to) {
    bool first_visit = !a->sizes[(insn->address - a->start) / 2];
    a->sizes[(insn->address - a->start) / 2] = insn->size;
    int64_t formed, thunk;
    *leaves_to = -1;
    if ((insn->opcode == OP_BL) || (insn->opcode == OP_BLX)) {
        ints_add(&a->calls, insn->address);
        if (!state->unknown && !saved_reg(state, REG_LR)) { /* while the callee runs, the return address is nowhere */
            refuse_insn(insn, " calls with lr saved nowhere");
            Step step = note_problem(a, insn->address);
            if (step) return step;
        }
        if (insn->has_imm) { /* `blx` switches state, `bl` keeps it */
            ints_add(((insn->opcode == OP_BLX) != insn->arm) ? &a->arm_callees : &a->callees, insn->imm);
            ints_add(&a->call_sites, insn->imm);
            ints_add(&a->call_sites, (int64_t)insn->address + insn->size);
        }
    } else if ((insn->opcode == OP_B) && !in_function(a, insn->imm) && torn_down(state)) {
        ints_add(insn->conditional ? &a->branched : insn->arm ? &a->arm_callees : &a->callees, insn->imm); /* a tail call */
    } else if ((insn->opcode == OP_BX) && !insn->arm && thunk_target(a, insn, &thunk) && torn_down(state)) {
        *leaves_to = thunk & ~(int64_t)1; /* a tail call to a far function */
        ints_add(thunk & 1 ? &a->callees : &a->arm_callees, *leaves_to);
    } else if ((insn->opcode == OP_ADD) && first_visit && formed_address(a, insn, &formed) && formed & 1) {
        ints_add(&a->callees, formed & ~(int64_t)1);
    }
    return first_visit ? read_code(a, insn) : GO_ON;
}

/* Follow the pending paths; one meeting a state at an address of `kept`
 * (per halfword; NULL: none) with another frame ends there. */
Step explore(Analysis *a, const uint8_t *kept) {
    while (a->npending) {
        Pending next = a->pending[--a->npending];
        int64_t address = next.address;
        Path path = next.path;
        if (address == a->end) a->returns = a->falls_through = true;
        if (!in_function(a, address) || is_data(a, address)) continue;
        if (address & 1) return give_up("a path to an odd address", address);
        Py_ssize_t index = (address - a->start) / 2;
        Entry *known = entry_of(a, index, path.fact);
        if (known) {
            State joined;
            bool joins = join(&known->path.state, &path.state, frame_pointer(a->arm), &joined);
            bool changed = !joins || !state_equal(&joined, &known->path.state);
            if (changed && kept && kept[index]) continue;
            if (!joins) {
                refuse("paths meet with different frames", address);
                Step step = note_problem(a, address);
                if (step) return step;
                joined = UNKNOWN_STATE;
                changed = !state_equal(&joined, &known->path.state);
            }
            if (!changed) continue;
            path.state = joined;
            known->path.state = joined;
        } else {
            add_entry(a, index, &path);
        }
        if (++a->visited > a->max_states) {
            static char why[80];
            snprintf(why, sizeof why, "more than %ld states; the analysis gave up", a->max_states);
            refuse(why, address);
            Step step = note_problem(a, address);
            a->all_refused = true, a->npending = 0;
            return step;
        }
        Insn decoded; /* a copy: the code's kept instructions change as others are decoded */
        const Insn *insn = &decoded;
        bool decodes = decode_at(a->code, address, a->arm, &decoded);
        if (!decodes || address + insn->size > a->end) {
            refuse(decodes ? "a path runs past the function's end" : "undecodable instruction on a path", address);
            Step step = note_problem(a, address);
            if (step) return step;
            continue;
        }
        a->decoded[index] = 1;
        int64_t leaves_to;
        Step step = visit(a, insn, &path.state, &leaves_to);
        if (step) return step;
        int count = 0, before = a->npending;
        if ((step = successors(a, insn, &path, &count)) == REFUSED) { /* its successors are not this path's */
            a->npending = before;
            if ((step = note_problem(a, address))) return step;
            if (!path.state.unknown) { /* _unknown_onward: on past it with no frame known */
                Path unknown = path;
                unknown.state = UNKNOWN_STATE;
                if ((step = successors(a, insn, &unknown, &count)) == REFUSED) a->npending = before;
                else if (step) return step;
            }
            continue;
        }
        if (step) return step;
        bool ends = false;
        if (!count && !(insn->opcode == OP_UDF) && !(insn->opcode == OP_BKPT) && !(insn->opcode == OP_BL) && !(insn->opcode == OP_BLX)) {
            if ((insn->opcode == OP_B) && (step = never_returns(a, insn->has_imm, insn->imm, &ends))) return step;
            if (!ends && leaves_to >= 0 && (step = never_returns(a, true, leaves_to, &ends))) return step;
            if (!ends) a->returns = true;
        }
    }
    return GO_ON;
}

typedef struct {
    int64_t address, cfa_reg, offset;
    int nsaved;
    Save saved[MAX_SAVED];
    int problem;
} Row;

/* A state's row, with saves only of the registers `kept` (kept_saves). */
static bool row_of(const State *s, int64_t address, uint32_t kept, Row *row) {
    memset(row, 0, sizeof *row);
    row->address = address;
    row->cfa_reg = REG_SP;
    if ((s->clobbered & tracked_bit(REG_LR)) && !saved_reg(s, REG_LR)) {
        row->problem = PROBLEM_LOST_RETURN;
        return true;
    }
    bool on_sp = s->cfa_reg == REG_SP;
    if (on_sp ? !s->depth_known : !s->fp_known) return false; /* an offset None: never met */
    row->cfa_reg = s->cfa_reg;
    row->offset = on_sp ? s->depth : s->fp_offset;
    for (int i = 0; i < s->nsaved; i++)
        if (kept & tracked_bit(s->saved[i].reg)) row->saved[row->nsaved++] = s->saved[i];
    return true;
}

static bool rows_equal(const Row *a, const Row *b) {
    return a->cfa_reg == b->cfa_reg && a->offset == b->offset && a->problem == b->problem && a->nsaved == b->nsaved
        && !memcmp(a->saved, b->saved, sizeof(Save) * (size_t)a->nsaved);
}

static int add_row(PyObject *rows, Row *last, bool *any, const Row *row) {
    if (*any && rows_equal(last, row)) return 0;
    *last = *row;
    *any = true;
    PyObject *saved = PyTuple_New(row->nsaved);
    if (!saved) return -1;
    for (int i = 0; i < row->nsaved; i++)
        PyTuple_SET_ITEM(saved, i, Py_BuildValue("(LL)", (long long)row->saved[i].reg, (long long)row->saved[i].slot));
    PyObject *item = Py_BuildValue("(LLLNi)", (long long)row->address, (long long)row->cfa_reg,
                                   (long long)row->offset, saved, row->problem);
    if (!item) return -1;
    int failed = PyList_Append(rows, item);
    Py_DECREF(item);
    return failed;
}

static bool any_lost(const Analysis *a, Py_ssize_t index) {
    for (int at = a->head[index]; at >= 0; at = a->entries[at].next)
        if (lost(&a->entries[at].path.state)) return true;
    return false;
}

/* untouched._transfers_through_sp */
static bool transfers_through_sp(const Insn *insn) {
    switch (insn->opcode) {
    case OP_PUSH: case OP_POP: return true;
    case OP_STR: case OP_STRD: case OP_STRH: case OP_STRB: case OP_LDR: case OP_LDRD:
        return insn->has_mem && insn->mem_base == REG_SP;
    default: return false;
    }
}

static uint32_t named_by(const Insn *insn) {
    uint32_t named = 0;
    if (transfers_through_sp(insn)) return 0;
    for (int i = 0; i < insn->nregs; i++) named |= tracked_bit(insn->regs[i]);
    if (insn->has_mem) named |= tracked_bit(insn->mem_base);
    return named;
}

static bool holds_data(const Analysis *a, int64_t at, int size) {
    for (int i = 0; i < size; i++)
        if (a->data[at + i - a->start]) return true;
    return false;
}

/* untouched.kept_saves, as tracked bits: the saves the rows keep, all but
 * those of r4-r11 never written (no state has it overwritten, no
 * instruction names it but to save or restore it through sp, on a path or
 * in the code no path reaches read in order, data stepped over). */
static uint32_t kept_saves(const Analysis *a) {
    uint32_t saved = 0, clobbered = 0, r4_r11 = 0;
    for (int reg = 4; reg <= 11; reg++) r4_r11 |= tracked_bit(reg);
    for (int at = 0; at < a->nentries; at++) {
        const State *s = &a->entries[at].path.state;
        clobbered |= s->clobbered;
        for (int i = 0; i < s->nsaved; i++) saved |= tracked_bit(s->saved[i].reg);
    }
    uint32_t candidates = saved & r4_r11 & ~clobbered;
    Insn insn;
    for (Py_ssize_t index = 0; candidates && index < a->halfwords; index++)
        if (a->decoded[index] && decode_at(a->code, a->start + 2 * index, a->arm, &insn)) candidates &= ~named_by(&insn);
    for (int64_t at = a->start; candidates && at < a->end;) {
        Py_ssize_t index = (at - a->start) / 2;
        if (a->head[index] >= 0 && a->sizes[index]) { /* on a path: named above */
            at += a->sizes[index];
            continue;
        }
        if (decode_at(a->code, at, a->arm, &insn) && at + insn.size <= a->end && !holds_data(a, at, insn.size)) {
            candidates &= ~named_by(&insn);
            at += insn.size;
        } else {
            at += a->arm ? 4 : 2;
        }
    }
    return saved & ~candidates;
}

/* _rows (with _one_frame): the function's rows, as (address, cfa_reg, offset, saved, problem). */
Step rows_of(const Analysis *a, PyObject *rows) {
    Row last, row, other;
    bool any = false;
    int64_t covered = a->start;
    uint32_t kept = kept_saves(a);
    for (Py_ssize_t index = 0; index < a->halfwords; index++) {
        if (a->head[index] < 0) continue;
        int64_t address = a->start + 2 * index;
        if (address > covered) {
            Row gap = {.address = covered, .cfa_reg = REG_SP, .problem = PROBLEM_UNREACHED};
            if (add_row(rows, &last, &any, &gap)) return FAILED;
        }
        const Entry *entry = &a->entries[a->head[index]];
        bool single = !a->all_refused && !a->refused[index] && !entry->path.state.unknown; /* _one_frame */
        if (single && !row_of(&entry->path.state, address, kept, &row)) return give_up("a row with no offset", address);
        for (int at = entry->next; single && at >= 0; at = a->entries[at].next) {
            const State *state = &a->entries[at].path.state;
            if (!state->unknown && !row_of(state, address, kept, &other)) return give_up("a row with no offset", address);
            single = !state->unknown && rows_equal(&row, &other);
        }
        if (!single || (a->returns && any_lost(a, index))) { /* refused: a register lost where it returns */
            memset(&row, 0, sizeof row);
            row.address = address, row.cfa_reg = REG_SP, row.problem = PROBLEM_NOT_SINGLE;
        }
        if (add_row(rows, &last, &any, &row)) return FAILED;
        int64_t reach = address + (a->sizes[index] ? a->sizes[index] : 2);
        if (reach > covered) covered = reach;
    }
    if (covered < a->end) {
        Row gap = {.address = covered, .cfa_reg = REG_SP, .problem = PROBLEM_UNREACHED};
        if (add_row(rows, &last, &any, &gap)) return FAILED;
    }
    return GO_ON;
}

static int compare_ints(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* gap_spans: the code no path reached, [low, high) each (not data the code
 * reads), as low, high pairs. */
/* start_shapes.past_padding: is [low, high) only padding: in Thumb state `nop`, `nop.w` and zeros; in
 * ARM state `nop`, `mov r0, r0` and zero words? */
static bool padding_only(const Analysis *a, int64_t low, int64_t high) {
    static const uint8_t thumb_nop_w[4] = {0xAF, 0xF3, 0x00, 0x80}, arm_nop[4] = {0x00, 0xF0, 0x20, 0xE3},
                         arm_mov[4] = {0x00, 0x00, 0xA0, 0xE1}, zeros[4] = {0};
    uint8_t bytes[4];
    while (low < high) {
        int got = code_read(a->code, low, bytes, 4);
        if (a->arm) {
            if (got == 4 && (!memcmp(bytes, arm_nop, 4) || !memcmp(bytes, arm_mov, 4) || !memcmp(bytes, zeros, 4))) low += 4;
            else return false;
        } else if (got >= 2 && ((bytes[0] == 0x00 && bytes[1] == 0xBF) || (bytes[0] == 0 && bytes[1] == 0))) {
            low += 2;
        } else if (got == 4 && !memcmp(bytes, thumb_nop_w, 4)) {
            low += 4;
        } else {
            return false;
        }
    }
    return true;
}

/* A span no path reached, unless it is padding before data or the end (never run, never a pad). */
static void add_gap(Analysis *a, Ints *spans, int64_t low, int64_t high, bool before_data) {
    if ((before_data || high == a->end) && padding_only(a, low, high)) return;
    ints_add(spans, low), ints_add(spans, high);
}

void gap_spans(Analysis *a, Ints *spans) {
    qsort(a->outer_data.items, (size_t)a->outer_data.count, sizeof(int64_t), compare_ints);
    int64_t covered = a->start;
    Py_ssize_t outer = 0, count = a->outer_data.count;
    spans->count = 0;
    for (int part = 0; part < 3; part++) { /* data below the function, the function, data above it */
        int64_t limit = part == 0 ? a->start : INT64_MAX;
        while (part != 1 && outer < count && a->outer_data.items[outer] < limit) {
            int64_t address = a->outer_data.items[outer++];
            if (address > covered && !is_data(a, covered) && covered % 2 == 0) add_gap(a, spans, covered, address, true);
            if (address + 1 > covered) covered = address + 1;
        }
        for (int64_t offset = 0; part == 1 && offset < a->end - a->start; offset++) {
            int64_t address = a->start + offset, extent = 0;
            if (offset % 2 == 0 && a->sizes[offset / 2]) extent = a->sizes[offset / 2];
            else if (a->data[offset]) extent = 1;
            if (!extent) continue;
            if (address > covered && !is_data(a, covered) && covered % 2 == 0)
                add_gap(a, spans, covered, address, !(offset % 2 == 0 && a->sizes[offset / 2]));
            if (address + extent > covered) covered = address + extent;
        }
    }
    if (covered < a->end) add_gap(a, spans, covered, a->end, false);
}

static void ints_copy(Ints *to, const Ints *from) {
    to->count = to->capacity = 0;
    to->items = NULL;
    for (Py_ssize_t i = 0; i < from->count; i++) ints_add(to, from->items[i]);
}

static void *copied(const void *from, size_t size) {
    void *to = PyMem_Malloc(size ? size : 1);
    if (to && size) memcpy(to, from, size);
    return to;
}

/* _Analysis.copy: a trial's own states, sizes and data; what noreturn was asked, and what was decoded, shared. */
static bool analysis_copy(const Analysis *from, Analysis *to) {
    *to = *from;
    size_t halfwords = (size_t)from->halfwords;
    to->head = copied(from->head, sizeof(int) * halfwords);
    to->tail = copied(from->tail, sizeof(int) * halfwords);
    to->sizes = copied(from->sizes, halfwords);
    to->refused = copied(from->refused, halfwords);
    to->trial = true, to->problems = NULL, to->trial_problems = 0;
    to->data = copied(from->data, (size_t)(from->end - from->start));
    to->entries = copied(from->entries, sizeof(Entry) * (size_t)from->nentries);
    to->entries_capacity = from->nentries;
    to->pending = NULL, to->npending = to->pending_capacity = 0;
    ints_copy(&to->outer_data, &from->outer_data), ints_copy(&to->calls, &from->calls);
    ints_copy(&to->callees, &from->callees), ints_copy(&to->arm_callees, &from->arm_callees);
    ints_copy(&to->branched, &from->branched), ints_copy(&to->loaded, &from->loaded);
    ints_copy(&to->call_sites, &from->call_sites), ints_copy(&to->labels, &from->labels);
    Py_INCREF(to->asked);
    return to->head && to->tail && to->sizes && to->refused && to->data && to->entries;
}

void analysis_free(Analysis *a) {
    PyMem_Free(a->head), PyMem_Free(a->tail), PyMem_Free(a->sizes), PyMem_Free(a->refused), PyMem_Free(a->data);
    PyMem_Free(a->entries), PyMem_Free(a->pending);
    ints_free(&a->outer_data), ints_free(&a->calls), ints_free(&a->callees), ints_free(&a->arm_callees);
    ints_free(&a->branched), ints_free(&a->loaded), ints_free(&a->call_sites), ints_free(&a->labels);
    Py_XDECREF(a->asked);
}

void start_path(Analysis *a, int64_t address, const State *state) {
    Path path = {.state = *state, .fact = -1};
    if (!a->pending) {
        a->pending = PyMem_Malloc(sizeof(Pending) * 64);
        a->pending_capacity = a->pending ? 64 : 0;
    }
    a->pending[0].address = address;
    a->pending[0].path = path;
    a->npending = 1;
}

/* call_frame: the one frame every call is made with (lr then gone), false when none or they differ. */
static bool call_frame(const Analysis *a, State *frame) {
    bool any = false;
    for (Py_ssize_t i = 0; i < a->calls.count; i++) {
        Py_ssize_t index = (a->calls.items[i] - a->start) / 2;
        for (int at = a->head[index]; at >= 0; at = a->entries[at].next) {
            const State *state = &a->entries[at].path.state;
            if (!any) {
                *frame = *state;
                frame->clobbered |= tracked_bit(REG_LR);
                any = true;
            } else if (!join(frame, state, frame_pointer(a->arm), frame)) {
                return false;
            }
        }
    }
    return any;
}

/* _analysed's rounds: code no branch reaches analysed from the frame of the
 * calls (a landing pad), each piece kept where it meets no problem. */
Step landing_pads(Analysis *a) {
    State frame;
    if (!call_frame(a, &frame)) return GO_ON;
    uint8_t *kept = copied(a->sizes, (size_t)a->halfwords);
    Ints gaps = {0};
    Step step = kept ? GO_ON : FAILED;
    for (int round = 0; step == GO_ON && round < LANDING_ROUNDS; round++) {
        bool grown = false;
        gap_spans(a, &gaps);
        for (Py_ssize_t i = 0; step == GO_ON && i < gaps.count; i += 2) {
            Analysis trial;
            if (!analysis_copy(a, &trial)) {
                analysis_free(&trial);
                step = FAILED;
                break;
            }
            start_path(&trial, gaps.items[i], &frame);
            trial.falls_through = false;
            Step tried = trial.pending ? explore(&trial, kept) : FAILED;
            if (tried == GO_ON && (trial.trial_problems || trial.falls_through)) tried = REFUSED; /* (or padding into the next function) */
            if (tried == GO_ON) {
                trial.falls_through = a->falls_through;
                trial.trial = a->trial, trial.problems = a->problems;
                analysis_free(a);
                *a = trial;
                grown = true;
            } else {
                analysis_free(&trial);
                if (tried != REFUSED) step = tried; /* a rule not ported, or an error */
            }
        }
        if (!grown) break;
    }
    ints_free(&gaps);
    PyMem_Free(kept);
    return step;
}
