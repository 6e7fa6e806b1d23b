/* The paths of one function: harness/thumb/frame_analysis.py's explore,
 * harness/thumb/successors.py's successors (in Thumb and in ARM state) and the reading of the code's
 * literals (branch_tables: _literal, formed_address, wide_constant), for
 * the rules ported; BAIL for the others. */
#include "paths.h"

#include <string.h>

#define LOOKBACK 9 /* instructions decode_before finds in 16 bytes, and one */
#define ANYWHERE INT64_MIN /* decode_before over the program's code, not only the function's */

void ints_add(Ints *list, int64_t value) {
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? 2 * list->capacity : 16;
        list->items = PyMem_Realloc(list->items, sizeof(int64_t) * (size_t)list->capacity);
    }
    list->items[list->count++] = value;
}

void ints_free(Ints *list) { PyMem_Free(list->items); }

bool in_function(const Analysis *a, int64_t address) { return a->start <= address && address < a->end; }

/* Is the byte at `address` data: in the function, by its map; outside it,
 * among the outer bytes, which gap_spans has sorted before it asks. */
bool is_data(const Analysis *a, int64_t address) {
    if (in_function(a, address)) return a->data[address - a->start];
    Py_ssize_t low = 0, high = a->outer_data.count;
    while (low < high) {
        Py_ssize_t middle = (low + high) / 2;
        if (a->outer_data.items[middle] < address) low = middle + 1;
        else high = middle;
    }
    return low < a->outer_data.count && a->outer_data.items[low] == address;
}

void mark_data(Analysis *a, int64_t first, int64_t size) {
    for (int64_t byte = first; byte < first + size; byte++) {
        if (in_function(a, byte)) a->data[byte - a->start] = 1;
        else ints_add(&a->outer_data, byte); /* repeats do no harm: gap_spans passes over them */
    }
}

/* Is `target` (None when `has`) among the functions that never return? Asked is remembered (_Asked). */
Step never_returns(Analysis *a, bool has, int64_t target, bool *answer) {
    PyObject *key = has ? PyLong_FromLongLong(target) : Py_NewRef(Py_None);
    if (!key || PySet_Add(a->asked, key)) {
        Py_XDECREF(key);
        return FAILED;
    }
    int found = PySet_Contains(a->noreturn, key);
    Py_DECREF(key);
    if (found < 0) return FAILED;
    *answer = found;
    return GO_ON;
}

/* The word at `address`, of the bytes there (int.from_bytes of code_at(address, 4)). */
static int64_t word_at(const Analysis *a, int64_t address) {
    uint8_t bytes[4];
    int got = code_read(a->code, address, bytes, 4);
    int64_t value = 0;
    for (int i = got - 1; i >= 0; i--) value = value << 8 | bytes[i];
    return value;
}

/* branch_tables.formed_address: the address `add rX, pc` forms from a literal loaded just before. */
bool formed_address(Analysis *a, const Insn *insn, int64_t *formed) {
    bool pc_source = false;
    int64_t offset = insn->nregs ? insn->regs[0] : NO_REG;
    bool offset_found = false;
    for (int i = 1; i < insn->nregs; i++) {
        if (insn->regs[i] == REG_PC) pc_source = true;
        else if (!offset_found) offset = insn->regs[i], offset_found = true;
    }
    if (!(insn->opcode == OP_ADD) || insn->has_imm || !pc_source || !insn->nregs) return false;
    Insn earlier[LOOKBACK];
    int n = decode_before(a->code, insn->address, 16, ANYWHERE, insn->arm, earlier, LOOKBACK);
    for (int i = n - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if (writes_reg(e, offset)) {
            int64_t literal;
            if (e->conditional || !(e->opcode == OP_LDR) || !literal_span(e, &literal) || !e->nregs || e->regs[0] != offset)
                return false;
            *formed = (word_at(a, literal) + insn->address + (insn->arm ? 8 : 4)) & 0xFFFFFFFF; /* pc as `add` reads it */
            return true;
        }
        if (e->transfers) return false;
    }
    return false;
}

/* branch_tables.wide_constant: the value `movw rX, #lo; movt rX, #hi` makes. */
static bool wide_constant(Analysis *a, const Insn *insn, int64_t *value) {
    if (!(insn->opcode == OP_MOVT) || !insn->has_imm || insn->conditional || !insn->nregs) return false;
    Insn earlier[LOOKBACK];
    int n = decode_before(a->code, insn->address, 16, ANYWHERE, insn->arm, earlier, LOOKBACK);
    for (int i = n - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if (writes_reg(e, insn->regs[0])) {
            if (!(e->opcode == OP_MOVW) || e->conditional || !e->has_imm) return false;
            *value = e->imm | insn->imm << 16;
            return true;
        }
        if (e->transfers) return false;
    }
    return false;
}

/* branch_tables.thunk_target: where `movw rX, #lo; movt rX, #hi; add rX, pc;
 * bx rX` (an lld long-branch thunk, Thumb code) goes, its state in bit 0. */
bool thunk_target(Analysis *a, const Insn *insn, int64_t *target) {
    if (!(insn->opcode == OP_BX) || insn->arm || insn->nregs != 1 || insn->regs[0] == REG_LR || insn->regs[0] == REG_PC)
        return false;
    Insn earlier[LOOKBACK];
    int n = decode_before(a->code, insn->address, 12, ANYWHERE, false, earlier, LOOKBACK);
    if (n < 3) return false;
    const Insn *add = &earlier[n - 1], *movt = &earlier[n - 2];
    int64_t value;
    if (!(add->opcode == OP_ADD) || add->nregs != 2 || add->regs[0] != insn->regs[0] || add->regs[1] != REG_PC
        || add->has_imm || !movt->nregs || movt->regs[0] != insn->regs[0] || !wide_constant(a, movt, &value))
        return false;
    *target = (value + add->address + 4) & 0xFFFFFFFF;
    return true;
}

/* A jump through a register other than lr: `bx rN`, `mov pc, rN`. */
static bool through_register(const Insn *insn) {
    bool from_lr = insn->nregs && insn->regs[insn->nregs - 1] == REG_LR;
    return ((insn->opcode == OP_BX) || ((insn->opcode == OP_MOV) && writes_reg(insn, REG_PC))) && !from_lr;
}

/* A table branch of Thumb code: tbb/tbh, `ldr pc, [rX, ...]`, `bx rN` (data_read reads their tables; in
 * ARM code no table is read, and `ldr pc` is a return or a tail call). */
static bool reads_table(const Insn *insn) {
    return !insn->arm && ((insn->opcode == OP_TBB) || (insn->opcode == OP_TBH)
        || ((insn->opcode == OP_LDR) && writes_reg(insn, REG_PC) && insn->has_mem && insn->mem_base != REG_SP)
        || ((insn->opcode == OP_BX) && !(insn->nregs == 1 && insn->regs[0] == REG_LR)));
}

/* A jump through a table, a ladder or a register (tables.c). */
static bool jumps_through_table(const Insn *insn) { return reads_table(insn) || through_register(insn); }

/* _Analysis._read: the data the code reads (literals; tables, in Thumb code), and the words it loads. */
Step read_code(Analysis *a, const Insn *insn) {
    if (reads_table(insn)) {
        table_data(a, insn);
        return GO_ON;
    }
    int64_t first, value;
    int size = literal_span(insn, &first);
    if (size) mark_data(a, first, size);
    if ((insn->opcode == OP_LDR) && size && !writes_reg(insn, REG_PC)) ints_add(&a->loaded, word_at(a, first));
    else if (wide_constant(a, insn, &value)) ints_add(&a->loaded, value);
    return GO_ON;
}

static bool sets_flags(const Insn *insn) { return insn->writes_other || insn->flag_named; }

static bool holds(int fact, int condition) {
    if (condition == ALWAYS || fact < 0) return true;
    return (fact >> 1) == condition ? fact & 1 : !(fact & 1);
}

Pending *pending_slot(Analysis *a) {
    if (a->npending == a->pending_capacity) {
        a->pending_capacity = a->pending_capacity ? 2 * a->pending_capacity : 64;
        a->pending = PyMem_Realloc(a->pending, sizeof(Pending) * (size_t)a->pending_capacity);
    }
    return &a->pending[a->npending++];
}

static void go(Analysis *a, int64_t address, const Path *path) {
    Pending *pending = pending_slot(a);
    pending->address = address;
    pending->path = *path;
}

/* successors._executed, for the rules ported: how many successors it went to. */
static Step executed(Analysis *a, const Insn *insn, const Path *path, int64_t following, int *count) {
    Path onward = *path;
    if (sets_flags(insn)) onward.fact = -1;
    if (!path->state.unknown) {
        Step step = after(a->code, a->start, insn, &path->state, &onward.state);
        if (step) return step;
    }
    *count = 0;
    bool pc_written = writes_reg(insn, REG_PC), call = (insn->opcode == OP_BL) || (insn->opcode == OP_BLX), ends;
    if ((insn->opcode == OP_CBZ) || (insn->opcode == OP_CBNZ)) {
        go(a, insn->imm, &onward), go(a, following, &onward), *count = 2;
        return GO_ON;
    }
    if (call) {
        Step step = never_returns(a, insn->has_imm, insn->imm, &ends);
        if (step || ends) return step;
    }
    if ((insn->opcode == OP_BX) && insn->nregs == 1 && insn->regs[0] == REG_PC) /* into ARM state */
        return insn->address % 4 && !insn->arm ? refuse_insn(insn, " at a halfword: ARM code would start unaligned")
                                               : give_up("into ARM state", insn->address);
    if ((insn->opcode == OP_B)) {
        if (in_function(a, insn->imm)) go(a, insn->imm, &onward), (*count)++;
        if (insn->conditional) go(a, following, &onward), (*count)++;
        return GO_ON;
    }
    if (jumps_through_table(insn)) return table_successors(a, insn, &path->state, &onward, count);
    if ((insn->opcode == OP_BX)
        || (pc_written && ((insn->opcode == OP_POP) || (insn->opcode == OP_LDR) || (insn->opcode == OP_LDM) || (insn->opcode == OP_MOV))))
        return GO_ON; /* a return */
    if ((insn->opcode == OP_UDF) || (insn->opcode == OP_BKPT)) return GO_ON;
    if (insn->arm && (insn->opcode == OP_ADD) && insn->nregs >= 2 && insn->regs[0] == REG_PC && insn->regs[1] == REG_PC
        && !insn->has_imm)
        return give_up("a ladder in ARM state", insn->address); /* glibc's memcpy: `add pc, pc, rN` */
    if ((insn->transfers && !call && !(insn->opcode == OP_SVC)) || (pc_written && !call))
        return refuse_insn(insn, " leaves for an address the analysis cannot follow");
    go(a, following, &onward), *count = 1;
    return GO_ON;
}

/* successors._arm_successors: in ARM state any instruction may carry a
 * condition of its own, and runs or is passed over by it, as an IT block's
 * one instruction would; the path's fact decides where it knows the flags. */
static Step arm_successors(Analysis *a, const Insn *insn, const Path *path, int64_t following, int *count) {
    if (!insn->conditional) return executed(a, insn, path, following, count);
    Insn runs = *insn;
    runs.conditional = false, runs.condition = ALWAYS;
    int condition = insn->condition;
    if (path->fact >= 0 && (path->fact >> 1) >> 1 == condition >> 1) {
        if (holds(path->fact, condition)) return executed(a, &runs, path, following, count);
        go(a, following, path), *count = 1;
        return GO_ON;
    }
    Path passed = *path, taken = *path;
    passed.fact = condition * 2;
    taken.fact = condition * 2 + 1;
    go(a, following, &passed);
    Step step = executed(a, &runs, &taken, following, count);
    (*count)++;
    return step;
}

/* successors.successors: in Thumb state IT blocks split paths by their condition. */
Step successors(Analysis *a, const Insn *insn, const Path *path, int *count) {
    int64_t following = (int64_t)insn->address + insn->size;
    if (insn->arm) return arm_successors(a, insn, path, following, count);
    if (insn->it) {
        uint8_t bytes[2];
        if (code_read(a->code, insn->address, bytes, 2) < 2) return give_up("an IT block unread", insn->address);
        int first = bytes[0] | bytes[1] << 8, firstcond = first >> 4 & 0xF, mask = first & 0xF;
        if (!mask) return give_up("an IT block of no instruction", insn->address);
        Path next = *path;
        next.nblock = 4 - __builtin_ctz((unsigned)mask);
        next.block[0] = firstcond;
        for (int i = 1; i < next.nblock; i++) next.block[i] = (firstcond & 0xE) | (mask >> (4 - i) & 1);
        if (path->fact >= 0 && (path->fact >> 1) >> 1 == firstcond >> 1) {
            go(a, following, &next), *count = 1;
            return GO_ON;
        }
        next.fact = firstcond * 2 + 1;
        go(a, following, &next);
        next.fact = firstcond * 2;
        go(a, following, &next), *count = 2;
        return GO_ON;
    }
    Path rest = *path;
    if (path->nblock) {
        int condition = path->block[0];
        rest.nblock--;
        memmove(rest.block, rest.block + 1, sizeof(int) * (size_t)rest.nblock);
        if (!holds(rest.fact, condition)) {
            go(a, following, &rest), *count = 1;
            return GO_ON;
        }
    }
    return executed(a, insn, &rest, following, count);
}


/* start_shapes._to_leaf_return: a conditional branch forward to a `bx lr`
 * among the next few instructions there, with no other branch or change of sp. */
static bool to_leaf_return(const Code *code, const Insn *branch, int64_t end, bool arm) {
    bool b = branch->opcode == OP_B, cb = branch->opcode == OP_CBZ || branch->opcode == OP_CBNZ;
    if (!(b || cb) || !(branch->conditional || !b) || !branch->has_imm
        || !((int64_t)branch->address < branch->imm && branch->imm < end))
        return false;
    int64_t address = branch->imm;
    for (int i = 0; i < 3; i++) {
        Insn insn;
        if (!decode_at(code, address, arm, &insn)) return false;
        if (writes_reg(&insn, REG_SP) || insn.transfers)
            return insn.opcode == OP_BX && insn.nregs == 1 && insn.regs[0] == REG_LR;
        address += insn.size;
    }
    return false;
}

/* start_shapes.pushes_lr: does the code at `address` (in ARM state with
 * `arm`) push lr among its first few instructions, before any other branch
 * or change of sp? */
bool pushes_lr(const Code *code, int64_t address, int64_t end, bool arm) {
    for (int i = 0; i < 6; i++) {
        Insn insn;
        if (address >= end || !decode_at(code, address, arm, &insn) || insn.it
            || (insn.transfers && !to_leaf_return(code, &insn, end, arm)))
            return false;
        if (writes_reg(&insn, REG_SP) || insn.opcode == OP_PUSH) {
            if (insn.opcode != OP_PUSH) return false;
            for (int r = 0; r < insn.nregs; r++)
                if (insn.regs[r] == REG_LR) return true;
            return false;
        }
        address += insn.size;
    }
    return false;
}
