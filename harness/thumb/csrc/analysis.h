/* The frame analysis of harness/thumb/frame_analysis.py for the common
 * Thumb-2 function, compiled: the same paths, effects and rows, step for
 * step, for functions whose every path the Python states without a
 * refusal, in Thumb or in ARM state, refusals included (a problem named as
 * the Python names it, the state past it UNKNOWN). Whatever that Python
 * handles by a rule not ported here (a ladder in ARM code, a path from one
 * state into the other) makes the analysis give up (BAIL) and the Python analyses the
 * function: the result is the Python's in every case
 * (tests/test_native_analysis.py holds the two together on every function
 * of the corpora). Names follow the Python's. */
#ifndef ANALYSIS_H
#define ANALYSIS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>
#include <capstone/capstone.h>

#define REG_FP 7 /* the frame pointer of Thumb code */
#define REG_ARM_FP 11 /* of ARM code */
#define REG_SP 13
#define REG_LR 14
#define REG_PC 15
#define DWARF_D0 256
#define NO_REG (-1) /* a register the analysis does not model (s registers, APSR...) */
#define MAX_OPERAND_REGS 40
#define MAX_SAVED 17 /* r4-r11, lr, d8-d15 */
#define MAX_STATES 200000 /* frame_analysis.MAX_STATES */
#define STATES_PER_BYTE 4 /* frame_analysis.STATES_PER_BYTE */
#define ALWAYS 14 /* successors.ALWAYS: a condition that always holds */

/* The mnemonics (disasm.Instruction.op) the analysis tells apart; any other is OP_OTHER. */
#define OPS(X) \
    X(ADD, "add") \
    X(LDR, "ldr") \
    X(MOV, "mov") \
    X(TBB, "tbb") \
    X(BX, "bx") \
    X(BLX, "blx") \
    X(SUB, "sub") \
    X(BL, "bl") \
    X(TBH, "tbh") \
    X(POP, "pop") \
    X(LDRD, "ldrd") \
    X(B, "b") \
    X(ADR, "adr") \
    X(UDF, "udf") \
    X(STRH, "strh") \
    X(STRD, "strd") \
    X(STR, "str") \
    X(MOVW, "movw") \
    X(MOVT, "movt") \
    X(CMP, "cmp") \
    X(BKPT, "bkpt") \
    X(VPUSH, "vpush") \
    X(VPOP, "vpop") \
    X(VLDR, "vldr") \
    X(TST, "tst") \
    X(TEQ, "teq") \
    X(SVC, "svc") \
    X(SUBS, "subs") \
    X(STRB, "strb") \
    X(PUSH, "push") \
    X(LDM, "ldm") \
    X(CMN, "cmn") \
    X(CBZ, "cbz") \
    X(CBNZ, "cbnz") \
    X(ADDS, "adds")
#define OP_ENUM(name, text) OP_##name,
typedef enum { OP_OTHER, OPS(OP_ENUM) } Op;
#undef OP_ENUM

/* One instruction, as disasm.Instruction has it. */
typedef struct {
    uint32_t address;
    uint8_t size;
    uint8_t nregs;
    int16_t regs[MAX_OPERAND_REGS];
    bool has_imm;
    int64_t imm;
    bool has_mem;
    int16_t mem_base;
    int64_t mem_disp;
    bool post_index;
    bool conditional;
    int8_t condition; /* its 4-bit condition (capstone's cc - 1); ALWAYS outside an IT block or in ARM's AL */
    bool arm;         /* decoded in ARM state: every instruction may be conditional, pc reads 8 ahead */
    bool transfers;
    bool writeback_text; /* its text ends with '!' (frame_effects reads it so) */
    uint32_t writes;     /* bit n: rn written */
    uint32_t writes_d;   /* bit n: dn written */
    bool writes_other;   /* a register it does not model written (flags...) */
    int16_t index_reg;   /* the last rN its operand text names (branch_tables._index_register), -1 */
    char op[16];
    uint8_t opcode;   /* op as an Op */
    bool it;          /* op begins with "it": an IT instruction */
    bool flag_named;  /* named as setting flags: cmp, cmn, tst, teq, or an op ending in s (not a v one) */
    bool ldr_family;  /* op begins with "ldr" or "vldr" */
} Insn;

typedef struct {
    uint32_t start;
    const uint8_t *data;
    Py_ssize_t size;
} Segment;

/* The program's loaded bytes, a capstone handle, and the instructions
 * decoded lately, by address (direct-mapped: decoding is the same at an
 * address whenever it is done). */
#define DECODED_KEPT 32768
typedef struct {
    Segment *segments;
    int count;
    csh handle, arm_handle; /* Thumb, ARM */
    Insn *kept;         /* DECODED_KEPT */
    int64_t *kept_at;   /* the address each holds, twice and ARM's plus one; -1 none */
    bool *kept_decodes; /* whether it decodes there */
} Code;

typedef struct {
    int64_t reg;
    int64_t slot;
} Save;

/* frame_effects.FrameState, or UNKNOWN (`unknown`, all else zero but cfa_reg -1: the state past a refusal). */
typedef struct {
    bool unknown;
    bool depth_known;
    int64_t depth;
    int cfa_reg;
    bool fp_known;
    int64_t fp_offset;
    int nsaved;
    Save saved[MAX_SAVED]; /* sorted by register */
    uint32_t clobbered;    /* tracked_bit of each callee-saved register written */
} State;

/* successors.Path. fact: -1 none, else condition * 2 + holds. */
typedef struct {
    State state;
    int fact;
    int nblock;
    int block[4];
} Path;

/* The outcome of a step: go on; give the function to the Python (a rule
 * not ported); the Python refuses here too (a problem, named by the last
 * refuse: the path goes on past it as the Python's does; in a landing pad's
 * trial, the trial is dropped); a Python error is set. */
typedef enum { GO_ON = 0, BAIL = 1, REFUSED = 2, FAILED = 3 } Step;

/* Why the last analysis gave up, and where (diagnostics: _analysis.last_bail()). */
Step give_up(const char *why, int64_t address);
Step refuse(const char *why, int64_t address);
Step refuse_insn(const Insn *insn, const char *rest); /* the problem "'<its text>'<rest>" */
extern const State UNKNOWN_STATE;

int code_read(const Code *code, int64_t address, uint8_t *out, int want);
bool insn_text(const Code *code, int64_t address, bool arm, char *out, size_t size);
bool decode_at(const Code *code, int64_t address, bool arm, Insn *out);
int decode_before(const Code *code, int64_t address, int span, int64_t lowest, bool arm, Insn *out, int capacity);
bool writes_reg(const Insn *insn, int64_t reg);
int64_t pc_base(const Insn *insn);
static inline int frame_pointer(bool arm) { return arm ? REG_ARM_FP : REG_FP; }
int literal_span(const Insn *insn, int64_t *first);

static inline bool callee_saved(int64_t reg) {
    return (reg >= 4 && reg <= 11) || reg == REG_LR || (reg >= DWARF_D0 + 8 && reg <= DWARF_D0 + 15);
}

static inline uint32_t tracked_bit(int64_t reg) {
    if (reg >= 0 && reg < 16) return 1u << reg;
    if (reg >= DWARF_D0 + 8 && reg <= DWARF_D0 + 15) return 1u << (16 + reg - DWARF_D0);
    return 0;
}
bool state_equal(const State *a, const State *b);
bool torn_down(const State *s);
bool lost(const State *s);
bool saved_reg(const State *s, int64_t reg);
Step after(const Code *own, int64_t lowest, const Insn *insn, const State *in, State *out);

#endif
