/* What one instruction does to the frame: harness/thumb/frame_effects.py,
 * function for function. Where the Python raises Unknowable, REFUSED, named alike. */
#include "analysis.h"

#include <string.h>

#define LOOKBACK 17 /* instructions decode_before can find in 32 bytes, and one */
#define FRAME_POINTER_COPY_SPAN 32 /* frame_effects.FRAME_POINTER_COPY_SPAN */


static int saved_index(const State *s, int64_t reg) {
    for (int i = 0; i < s->nsaved; i++)
        if (s->saved[i].reg == reg) return i;
    return -1;
}

bool saved_reg(const State *s, int64_t reg) { return saved_index(s, reg) >= 0; }

static void saved_set(State *s, int64_t reg, int64_t slot) {
    int i = saved_index(s, reg);
    if (i >= 0) {
        s->saved[i].slot = slot;
        return;
    }
    if (s->nsaved >= MAX_SAVED) return; /* only callee-saved registers are saved: never */
    for (i = s->nsaved; i > 0 && s->saved[i - 1].reg > reg; i--) s->saved[i] = s->saved[i - 1];
    s->saved[i].reg = reg;
    s->saved[i].slot = slot;
    s->nsaved++;
}

static void saved_del(State *s, int64_t reg) {
    int i = saved_index(s, reg);
    if (i < 0) return;
    memmove(&s->saved[i], &s->saved[i + 1], sizeof(Save) * (size_t)(s->nsaved - i - 1));
    s->nsaved--;
}

const State UNKNOWN_STATE = {.unknown = true, .cfa_reg = -1};

bool state_equal(const State *a, const State *b) {
    if (a->unknown || b->unknown) return a->unknown == b->unknown;
    if (a->depth_known != b->depth_known || (a->depth_known && a->depth != b->depth)) return false;
    if (a->fp_known != b->fp_known || (a->fp_known && a->fp_offset != b->fp_offset)) return false;
    if (a->cfa_reg != b->cfa_reg || a->nsaved != b->nsaved || a->clobbered != b->clobbered) return false;
    for (int i = 0; i < a->nsaved; i++)
        if (a->saved[i].reg != b->saved[i].reg || a->saved[i].slot != b->saved[i].slot) return false;
    return true;
}

bool torn_down(const State *s) { return !s->unknown && s->depth_known && s->depth == 0 && s->cfa_reg == REG_SP && !s->nsaved; }

bool lost(const State *s) {
    uint32_t left = s->clobbered & ~tracked_bit(REG_LR);
    for (int i = 0; i < s->nsaved; i++) left &= ~tracked_bit(s->saved[i].reg);
    return left != 0;
}

/* (The CFA is on sp or on the frame pointer of the function's state.) */
static Step moved(const State *s, int64_t delta, State *out) {
    *out = *s;
    if (!s->depth_known) return s->cfa_reg != REG_SP ? GO_ON : refuse("sp moves where its distance to the frame is unknown", 0);
    out->depth = s->depth + delta;
    if (s->cfa_reg != REG_SP && delta < 0) out->cfa_reg = REG_SP;
    return GO_ON;
}

static Step push(const State *s, const int64_t *regs, const int64_t *sizes, int n, State *out) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    Step step = moved(s, total, out);
    if (step) return step;
    if (!out->depth_known) return GO_ON;
    int64_t slot = -out->depth;
    for (int i = 0; i < n; i++) {
        if (callee_saved(regs[i]) && !(s->clobbered & tracked_bit(regs[i])) && !saved_reg(out, regs[i]))
            saved_set(out, regs[i], slot);
        slot += sizes[i];
    }
    return GO_ON;
}

static Step pop(const State *s, const int64_t *regs, int n, int64_t size, int fp, State *out) {
    if (!s->depth_known) return refuse("a pop where sp's distance to the frame is unknown", 0);
    *out = *s;
    bool frame_pointer = false;
    for (int i = 0; i < n; i++) {
        int64_t slot = -s->depth + size * i, reg = regs[i];
        frame_pointer |= reg == fp;
        if (reg == REG_PC) continue;
        int at = saved_index(out, reg);
        if (at >= 0 && out->saved[at].slot == slot) {
            saved_del(out, reg);
            out->clobbered &= ~tracked_bit(reg);
        } else if (callee_saved(reg)) {
            saved_del(out, reg);
            out->clobbered |= tracked_bit(reg);
        }
    }
    out->depth = s->depth - size * n;
    out->cfa_reg = REG_SP;
    if (frame_pointer) out->fp_known = false;
    return GO_ON;
}

static void clobber_regs(State *s, const int64_t *regs, int n) {
    for (int i = 0; i < n; i++)
        if (callee_saved(regs[i])) s->clobbered |= tracked_bit(regs[i]);
}

static Step unknown_sp(const Insn *insn, const State *s, State *out) {
    if (!s->fp_known) return refuse_insn(insn, " sets sp in a way the analysis does not model");
    *out = *s;
    out->depth_known = false;
    out->cfa_reg = frame_pointer(insn->arm);
    return GO_ON;
}

static void operand_regs(const Insn *insn, int first, int count, int64_t *out, int *n) {
    *n = 0;
    for (int i = first; i < insn->nregs && i < first + count; i++) out[(*n)++] = insn->regs[i];
}

static Step store(const Insn *insn, const State *s, State *out) {
    int64_t width = (insn->opcode == OP_STR) ? 4 : (insn->opcode == OP_STRD) ? 8 : (insn->opcode == OP_STRH) ? 2 : 1;
    int64_t displacement = insn->mem_disp, regs[4], sizes[4] = {4, 4, 4, 4};
    int n;
    operand_regs(insn, 0, (int)(width / 4), regs, &n);
    if (insn->writeback_text) {
        if (width < 4 || displacement > -width || displacement % 4) return unknown_sp(insn, s, out);
        regs[n] = NO_REG;
        sizes[n] = -displacement - width;
        return push(s, regs, sizes, n + 1, out);
    }
    if (insn->post_index) return refuse_insn(insn, " moves sp after storing");
    *out = *s;
    if (!s->depth_known) return GO_ON;
    int64_t low = -s->depth + displacement;
    out->nsaved = 0;
    for (int i = 0; i < s->nsaved; i++) {
        const Save *save = &s->saved[i];
        if (save->slot + (save->reg >= DWARF_D0 ? 8 : 4) <= low || save->slot >= low + width) out->saved[out->nsaved++] = *save;
    }
    for (int i = 0; i < n; i++)
        if (callee_saved(regs[i]) && !(s->clobbered & tracked_bit(regs[i])) && !saved_reg(out, regs[i]))
            saved_set(out, regs[i], -s->depth + displacement + 4 * i);
    return GO_ON;
}

static Step load(const Insn *insn, const State *s, State *out) {
    int count = (insn->opcode == OP_LDRD) ? 2 : 1, n;
    int64_t loaded[2];
    operand_regs(insn, 0, count, loaded, &n);
    if (insn->post_index) {
        if (!insn->has_imm || insn->imm < 4 * count || insn->imm % 4) return unknown_sp(insn, s, out);
        State popped;
        Step step = pop(s, loaded, n, 4, frame_pointer(insn->arm), &popped);
        if (step) return step;
        if (insn->imm > 4 * count) return moved(&popped, 4 * count - insn->imm, out);
        *out = popped;
        return GO_ON;
    }
    if (insn->writeback_text) return unknown_sp(insn, s, out);
    *out = *s;
    if (!s->depth_known) {
        clobber_regs(out, loaded, n);
        return GO_ON;
    }
    for (int i = 0; i < n; i++) {
        int at = saved_index(out, loaded[i]);
        if (at >= 0 && out->saved[at].slot == -s->depth + insn->mem_disp + 4 * i) {
            saved_del(out, loaded[i]);
            out->clobbered &= ~tracked_bit(loaded[i]);
        } else if (callee_saved(loaded[i])) {
            out->clobbered |= tracked_bit(loaded[i]);
        }
    }
    return GO_ON;
}

/* frame_effects._constant_before: movw/movt of the one source just before. */
static bool constant_before(const Code *own, int64_t lowest, const Insn *insn, int64_t source, int64_t *value) {
    bool known = false;
    for (int back = 8; back >= 4; back -= 4) {
        Insn found;
        int64_t at = (int64_t)insn->address - back;
        if (at < lowest || !decode_at(own, at, insn->arm, &found)) continue;
        if (found.size != 4 || found.nregs < 1 || found.regs[0] != source || !found.has_imm) continue;
        if ((found.opcode == OP_MOVW)) {
            *value = found.imm;
            known = true;
        } else if ((found.opcode == OP_MOVT) && known) {
            *value |= found.imm << 16;
        }
    }
    return known;
}

/* frame_effects._frame_pointer_copy_before: k where `reg` was last set to fp - k. */
static bool frame_pointer_copy_before(const Code *own, int64_t lowest, const Insn *insn, int64_t reg, int64_t *below) {
    Insn earlier[LOOKBACK];
    int n = decode_before(own, insn->address, FRAME_POINTER_COPY_SPAN, lowest, insn->arm, earlier, LOOKBACK);
    for (int i = n - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if (writes_reg(e, reg)) {
            bool from_fp = e->nregs == 2 && e->regs[0] == reg && e->regs[1] == frame_pointer(insn->arm);
            if (((e->opcode == OP_SUB) || (e->opcode == OP_ADD)) && from_fp && e->has_imm) {
                *below = (e->opcode == OP_SUB) ? e->imm : -e->imm;
                return true;
            }
            *below = 0;
            return (e->opcode == OP_MOV) && from_fp;
        }
        if (e->transfers) return false;
    }
    return false;
}

/* frame_effects._sp_copies_before: does a `mov rX, sp` just before leave sp in one of `insn`'s registers? */
static bool stores_sp_copy(const Code *own, int64_t lowest, const Insn *insn) {
    Insn earlier[LOOKBACK];
    int n = decode_before(own, insn->address, 8, lowest, insn->arm, earlier, LOOKBACK);
    Insn written = {0};
    for (int i = n - 1; i >= 0; i--) {
        const Insn *e = &earlier[i];
        if (e->transfers) break;
        if ((e->opcode == OP_MOV) && e->nregs == 2 && e->regs[1] == REG_SP && !writes_reg(&written, e->regs[0]))
            for (int r = 0; r < insn->nregs; r++)
                if (insn->regs[r] == e->regs[0]) return true;
        written.writes |= e->writes;
        written.writes_d |= e->writes_d;
        written.writes_other |= e->writes_other;
    }
    return false;
}

static Step sp_written(const Code *own, int64_t lowest, const Insn *insn, const State *s, State *out) {
    int first = insn->nregs >= 2 && insn->regs[1] == REG_SP ? 2 : 1;
    int nsources = insn->nregs > first ? insn->nregs - first : 0;
    int64_t source = nsources ? insn->regs[first] : 0;
    bool to_sp = insn->nregs >= 1 && insn->regs[0] == REG_SP;
    bool add = (insn->opcode == OP_ADD), sub = (insn->opcode == OP_SUB), mov = (insn->opcode == OP_MOV);
    if ((sub || add) && to_sp) {
        int64_t amount = insn->imm;
        bool known = nsources ? nsources == 1 && constant_before(own, lowest, insn, source, &amount) : insn->has_imm;
        if (known && nsources <= 1 && (!nsources || !insn->has_imm)) return moved(s, sub ? amount : -amount, out);
    }
    if ((mov || sub || add) && to_sp && nsources == 1 && source == frame_pointer(insn->arm) && s->fp_known) {
        int64_t imm = insn->has_imm ? insn->imm : 0;
        *out = *s;
        out->depth_known = true;
        out->depth = s->fp_offset + (add ? -imm : imm);
        out->cfa_reg = REG_SP;
        return GO_ON;
    }
    int64_t below;
    if (mov && nsources == 1 && s->fp_known && frame_pointer_copy_before(own, lowest, insn, source, &below)) {
        *out = *s;
        out->depth_known = true;
        out->depth = s->fp_offset + below;
        out->cfa_reg = REG_SP;
        return GO_ON;
    }
    return unknown_sp(insn, s, out);
}

static Step fp_written(const Insn *insn, const State *s, State *out) {
    bool all_fp = true;
    for (int i = 0; i < insn->nregs; i++) all_fp &= insn->regs[i] == frame_pointer(insn->arm);
    *out = *s;
    bool add = (insn->opcode == OP_ADD) || (insn->opcode == OP_ADDS), sub = (insn->opcode == OP_SUB) || (insn->opcode == OP_SUBS);
    if ((add || sub) && insn->has_imm && all_fp) {
        out->fp_offset = s->fp_offset - (add ? insn->imm : -insn->imm);
        return GO_ON;
    }
    if (s->cfa_reg != REG_SP) return refuse_insn(insn, " overwrites the frame pointer the CFA is defined by");
    out->fp_known = false;
    return GO_ON;
}

static Step effect(const Code *own, int64_t lowest, const Insn *insn, const State *s, State *out) {
    int64_t regs[MAX_OPERAND_REGS], sizes[MAX_OPERAND_REGS];
    int n;
    operand_regs(insn, 0, MAX_OPERAND_REGS, regs, &n);
    bool vpush = (insn->opcode == OP_VPUSH);
    if ((insn->opcode == OP_PUSH) || vpush) {
        if (!vpush && stores_sp_copy(own, lowest, insn))
            return refuse_insn(insn, " stores sp's value: a register dump a callee may rewrite");
        for (int i = 0; i < n; i++) sizes[i] = vpush ? 8 : 4;
        return push(s, regs, sizes, n, out);
    }
    int fp = frame_pointer(insn->arm);
    if ((insn->opcode == OP_POP) || (insn->opcode == OP_VPOP))
        return pop(s, regs, n, (insn->opcode == OP_POP) ? 4 : 8, fp, out);
    bool on_sp = insn->has_mem && insn->mem_base == REG_SP;
    if (on_sp && ((insn->opcode == OP_STR) || (insn->opcode == OP_STRD) || (insn->opcode == OP_STRH) || (insn->opcode == OP_STRB)))
        return store(insn, s, out);
    if (on_sp && ((insn->opcode == OP_LDR) || (insn->opcode == OP_LDRD))) return load(insn, s, out);
    *out = *s;
    if ((insn->opcode == OP_BL) || (insn->opcode == OP_BLX)) {
        out->clobbered |= tracked_bit(REG_LR);
        return GO_ON;
    }
    if (writes_reg(insn, REG_SP)) return sp_written(own, lowest, insn, s, out);
    if (((insn->opcode == OP_ADD) || (insn->opcode == OP_MOV)) && n >= 2 && regs[0] == fp && regs[1] == REG_SP && s->depth_known) {
        out->fp_known = true;
        out->fp_offset = s->depth - (insn->has_imm ? insn->imm : 0);
        out->clobbered |= tracked_bit(fp);
        return GO_ON;
    }
    if (writes_reg(insn, fp) && s->fp_known) return fp_written(insn, s, out);
    for (int reg = 4; reg <= REG_LR; reg++)
        if (callee_saved(reg) && writes_reg(insn, reg)) out->clobbered |= tracked_bit(reg);
    for (int d = 8; d <= 15; d++)
        if (insn->writes_d >> d & 1) out->clobbered |= tracked_bit(DWARF_D0 + d);
    return GO_ON;
}

/* frame_effects.after: the effect, then no save left below sp. `own`: the
 * code from `lowest` (the function's start) on. */
Step after(const Code *own, int64_t lowest, const Insn *insn, const State *in, State *out) {
    Step step = effect(own, lowest, insn, in, out);
    if (step) return step;
    if (!out->depth_known) return GO_ON;
    int kept = 0;
    for (int i = 0; i < out->nsaved; i++)
        if (out->saved[i].slot >= -out->depth) out->saved[kept++] = out->saved[i];
    out->nsaved = kept;
    return GO_ON;
}
