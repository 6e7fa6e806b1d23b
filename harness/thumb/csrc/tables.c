/* Branch tables, ladders and computed gotos: harness/thumb/branch_tables.py
 * and the jumps of successors._executed that lead through them, in Thumb
 * state. Where the Python raises Unknowable, REFUSED. */
#include "paths.h"

#define LOOKBACK 9 /* instructions decode_before finds in 16 bytes, and one */
#define ANYWHERE INT64_MIN
#define MAX_TABLE_ENTRIES (1 << 16) /* branch_tables.MAX_TABLE_ENTRIES */
#define CANNOT_FOLLOW " leaves for an address the analysis cannot follow" /* branch_tables.CANNOT_FOLLOW */
#define LEADS_OUT ": a table entry leads out of the function"

static int64_t read_le(const Analysis *a, int64_t address, int size, bool is_signed) {
    uint8_t bytes[4] = {0};
    int got = code_read(a->code, address, bytes, size);
    uint64_t value = 0;
    for (int i = got - 1; i >= 0; i--) value = value << 8 | bytes[i];
    if (is_signed && got == 4) return (int32_t)(uint32_t)value;
    if (is_signed && got > 0 && bytes[got - 1] & 0x80) return (int64_t)value - ((int64_t)1 << (8 * got));
    return (int64_t)value;
}

static int before(const Analysis *a, const Insn *insn, Insn *out) {
    return decode_before(a->code, insn->address, 16, ANYWHERE, insn->arm, out, LOOKBACK);
}

/* _pc_relative: what the last instruction before `insn` writing `reg` put there pc-relative. */
static bool pc_relative(const Analysis *a, int64_t reg, const Insn *insn, int64_t *address) {
    Insn earlier[LOOKBACK];
    for (int i = before(a, insn, earlier) - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if (writes_reg(e, reg)) {
            bool from_pc = e->nregs == 1 || (e->nregs == 2 && e->regs[1] == REG_PC);
            if (e->conditional || !((e->opcode == OP_ADR) || (e->opcode == OP_ADD)) || !from_pc || !e->has_imm) return false;
            *address = pc_base(e) + e->imm;
            return true;
        }
    }
    return false;
}

/* guarded_entries: n + 1 from the `cmp rI, #n` guarding a table branch on rI. */
static bool guarded_entries(const Analysis *a, const Insn *insn, int64_t *count) {
    Insn earlier[LOOKBACK];
    int64_t index = insn->index_reg;
    bool reloaded = false;
    for (int i = before(a, insn, earlier) - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if ((e->opcode == OP_CMP) && e->has_imm && (reloaded || (index >= 0 && e->nregs && e->regs[0] == index))) {
            *count = e->imm + 1;
            return e->imm < MAX_TABLE_ENTRIES;
        }
        if (index >= 0 && writes_reg(e, index) && !e->conditional) {
            if (!((e->opcode == OP_LDR) && e->has_mem && e->mem_base == REG_SP)) return false;
            reloaded = true;
        }
    }
    return false;
}

static bool jump_table_address(const Analysis *a, const Insn *insn, int64_t *table) {
    if (insn->mem_base == REG_PC) {
        *table = (int64_t)insn->address + insn->size;
        return true;
    }
    return pc_relative(a, insn->mem_base, insn, table);
}

/* table_address: where `adr rX, table` (or `addw rX, pc, #n`) right before put the base. */
static bool table_address(const Analysis *a, const Insn *insn, int64_t *table) {
    for (int back = 2; back <= 4; back += 2) {
        Insn found;
        if (!decode_at(a->code, (int64_t)insn->address - back, false, &found) || found.size != back || !found.has_imm) continue;
        if (((found.opcode == OP_ADR) && found.nregs == 1 && found.regs[0] == insn->mem_base)
            || ((found.opcode == OP_ADD) && found.nregs == 2 && found.regs[0] == insn->mem_base && found.regs[1] == REG_PC)) {
            *table = pc_base(&found) + found.imm;
            return true;
        }
    }
    return false;
}

/* offset_table_at: GCC's `adr rT, table; ldr rO, [rT, rI, lsl #2]; add rT, rO; bx rT`. */
static bool offset_table_at(const Analysis *a, const Insn *insn, int64_t *table, bool *bounded, int64_t *count) {
    Insn add, load, adr;
    int64_t at = insn->address;
    if (insn->arm || !decode_at(a->code, at - 2, false, &add) || !decode_at(a->code, at - 6, false, &load)
        || !decode_at(a->code, at - 8, false, &adr))
        return false;
    if (!insn->nregs || !load.nregs) return false;
    int64_t reg = insn->regs[0];
    if (!(add.size == 2 && load.size == 4 && adr.size == 2 && (add.opcode == OP_ADD) && add.nregs == 2 && add.regs[0] == reg
          && add.regs[1] == load.regs[0] && (load.opcode == OP_LDR) && load.has_mem && load.mem_base == reg
          && (adr.opcode == OP_ADR) && adr.nregs == 1 && adr.regs[0] == reg && adr.has_imm))
        return false;
    *table = pc_base(&adr) + adr.imm;
    *bounded = guarded_entries(a, &load, count);
    return true;
}

/* ladder_start: where `adr rB, ladder; add rN, rB, rI, lsl #k; mov pc, rN` jumps into. */
static bool ladder_start(const Analysis *a, const Insn *insn, int64_t *first) {
    if (!insn->nregs) return false;
    int64_t reg = insn->regs[insn->nregs - 1];
    Insn earlier[LOOKBACK];
    for (int i = before(a, insn, earlier) - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if (writes_reg(e, reg)) {
            if (!(e->opcode == OP_ADD) || e->conditional || e->has_imm || e->nregs != 3 || e->regs[0] != reg) return false;
            return pc_relative(a, e->regs[1], e, first);
        }
        if (e->transfers) return false;
    }
    return false;
}

static void go_to(Analysis *a, int64_t target, const Path *onward, int *count) {
    Pending *pending = pending_slot(a);
    pending->address = target;
    pending->path = *onward;
    (*count)++;
}

/* The data a table branch reads (data_read's tables). */
void table_data(Analysis *a, const Insn *insn) {
    int64_t table, count = 0;
    bool bounded;
    if ((insn->opcode == OP_TBB) || (insn->opcode == OP_TBH)) {
        if (!guarded_entries(a, insn, &count)) count = 0;
        if (jump_table_address(a, insn, &table)) mark_data(a, table, count * ((insn->opcode == OP_TBB) ? 1 : 2));
    } else if ((insn->opcode == OP_LDR)) {
        if (table_address(a, insn, &table) && guarded_entries(a, insn, &count) && count) mark_data(a, table, 4 * count);
    } else if ((insn->opcode == OP_BX)) {
        if (offset_table_at(a, insn, &table, &bounded, &count) && bounded && count) mark_data(a, table, 4 * count);
    }
}

/* The successors of a jump through a table, a ladder or a register: tbb/tbh,
 * `ldr pc, [rX, rI, lsl #2]`, `bx rN` / `mov pc, rN` (the frame `before`
 * tells a tail call from a computed goto). */
Step table_successors(Analysis *a, const Insn *insn, const State *before_state, const Path *onward, int *count) {
    int64_t table, entries, target;
    bool bounded = false, pc_written = writes_reg(insn, REG_PC);
    if ((insn->opcode == OP_TBB) || (insn->opcode == OP_TBH)) {
        int size = (insn->opcode == OP_TBB) ? 1 : 2;
        if (!jump_table_address(a, insn, &table)) return refuse_insn(insn, CANNOT_FOLLOW);
        bounded = guarded_entries(a, insn, &entries);
        int64_t lowest = a->end, found = 0;
        while (!bounded || found < entries) {
            int64_t offset = table + size * found;
            target = (int64_t)insn->address + 4 + 2 * read_le(a, offset, size, false);
            if (!bounded && (offset + size > lowest || !in_function(a, target))) break;
            if (!in_function(a, target)) return refuse_insn(insn, LEADS_OUT);
            if (target < lowest) lowest = target;
            go_to(a, target, onward, count), found++;
        }
        return found ? GO_ON : refuse_insn(insn, ": no table found");
    }
    if ((insn->opcode == OP_LDR) && pc_written && insn->has_mem && insn->mem_base != REG_SP) {
        if (!table_address(a, insn, &table) || !guarded_entries(a, insn, &entries))
            return refuse_insn(insn, CANNOT_FOLLOW);
        for (int64_t i = 0; i < entries; i++)
            if (!in_function(a, read_le(a, table + 4 * i, 4, false) & ~(int64_t)1))
                return refuse_insn(insn, LEADS_OUT);
        for (int64_t i = 0; i < entries; i++) go_to(a, read_le(a, table + 4 * i, 4, false) & ~(int64_t)1, onward, count);
        return GO_ON;
    }
    bool bx = (insn->opcode == OP_BX);
    if (bx && !(insn->nregs == 1 && insn->regs[0] == REG_LR) && offset_table_at(a, insn, &table, &bounded, &entries)) {
        if (!bounded) return refuse_insn(insn, ": no bound on its table found");
        for (int64_t i = 0; i < entries; i++)
            if (!in_function(a, (table + read_le(a, table + 4 * i, 4, true)) & ~(int64_t)1))
                return refuse_insn(insn, LEADS_OUT);
        for (int64_t i = 0; i < entries; i++) go_to(a, (table + read_le(a, table + 4 * i, 4, true)) & ~(int64_t)1, onward, count);
        return GO_ON;
    }
    bool through_register = (bx || ((insn->opcode == OP_MOV) && pc_written)) && insn->nregs
        && insn->regs[insn->nregs - 1] != REG_LR;
    int64_t first;
    if (through_register && ladder_start(a, insn, &first) && in_function(a, first)) {
        for (int64_t address = first; address < a->end;) { /* _ladder */
            go_to(a, address, onward, count);
            Insn step;
            if (!decode_at(a->code, address, insn->arm, &step) || step.transfers || writes_reg(&step, REG_SP)
                || writes_reg(&step, REG_PC))
                break;
            address += step.size;
        }
        return GO_ON;
    }
    if (through_register && !torn_down(before_state)) { /* a computed goto, to the labels the data holds */
        if (!a->labels.count) return refuse_insn(insn, " jumps with the frame set up, and no data holds a label here");
        for (Py_ssize_t i = 0; i < a->labels.count; i++) go_to(a, a->labels.items[i], onward, count);
        return GO_ON;
    }
    return GO_ON; /* a return, or a tail call through a register: no successor */
}
