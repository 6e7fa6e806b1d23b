/* Epilogue plans in C, for the instructions compilers end functions with:
 * the twin of harness.thumb.epilogue.classify over capstone's decoding
 * (harness.thumb.disasm) and of EpilogueSimulator.plan
 * (harness.unwind.v2_epilogue), for the encodings below alone.
 *
 * A plan is made here where every instruction from pc to the return is
 * one of them (a branch: a tail call where it leaves the function, as the
 * v2 tables place functions; the plan declines where it does not); anything
 * else (another instruction, no return within EPILOGUE_LIMIT, too few
 * bytes) is left to Python, which stays the reference: tests hold every
 * step and plan made here to Python's (tests/test_epilogue.py). Its rule is made here too
 * (the twin of harness.unwind.v2_epilogue.rule_of, packed as
 * harness.verify.kernel.pack_rule packs it) and kept by the plan's steps,
 * as bytes, in the process's book (harness.verify.rule_book.RuleBook.plans):
 * an epilogue these instructions make costs no call into Python
 * (sources.c), where Python takes about 10 us a plan (some 45 plans a
 * generated program).
 *
 * Each handler is headed by its encoding (ARM ARM, Thumb); `first` and
 * `second` are the instruction's half-words. */
#include "kernel.h"

/* i:imm3:imm8 of a 32-bit data-processing (immediate) instruction: addw's and subw's value as it is. */
static uint32_t imm12_of(uint16_t first, uint16_t second) {
    return (uint32_t)(first >> 10 & 1) << 11 | (uint32_t)(second >> 12 & 7) << 8 | (second & 0xFF);
}

/* ThumbExpandImm(i:imm3:imm8) where it is a plain value below 2^16 (stack adjustments); -1 otherwise. */
static int64_t expanded_immediate(uint16_t first, uint16_t second) {
    const uint32_t imm12 = imm12_of(first, second), imm8 = imm12 & 0xFF;
    uint32_t value;
    if (!(imm12 >> 10)) {
        switch (imm12 >> 8 & 3) {
        case 0: value = imm8; break;
        case 1: value = imm8 << 16 | imm8; break;
        case 2: value = imm8 << 24 | imm8 << 8; break;
        default: value = imm8 * 0x01010101u; break;
        }
        if ((imm12 >> 8 & 3) && !imm8) return -1;  /* UNPREDICTABLE */
    } else {
        const uint32_t unrotated = 0x80 | (imm12 & 0x7F), rotation = imm12 >> 7;
        value = unrotated >> rotation | unrotated << (32 - rotation);
    }
    return value < 0x10000 ? (int64_t)value : -1;
}

/* A branch's step to address + 4 + offset (capstone's target), where that is an address; -1 otherwise. */
static int branch(PlanStep *step, int64_t address, int64_t offset) {
    const int64_t target = address + 4 + offset;
    if (target < 0 || target > UINT32_MAX) return -1;
    step->kind = STEP_BRANCH;
    step->regs = (uint32_t)target;
    return 0;
}

/* One instruction's step, the instruction at `address`; its size in *size; 0, or -1 where this twin does not
 * know it. */
static int step_of(const uint8_t *code, int64_t address, PlanStep *step, int *size) {
    const uint16_t first = (uint16_t)(code[0] | code[1] << 8), second = (uint16_t)(code[2] | code[3] << 8);
    memset(step, 0, sizeof *step);
    *size = 2;
    if (first >> 11 != 0x1D && first >> 11 != 0x1E && first >> 11 != 0x1F) {  /* 16-bit */
        if ((first & 0xF800) == 0xE000)  /* B T2: 11100 imm11, offset SignExtend(imm11:0) */
            return branch(step, address, (int64_t)((int32_t)((uint32_t)(first & 0x7FF) << 21) >> 20));
        if ((first & 0xFE00) == 0xBC00 && (first & 0x1FF)) {  /* POP T1: 1011 110 P list8 */
            step->kind = STEP_RESTORE;
            step->regs = (first & 0xFF) | (first & 0x100 ? 1u << PC : 0);
            return 0;
        }
        if ((first & 0xFF80) == 0xB000) {  /* ADD (SP plus immediate) T2: 1011 0000 0 imm7 */
            step->kind = STEP_RELEASE;
            step->a = (first & 0x7F) << 2;
            return 0;
        }
        if ((first & 0xFF87) == 0x4485 && (first >> 3 & 0xF) < SP) {  /* ADD (SP plus register) T2, rm < sp */
            step->kind = STEP_RELEASE_REG;
            step->a = first >> 3 & 0xF;
            return 0;
        }
        if (first == 0x46BD || first == 0x46DD) {  /* MOV (register) T1: mov sp, r7 / r11 */
            step->kind = STEP_RELEASE_FP;
            step->a = first >> 3 & 0xF;
            return 0;
        }
        if (first == 0x4770) { step->kind = STEP_RETURN_TO_LR; return 0; }  /* BX lr */
        if ((first & 0xFF87) == 0x4700 && (first >> 3 & 0xF) < SP) {  /* BX rm, rm < sp: a tail call */
            step->kind = STEP_BRANCH_REG;
            return 0;
        }
        return -1;
    }
    *size = 4;
    if ((first & 0xF800) == 0xF000 && (second & 0xD000) == 0x9000) {
        /* B T4: 11110 S imm10 | 10 J1 1 J2 imm11, offset SignExtend(S:I1:I2:imm10:imm11:0), Ix = NOT(Jx XOR S) */
        const uint32_t s = first >> 10 & 1, i1 = !((second >> 13 & 1) ^ s), i2 = !((second >> 11 & 1) ^ s);
        const uint32_t imm = s << 24 | i1 << 23 | i2 << 22 | (uint32_t)(first & 0x3FF) << 12 |
                             (uint32_t)(second & 0x7FF) << 1;
        return branch(step, address, (int64_t)((int32_t)(imm << 7) >> 7));
    }
    if (first == 0xE8BD && !(second & 0x2000) && (second & 0xDFFF) && (second & 0xC000) != 0xC000) {
        /* LDM T2 (pop.w; ldm.w sp! of one register): 1110 1000 1011 1101 | P M 0 list13 */
        step->kind = STEP_RESTORE;
        step->regs = second;
        return 0;
    }
    if (first == 0xF85D && (second & 0x0FFF) == 0x0B04 && (second >> 12) != SP) {
        /* LDR (immediate) T4, post-indexed: ldr rt, [sp], #4 */
        step->kind = STEP_RESTORE;
        step->regs = 1u << (second >> 12);
        return 0;
    }
    if ((first & 0xFFBF) == 0xECBD && (second & 0x0F01) == 0x0B00) {
        /* VPOP T1 (doubles): 1110 1100 1 D 11 1101 | Vd 1011 imm8 (even) */
        const int d = (first >> 6 & 1) << 4 | second >> 12, count = (second & 0xFF) >> 1;
        if (!count || count > 16 || d + count > 32) return -1;
        step->kind = STEP_RESTORE_VFP;
        step->a = d;
        step->b = count;
        return 0;
    }
    if ((second & 0x8F00) == 0x0D00) {  /* a data-processing (immediate) form writing sp */
        const int rn = first & 0xF;
        if ((first & 0xFBFF) == 0xF10D || (first & 0xFBFF) == 0xF20D) {
            /* ADD (SP plus immediate) T3 (add.w, S = 0) and T4 (addw): sp = sp + imm */
            const int64_t imm = (first & 0xFBF0) == 0xF100 ? expanded_immediate(first, second)
                                                            : (int64_t)imm12_of(first, second);
            if (imm < 0) return -1;
            step->kind = STEP_RELEASE;
            step->a = (int32_t)imm;
            return 0;
        }
        if (((first & 0xFBF0) == 0xF1A0 || (first & 0xFBF0) == 0xF2A0) && (rn == 7 || rn == 11)) {
            /* SUB (immediate) T3 (sub.w, S = 0) and T4 (subw): sp = r7 / r11 - imm */
            const int64_t imm = (first & 0xFBF0) == 0xF1A0 ? expanded_immediate(first, second)
                                                            : (int64_t)imm12_of(first, second);
            if (imm < 0) return -1;
            step->kind = STEP_RELEASE_FP;
            step->a = rn;
            step->b = (int32_t)imm;
            return 0;
        }
    }
    if (first == 0xEA4F && (second == 0x0D07 || second == 0x0D0B)) {  /* MOV (register) T3: mov.w sp, r7 / r11 */
        step->kind = STEP_RELEASE_FP;
        step->a = second & 0xF;
        return 0;
    }
    return -1;
}

/* harness.thumb.epilogue.ends_frame */
static int ends_frame(const PlanStep *step) {
    return step->kind == STEP_RETURN_TO_LR || step->kind == STEP_BRANCH_REG || step->kind == STEP_BRANCH ||
           (step->kind == STEP_RESTORE && step->regs >> PC & 1);
}

int functions_of(PyObject *functions, Py_buffer *view, FunctionStarts *out) {
    if (functions == Py_None) return 0;
    PyObject *starts;
    long long end;
    if (!PyArg_ParseTuple(functions, "OL", &starts, &end) ||
        PyObject_GetBuffer(starts, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS))
        return -1;
    if (view->itemsize != 8 || strcmp(view->format, "q")) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "the functions' first pcs are an int64 array (\"q\")");
        return -1;
    }
    *out = (FunctionStarts){ view->buf, view->len / 8, end };
    return 1;
}

/* The function holding pc (its index in `functions`), or -1 where none does. */
static Py_ssize_t function_of(const FunctionStarts *functions, int64_t pc) {
    if (!functions->count || pc < functions->starts[0] || pc >= functions->end) return -1;
    Py_ssize_t lo = 0, hi = functions->count;
    while (lo < hi) {  /* the first start above pc */
        const Py_ssize_t mid = lo + (hi - lo) / 2;
        if (functions->starts[mid] <= pc) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
}

int epilogue_plan(const uint8_t *code, int64_t bytes, int64_t address, const FunctionStarts *functions,
                  PlanStep *steps) {
    int64_t at = 0;
    for (int count = 0; count < EPILOGUE_LIMIT; count++) {
        int size;
        if (bytes - at < 4 || step_of(code + at, address + at, &steps[count], &size)) return -1;  /* Python's */
        at += size;
        if (steps[count].kind == STEP_BRANCH) {  /* a tail call, where it leaves the function */
            if (!functions) return -1;
            const Py_ssize_t here = function_of(functions, address);
            if (here >= 0 && here == function_of(functions, steps[count].regs)) return PLAN_DECLINES;
        }
        if (ends_frame(&steps[count])) return count + 1;
    }
    return -1;  /* no return within reach: Python declines */
}

/* A step as the NamedTuple of harness.thumb.epilogue it is the twin of, as a plain tuple (equal to it). */
static PyObject *step_object(const PlanStep *step) {
    switch (step->kind) {
    case STEP_RELEASE: return Py_BuildValue("(iOOis)", step->a, Py_None, Py_None, 0, "release");
    case STEP_RELEASE_REG: return Py_BuildValue("(iiOis)", 0, step->a, Py_None, 0, "release");
    case STEP_RELEASE_FP: return Py_BuildValue("(iOiis)", 0, Py_None, step->a, step->b, "release");
    case STEP_RESTORE_VFP: return Py_BuildValue("(iis)", step->a, step->b, "restore_vfp");
    case STEP_RETURN_TO_LR: return Py_BuildValue("(s)", "return_to_lr");
    case STEP_BRANCH_REG: return Py_BuildValue("(Os)", Py_None, "branch");
    case STEP_BRANCH: return Py_BuildValue("(ks)", (unsigned long)step->regs, "branch");
    default: break;
    }
    PyObject *regs = PyTuple_New(__builtin_popcount(step->regs));
    for (int reg = 0, at = 0; regs && reg <= PC; reg++)
        if (step->regs >> reg & 1) PyTuple_SET_ITEM(regs, at++, PyLong_FromLong(reg));
    return regs ? Py_BuildValue("(Ns)", regs, "restore") : NULL;
}

/* Append (reg, offset) to a rule's loads. */
static void load(int32_t *loads, int *count, int reg, int64_t offset) {
    loads[2 * *count] = reg;
    loads[2 * *count + 1] = (int32_t)offset;
    ++*count;
}

PyObject *epilogue_packed_rule(const PlanStep *steps, int count) {
    /* harness.unwind.v2_epilogue.rule_of: sp-based loads in order, unless the first step moves the base */
    int32_t base = SP, base_offset = 0, index = -1, pc_from_lr = 0;
    int32_t loads[2 * 16 * EPILOGUE_LIMIT], vfp_loads[2 * 16 * EPILOGUE_LIMIT];  /* at most 16 a step */
    int load_count = 0, vfp_count = 0;
    int64_t offset = 0;
    for (int position = 0; position < count; position++) {
        const PlanStep *step = &steps[position];
        switch (step->kind) {
        case STEP_RESTORE:
            for (int reg = 0; reg <= PC; reg++)
                if (step->regs >> reg & 1) { load(loads, &load_count, reg, offset); offset += 4; }
            break;
        case STEP_RESTORE_VFP:
            for (int d = step->a; d < step->a + step->b; d++) { load(vfp_loads, &vfp_count, d, offset); offset += 8; }
            break;
        case STEP_RELEASE: offset += step->a; break;
        case STEP_RELEASE_FP:
            if (position) Py_RETURN_NONE;  /* the base moves after loads: no rule (the step decides) */
            base = step->a, base_offset = -step->b;
            break;
        case STEP_RELEASE_REG:
            if (position) Py_RETURN_NONE;
            index = step->a;
            break;
        default: pc_from_lr = 1; break;  /* a return to lr, or a tail call */
        }
    }
    if (offset > INT32_MAX) Py_RETURN_NONE;  /* as pack_plain: beyond int32, the step runs */
    const RuleHeader header = { OUTSIDE_IT | (pc_from_lr ? PC_FROM_LR : 0), base, index, base_offset, (int32_t)offset,
                                0, 0, load_count, vfp_count, 0, 0, 0 };
    const size_t sizes[3] = { sizeof header, 2 * sizeof(int32_t) * (size_t)load_count,
                              2 * sizeof(int32_t) * (size_t)vfp_count };
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizes[0] + sizes[1] + sizes[2]));
    if (!out) return NULL;
    char *at = PyBytes_AS_STRING(out);
    memcpy(at, &header, sizes[0]);
    memcpy(at + sizes[0], loads, sizes[1]);
    memcpy(at + sizes[0] + sizes[1], vfp_loads, sizes[2]);
    return out;
}

PyObject *epilogue_plan_object(const uint8_t *code, Py_ssize_t bytes, int64_t address,
                               const FunctionStarts *functions) {
    PlanStep steps[EPILOGUE_LIMIT];
    const int count = epilogue_plan(code, bytes, address, functions, steps);
    if (count == PLAN_DECLINES) Py_RETURN_FALSE;
    if (count < 0) Py_RETURN_NONE;
    PyObject *plan = PyTuple_New(count);
    for (int i = 0; plan && i < count; i++) {
        PyObject *step = step_object(&steps[i]);
        if (!step) { Py_CLEAR(plan); break; }
        PyTuple_SET_ITEM(plan, i, step);
    }
    return plan ? Py_BuildValue("(NN)", plan, epilogue_packed_rule(steps, count)) : NULL;
}
