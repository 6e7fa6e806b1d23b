/* Capstone behind one function, as harness/thumb/disasm.py has it: Thumb-2
 * (or ARM) bytes -> Insn. Capstone is the library the Python's capstone package
 * loaded (its path handed to capstone_load), reached through dlopen, so that
 * both decode with the same build. */
#include "analysis.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static struct {
    cs_err (*open)(cs_arch, cs_mode, csh *);
    cs_err (*option)(csh, cs_opt_type, size_t);
    size_t (*disasm)(csh, const uint8_t *, size_t, uint64_t, size_t, cs_insn **);
    void (*free)(cs_insn *, size_t);
    const char *(*reg_name)(csh, unsigned int);
    cs_err (*regs_access)(csh, const cs_insn *, cs_regs, uint8_t *, cs_regs, uint8_t *);
    unsigned int (*version)(int *, int *);
} cs;

/* Per capstone register id: its number (disasm._reg: rN, sb..pc, dN as
 * 256 + N, else -1) and what a write to it changes (s and q registers as
 * their d registers). */
#define REG_IDS 512
static int16_t number_of[REG_IDS];
static int16_t written_of[REG_IDS][2];
static bool names_read;

const char *capstone_load(const char *path, csh *handle, csh *arm_handle) {
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) return "cannot load capstone";
    cs.open = dlsym(library, "cs_open");
    cs.option = dlsym(library, "cs_option");
    cs.disasm = dlsym(library, "cs_disasm");
    cs.free = dlsym(library, "cs_free");
    cs.reg_name = dlsym(library, "cs_reg_name");
    cs.regs_access = dlsym(library, "cs_regs_access");
    cs.version = dlsym(library, "cs_version");
    if (!cs.open || !cs.option || !cs.disasm || !cs.free || !cs.reg_name || !cs.regs_access || !cs.version)
        return "capstone lacks a function this analysis calls";
    int major, minor;
    cs.version(&major, &minor);
    if (major != CS_API_MAJOR || minor != CS_API_MINOR) return "capstone is not the version it was built with";
    if (cs.open(CS_ARCH_ARM, CS_MODE_THUMB, handle) != CS_ERR_OK) return "capstone will not open Thumb";
    if (cs.open(CS_ARCH_ARM, CS_MODE_ARM, arm_handle) != CS_ERR_OK) return "capstone will not open ARM";
    cs.option(*handle, CS_OPT_DETAIL, CS_OPT_ON);
    cs.option(*arm_handle, CS_OPT_DETAIL, CS_OPT_ON);
    return NULL;
}

static int16_t number_by_name(const char *name) {
    static const char *named[] = {"sb", "sl", "fp", "ip", "sp", "lr", "pc"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(name, named[i])) return (int16_t)(9 + i);
    if (name[0] == 'r' && name[1] >= '0' && name[1] <= '9') return (int16_t)atoi(name + 1);
    if (name[0] == 'd' && name[1] >= '0' && name[1] <= '9') return (int16_t)(DWARF_D0 + atoi(name + 1));
    return NO_REG;
}

static bool digits(const char *text) {
    if (!*text) return false;
    for (; *text; text++)
        if (*text < '0' || *text > '9') return false;
    return true;
}

static void read_names(csh handle) {
    for (unsigned id = 0; id < REG_IDS; id++) {
        const char *name = cs.reg_name(handle, id);
        if (!name) name = "";
        number_of[id] = number_by_name(name);
        written_of[id][0] = number_of[id];
        written_of[id][1] = NO_REG - 1; /* none */
        if (name[0] == 's' && digits(name + 1)) {
            written_of[id][0] = (int16_t)(DWARF_D0 + atoi(name + 1) / 2);
        } else if (name[0] == 'q' && digits(name + 1)) {
            written_of[id][0] = (int16_t)(DWARF_D0 + 2 * atoi(name + 1));
            written_of[id][1] = (int16_t)(DWARF_D0 + 2 * atoi(name + 1) + 1);
        }
    }
    names_read = true;
}

static bool decode_uncached(const Code *code, int64_t address, bool arm, Insn *out);

int code_read(const Code *code, int64_t address, uint8_t *out, int want) {
    for (int i = 0; i < code->count; i++) {
        const Segment *s = &code->segments[i];
        if (s->start <= address && address < (int64_t)s->start + s->size) {
            Py_ssize_t offset = (Py_ssize_t)(address - s->start);
            int got = (int)(s->size - offset < want ? s->size - offset : want);
            memcpy(out, s->data + offset, (size_t)got);
            return got;
        }
    }
    return 0;
}

static void note_write(Insn *insn, int reg) {
    if (reg == NO_REG) insn->writes_other = true;
    else if (reg >= 0 && reg < 16) insn->writes |= 1u << reg;
    else if (reg >= DWARF_D0 && reg < DWARF_D0 + 32) insn->writes_d |= 1u << (reg - DWARF_D0);
}

/* disasm._plain: "popne" -> "pop", "add.w" -> "add", "addw" -> "add". */
static void plain(const char *mnemonic, bool conditional, char *op) {
    size_t length = strcspn(mnemonic, ".");
    if (length > 15) length = 15;
    memcpy(op, mnemonic, length);
    op[length] = 0;
    if (conditional) op[length >= 2 ? length - 2 : 0] = 0;
    if (!strcmp(op, "addw") || !strcmp(op, "subw")) op[3] = 0;
}

static bool strippable(char c) { return c == ' ' || c == '[' || c == ']' || c == '!'; }

/* branch_tables._index_register: the last operand that names r0-r12, as rN
 * or by capstone's names for r9-r12 (sb, sl, fp, ip). */
static int16_t index_register(const char *operands) {
    static const char *const named[] = {"sb", "sl", "fp", "ip"};
    int16_t found = -1;
    while (*operands) {
        const char *end = strchr(operands, ',');
        if (!end) end = operands + strlen(operands);
        const char *first = operands, *last = end;
        while (first < last && strippable(*first)) first++;
        while (last > first && strippable(last[-1])) last--;
        if (last - first >= 2 && *first == 'r') {
            bool all = true;
            for (const char *c = first + 1; c < last; c++) all &= *c >= '0' && *c <= '9';
            if (all) found = (int16_t)atoi(first + 1);
        }
        for (int i = 0; i < 4; i++)
            if (last - first == 2 && !strncmp(first, named[i], 2)) found = (int16_t)(9 + i);
        operands = *end ? end + 1 : end;
    }
    return found;
}

/* What a mnemonic names (Insn's op, opcode, it, ldr_family, flag_named),
 * worked out once for each mnemonic met (a program's code holds a few
 * hundred): by its text, as the Python reads it. */
#define MNEMONICS_KEPT 2048
typedef struct {
    char mnemonic[32];
    bool conditional, used;
    char op[16];
    uint8_t opcode;
    bool it, ldr_family, flag_named;
} Named;
static Named mnemonics[MNEMONICS_KEPT];

static void name_op(const char *mnemonic, bool conditional, Named *named) {
    plain(mnemonic, conditional, named->op);
    static const char *names[] = {"",
#define OP_NAME(name, text) text,
        OPS(OP_NAME)
#undef OP_NAME
    };
    named->opcode = OP_OTHER;
    for (unsigned i = 1; i < sizeof names / sizeof *names; i++)
        if (!strcmp(named->op, names[i])) named->opcode = (uint8_t)i;
    size_t length = strlen(named->op);
    named->it = !strncmp(named->op, "it", 2);
    named->ldr_family = !strncmp(named->op, "ldr", 3) || !strncmp(named->op, "vldr", 4);
    named->flag_named = named->opcode == OP_CMP || named->opcode == OP_CMN || named->opcode == OP_TST
        || named->opcode == OP_TEQ || (length && named->op[length - 1] == 's' && named->op[0] != 'v');
}

static void named_op(const char *mnemonic, bool conditional, Insn *insn) {
    uint32_t hash = 2166136261u + conditional;
    for (const char *c = mnemonic; *c; c++) hash = (hash ^ (uint8_t)*c) * 16777619u;
    Named *named = NULL, own;
    if (strlen(mnemonic) < sizeof own.mnemonic) {
        for (uint32_t probe = 0; probe < 8 && !named; probe++) {
            Named *slot = &mnemonics[(hash + probe) & (MNEMONICS_KEPT - 1)];
            if (!slot->used) {
                strcpy(slot->mnemonic, mnemonic);
                slot->conditional = conditional, slot->used = true;
                name_op(mnemonic, conditional, slot);
                named = slot;
            } else if (slot->conditional == conditional && !strcmp(slot->mnemonic, mnemonic)) {
                named = slot;
            }
        }
    }
    if (!named) name_op(mnemonic, conditional, named = &own);
    memcpy(insn->op, named->op, sizeof insn->op);
    insn->opcode = named->opcode, insn->it = named->it;
    insn->ldr_family = named->ldr_family, insn->flag_named = named->flag_named;
}

/* False where capstone cannot say which registers it writes: the Python's
 * regs_access raises there, and the instruction counts as undecodable. */
static bool fill(csh handle, const cs_insn *raw, bool in_arm, Insn *insn) {
    const cs_arm *arm = &raw->detail->arm;
    memset(insn, 0, sizeof *insn);
    insn->arm = in_arm;
    insn->address = (uint32_t)raw->address;
    insn->size = (uint8_t)raw->size;
    for (int i = 0; i < arm->op_count; i++) {
        const cs_arm_op *operand = &arm->operands[i];
        if (operand->type == ARM_OP_REG) {
            if (insn->nregs < MAX_OPERAND_REGS)
                insn->regs[insn->nregs++] = operand->reg < REG_IDS ? number_of[operand->reg] : NO_REG;
        } else if (operand->type == ARM_OP_IMM) {
            insn->has_imm = true;
            insn->imm = operand->imm;
        } else if (operand->type == ARM_OP_MEM) {
            insn->has_mem = true;
            insn->mem_base = operand->mem.base < REG_IDS ? number_of[operand->mem.base] : NO_REG;
            insn->mem_disp = operand->mem.disp;
        }
    }
    insn->conditional = arm->cc != ARM_CC_AL && arm->cc != ARM_CC_INVALID;
    insn->condition = (int8_t)(insn->conditional ? arm->cc - 1 : ALWAYS); /* capstone numbers conditions from 1 */
    insn->post_index = arm->post_index;
    named_op(raw->mnemonic, insn->conditional && raw->id != ARM_INS_IT, insn);
    size_t text = strlen(raw->op_str);
    insn->index_reg = index_register(text ? raw->op_str : raw->mnemonic);
    insn->writeback_text = text ? raw->op_str[text - 1] == '!' : raw->mnemonic[strlen(raw->mnemonic) - 1] == '!';
    for (int i = 0; i < raw->detail->groups_count; i++) {
        uint8_t group = raw->detail->groups[i];
        if (group == CS_GRP_JUMP || group == CS_GRP_CALL || group == CS_GRP_RET || group == CS_GRP_INT)
            insn->transfers = true;
    }
    cs_regs read, written;
    uint8_t nread = 0, nwritten = 0;
    if (cs.regs_access(handle, raw, read, &nread, written, &nwritten) != CS_ERR_OK) return false;
    for (int i = 0; i < nwritten; i++) {
        unsigned id = written[i];
        note_write(insn, id < REG_IDS ? written_of[id][0] : NO_REG);
        if (id < REG_IDS && written_of[id][1] != NO_REG - 1) note_write(insn, written_of[id][1]);
    }
    return true;
}

bool decode_at(const Code *code, int64_t address, bool arm, Insn *out) {
    size_t slot = (size_t)(address >> 1) & (DECODED_KEPT - 1);
    int64_t key = 2 * address + arm;
    if (code->kept_at[slot] == key) {
        if (code->kept_decodes[slot]) *out = code->kept[slot];
        return code->kept_decodes[slot];
    }
    code->kept_at[slot] = key;
    code->kept_decodes[slot] = decode_uncached(code, address, arm, &code->kept[slot]);
    if (code->kept_decodes[slot]) *out = code->kept[slot];
    return code->kept_decodes[slot];
}

/* Capstone's one instruction at `address` (in ARM state with `arm`), NULL where none decodes; cs.free it. */
static cs_insn *disassembled(const Code *code, int64_t address, bool arm) {
    uint8_t bytes[4];
    int got = code_read(code, address, bytes, 4);
    cs_insn *raw = NULL;
    csh handle = arm ? code->arm_handle : code->handle;
    size_t count = got ? cs.disasm(handle, bytes, (size_t)got, (uint64_t)address, 1, &raw) : 0;
    return count ? raw : NULL;
}

static bool decode_uncached(const Code *code, int64_t address, bool arm, Insn *out) {
    if (!names_read) read_names(code->handle);
    cs_insn *raw = disassembled(code, address, arm);
    if (!raw) return false;
    bool decoded = fill(arm ? code->arm_handle : code->handle, raw, arm, out);
    cs.free(raw, 1);
    return decoded;
}

/* disasm.Instruction.text: capstone's "mnemonic operands" of the instruction at `address`. */
bool insn_text(const Code *code, int64_t address, bool arm, char *out, size_t size) {
    cs_insn *raw = disassembled(code, address, arm);
    if (!raw) return false;
    snprintf(out, size, raw->op_str[0] ? "%s %s" : "%s", raw->mnemonic, raw->op_str);
    cs.free(raw, 1);
    return true;
}

/* disasm.decode_before: the instructions straight before `address`, up to
 * `span` bytes of them, ending exactly there (the first start a linear
 * decode lands on `address` from); none lie below `lowest` (the own code of
 * a function: from its start). Their count, or -1 when more than fit. */
int decode_before(const Code *code, int64_t address, int span, int64_t lowest, bool arm, Insn *out, int capacity) {
    for (int64_t low = address - span; low < address; low += arm ? 4 : 2) {
        if (low < lowest) continue;
        int found = 0;
        int64_t at = low;
        while (at < address && found < capacity && decode_at(code, at, arm, &out[found])) {
            at += out[found].size;
            found++;
        }
        if (at == address) return found;
    }
    return 0;
}

bool writes_reg(const Insn *insn, int64_t reg) {
    if (reg == NO_REG) return insn->writes_other;
    if (reg >= 0 && reg < 16) return insn->writes >> reg & 1;
    if (reg >= DWARF_D0 && reg < DWARF_D0 + 32) return insn->writes_d >> (reg - DWARF_D0) & 1;
    return false;
}


/* What pc reads as in a pc-relative operand: Align(address + 4, 4) in Thumb, address + 8 in ARM. */
int64_t pc_base(const Insn *insn) {
    return insn->arm ? (int64_t)insn->address + 8 : ((int64_t)insn->address + 4) & ~(int64_t)3;
}

/* branch_tables._literal: the bytes a pc-relative ldr/vldr reads, [first, first + size). */
int literal_span(const Insn *insn, int64_t *first) {
    if (!insn->ldr_family || !insn->has_mem || insn->mem_base != REG_PC)
        return 0;
    *first = pc_base(insn) + insn->mem_disp;
    return (insn->opcode == OP_LDRD) || (insn->opcode == OP_VLDR) ? 8 : 4;
}
