/* What the tracer knows of the instruction at each pc (its length, whether
 * it calls, returns, opens an IT block or may store), and of each
 * translation block a sampled run enters: decoded once from the engine's
 * memory, kept in open-addressed tables.
 */
#include "trace.h"

/* harness.thumb.encoding.arm_call_length and arm_return_kind, for ARM state. */
static void decode_arm(PcInfo *info, uint32_t word) {
    const uint32_t cond = word >> 28;
    info->cond = (uint8_t)cond;
    info->call_length = (cond != 0xF && (word & 0x0F000000) == 0x0B000000)     /* BL */
                     || (word & 0xFE000000) == 0xFA000000                      /* BLX (immediate) */
                     || (cond != 0xF && (word & 0x0FFFFFF0) == 0x012FFF30)     /* BLX (register) */
                     ? 4 : 0;
    const uint32_t w = word & 0x0FFFFFFF;
    info->returns = cond != 0xF && (w == 0x012FFF1E || w == 0x01A0F00E || w == 0x049DF004
                                    || (word & 0x0FFF8000) == 0x08BD8000);
}

/* Whether a 32-bit Thumb instruction may write memory or trap: 0 only for
 * the classes of the ARM ARM's Thumb-2 tables that surely do not. */
static int thumb32_may_store(uint16_t first, uint16_t second) {
    if ((first & 0xFE40) == 0xE800) return !(first & 0x10);  /* stm, push.w, srs; ldm, pop.w, rfe */
    if ((first & 0xFE40) == 0xE840) return !(first & 0x10);  /* strex*, strd; ldrex*, ldrd, tbb, tbh */
    if ((first & 0xFE00) == 0xEA00) return 0;                /* data processing (shifted register) */
    if ((first & 0xF800) == 0xF000)                          /* data processing (immediate), branches, */
        return (first & 0xFFE0) == 0xF7E0 && (second & 0xD000) == 0x8000;  /* hints; but hvc, smc, udf.w trap */
    if ((first & 0xFE00) == 0xF800) return !(first & 0x10);  /* str, strb, strh, simd element stores; loads, pld */
    if ((first & 0xFE00) == 0xFA00) return 0;                /* data processing (register), multiply, divide */
    if ((first & 0xEE00) == 0xEC00) return !(first & 0x10);  /* stc, vstr, vstm, vpush, mcrr; their loads */
    if ((first & 0xEE00) == 0xEE00) return 0;                /* cdp, mcr, mrc, vfp and simd data processing */
    return 1;
}

/* Whether a Thumb instruction may write memory, or trap to the system (a
 * system call's answer writes memory too): 0 only where it surely does
 * not, so that a kept walk's bytes need no comparing after it (memo.c). */
int thumb_may_store(uint16_t first, uint16_t second) {
    if (first >= 0xE800) return thumb32_may_store(first, second);
    if (first < 0x5000) return 0;                     /* shift, add, sub, mov, cmp, data processing, bx, ldr literal */
    if (first < 0x5600) return 1;                     /* str, strh, strb (register) */
    if (first < 0x6000) return 0;                     /* ldrsb, ldr, ldrh, ldrb, ldrsh (register) */
    if (first < 0xA000) return !(first & 0x0800);     /* str, strb, strh, str sp-relative (immediate); their loads */
    if (first < 0xB000) return 0;                     /* adr, add sp */
    if (first < 0xC000) return (first & 0xFE00) == 0xB400 || (first & 0xFF00) == 0xBE00;  /* push; bkpt traps */
    if (first < 0xD000) return !(first & 0x0800);     /* stm; ldm */
    if (first < 0xE000) return (first & 0x0F00) >= 0x0E00;  /* b<cond>; udf and svc trap */
    return 0;                                         /* b */
}

/* The decoded instruction at pc in the state `thumb` says: harness.thumb.encoding's
 * call_length, it_block_length and return_kind (or their ARM twins);
 * memory the engine cannot read counts as zeros. */
PcInfo *decoded(Tracer *t, uint32_t pc, int thumb) {
    if (2 * (t->table_used + 1) > t->table_size) {
        size_t size = t->table_size ? 2 * t->table_size : 4096;
        PcInfo *table = PyMem_Calloc(size, sizeof(PcInfo));
        if (!table) { PyErr_NoMemory(); return NULL; }
        for (size_t i = 0; i < t->table_size; i++) {
            if (!t->table[i].used) continue;
            size_t j = (size_t)(t->table[i].key * 2654435761u) & (size - 1);
            while (table[j].used) j = (j + 1) & (size - 1);
            table[j] = t->table[i];
        }
        PyMem_Free(t->table);
        t->table = table;
        t->table_size = size;
    }
    const uint64_t key = (uint64_t)pc << 1 | (thumb != 0);
    size_t mask = t->table_size - 1, i = (size_t)(key * 2654435761u) & mask;
    for (; t->table[i].used; i = (i + 1) & mask) {
        if (t->table[i].key == key) return &t->table[i];
    }
    PcInfo *info = &t->table[i];
    t->table_used++;
    uint8_t code[4] = {0};
    if (t->engine.mem_read(t->engine.handle, pc, code, 4)) t->engine.mem_read(t->engine.handle, pc, code, 2);
    uint16_t first = code[0] | code[1] << 8, second = code[2] | code[3] << 8;
    unsigned mask_bits = first & 0xF;
    if (!thumb) {  /* an ARM instruction may store, for all the memo knows */
        *info = (PcInfo){ .key = key, .used = 1, .first = first, .may_store = 1 };
        decode_arm(info, (uint32_t)first | (uint32_t)second << 16);
        return info;
    }
    *info = (PcInfo){
        .key = key, .used = 1, .first = first, .cond = 0xE,
        .call_length = (first & 0xFF87) == 0x4780 ? 2
                     : (first & 0xF800) == 0xF000 && ((second & 0xD000) == 0xD000 || (second & 0xD001) == 0xC000) ? 4
                     : 0,
        .it_length = (first & 0xFF00) == 0xBF00 && mask_bits ? 4 - __builtin_ctz(mask_bits) : 0,
        .returns = first == 0x4770 || first == 0x46F7 || (first & 0xFF00) == 0xBD00
                || (first == 0xE8BD && (second & 0x8000)) || (first == 0xF85D && second == 0xFB04),
        .may_store = (uint8_t)thumb_may_store(first, second),
    };
    return info;
}

/* harness.thumb.encoding.it_advance */
static inline uint8_t it_advance(uint8_t state) {
    return (state & 0x7) == 0 ? 0 : (uint8_t)((state & 0xE0) | ((state << 1) & 0x1F));
}

/* Decode the block [address, address + size) from its entry state. */
static int decode_block(Tracer *t, BlockInfo *b) {
    uint8_t state = b->it_state;
    uint32_t pc = b->address;
    b->count = 0;
    while (pc < b->address + b->size) {
        PcInfo *info = decoded(t, pc, b->thumb);
        if (!info) return -1;
        const uint8_t length = b->thumb ? (uint8_t)instruction_size(info->first) : 4;
        b->last = pc;
        b->last_size = length;
        b->call_length = info->call_length;
        b->returns = info->returns;
        b->cond = !b->thumb ? info->cond : state ? (uint8_t)(state >> 4) : 0xE;
        state = info->it_length ? (uint8_t)(info->first & 0xFF) : it_advance(state);
        pc += length;
        b->count++;
    }
    return 0;
}

/* The block entered at address (in the state cpsr says), decoded once. */
const BlockInfo *block_of(Tracer *t, uint32_t address, uint32_t size, uint32_t cpsr) {
    const uint8_t thumb = (cpsr & 0x20) != 0, state = thumb ? (uint8_t)it_state(cpsr) : 0;
    if (2 * (t->blocks_used + 1) > t->blocks_size) {
        size_t grown = t->blocks_size ? 2 * t->blocks_size : 4096;
        BlockInfo *table = PyMem_Calloc(grown, sizeof(BlockInfo));
        if (!table) { PyErr_NoMemory(); return NULL; }
        for (size_t i = 0; i < t->blocks_size; i++) {
            if (!t->blocks[i].used) continue;
            size_t j = (size_t)(t->blocks[i].address * 2654435761u ^ t->blocks[i].size) & (grown - 1);
            while (table[j].used) j = (j + 1) & (grown - 1);
            table[j] = t->blocks[i];
        }
        PyMem_Free(t->blocks);
        t->blocks = table;
        t->blocks_size = grown;
    }
    size_t mask = t->blocks_size - 1, i = (size_t)(address * 2654435761u ^ size) & mask;
    for (; t->blocks[i].used; i = (i + 1) & mask) {
        const BlockInfo *b = &t->blocks[i];
        if (b->address == address && b->size == size && b->thumb == thumb && b->it_state == state) return b;
    }
    BlockInfo made = { .address = address, .size = size, .used = 1, .thumb = thumb, .it_state = state };
    if (decode_block(t, &made)) return NULL;
    t->blocks[i] = made;
    t->blocks_used++;
    return &t->blocks[i];
}

/* *at: the index of the block's first instruction, from `from` on, that is
 * not inside an IT block (its count where none is). */
int outside_it_from(Tracer *t, const BlockInfo *b, uint64_t from, uint64_t *at) {
    uint8_t state = b->it_state;
    uint32_t pc = b->address;
    for (uint64_t i = 0; i < b->count; i++) {
        if (i >= from && !state) { *at = i; return 0; }
        PcInfo *info = decoded(t, pc, b->thumb);
        if (!info) return -1;
        state = info->it_length ? (uint8_t)(info->first & 0xFF) : it_advance(state);
        pc += b->thumb ? (uint32_t)instruction_size(info->first) : 4;
    }
    *at = b->count;
    return 0;
}

/* The address of the block's `index`-th instruction. */
int instruction_at(Tracer *t, const BlockInfo *b, uint64_t index, uint32_t *out) {
    uint32_t pc = b->address;
    for (uint64_t i = 0; i < index; i++) {
        PcInfo *info = decoded(t, pc, b->thumb);
        if (!info) return -1;
        pc += b->thumb ? (uint32_t)instruction_size(info->first) : 4;
    }
    *out = pc;
    return 0;
}

/* The index of pc among the block's instructions (its count where pc is none of them). */
int index_in_block(Tracer *t, const BlockInfo *b, uint32_t pc, uint64_t *index) {
    uint32_t at = b->address;
    for (uint64_t i = 0; i < b->count; i++) {
        if (at == pc) { *index = i; return 0; }
        PcInfo *info = decoded(t, at, b->thumb);
        if (!info) return -1;
        at += b->thumb ? (uint32_t)instruction_size(info->first) : 4;
    }
    *index = b->count;
    return 0;
}
