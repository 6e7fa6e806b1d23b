/* Workload: an LZ77-style compressor and decompressor round trip.
 *
 * The compressor finds matches through a small hash table of 3-byte
 * prefixes (like LZ4/LZF), so it runs in linear time.  The stream is a
 * sequence of tokens:
 *   0LLLLLLL                 literal run of L+1 bytes (1..128), bytes follow
 *   1LLLLLLL OOOOOOOO        match of L+3 bytes (3..130) at distance O+1
 * The input is generated deterministically with plenty of repetition, the
 * round trip is verified byte by byte, and the checksum covers the
 * compressed stream, its length and the verdict.
 */
#include "common.h"

#define INPUT_SIZE 24u
#define HASH_BITS 4u
#define HASH_SIZE (1u << HASH_BITS)
#define MIN_MATCH 3u
#define MAX_MATCH 130u
#define MAX_LITERALS 128u
#define MAX_DISTANCE 256u
#define NO_POS 0xffffu

struct lz_state {
    const u8 *in;
    u32 in_len;
    u8 *out;
    u32 out_len;
    u32 out_cap;
    u32 literal_start;  /* first byte of the pending literal run */
    u16 head[HASH_SIZE];
};

#define LZ_HASH(p) \
    ((((u32)(p)[0] | ((u32)(p)[1] << 8) | ((u32)(p)[2] << 16)) * 2654435761u) >> (32u - HASH_BITS))

/* Flushes the literal run [literal_start, end) in chunks of 128. */
NOINLINE int lz_flush_literals(struct lz_state *s, u32 end)
{
    while (s->literal_start < end) {
        u32 run = end - s->literal_start;
        if (run > MAX_LITERALS)
            run = MAX_LITERALS;
        if (run + 1u > s->out_cap - s->out_len)
            return 0;
        s->out[s->out_len++] = (u8)(run - 1u);
        memcpy(s->out + s->out_len, s->in + s->literal_start, run);
        s->out_len += run;
        s->literal_start += run;
    }
    return 1;
}

NOINLINE u32 lz_match_length(const u8 *a, const u8 *b, u32 limit)
{
    u32 n = 0;
    while (n < limit && a[n] == b[n])
        n++;
    return n;
}

NOINLINE u32 lz_compress(const u8 *in, u32 len, u8 *out, u32 cap)
{
    struct lz_state s;
    s.in = in;
    s.in_len = len;
    s.out = out;
    s.out_len = 0;
    s.out_cap = cap;
    s.literal_start = 0;
    for (u32 i = 0; i < HASH_SIZE; i++)
        s.head[i] = NO_POS;

    u32 pos = 0;
    while (pos + MIN_MATCH <= len) {
        u32 h = LZ_HASH(in + pos);
        u32 cand = s.head[h];
        s.head[h] = (u16)pos;
        if (cand != NO_POS && pos - cand <= MAX_DISTANCE) {
            u32 limit = len - pos;
            if (limit > MAX_MATCH)
                limit = MAX_MATCH;
            u32 m = lz_match_length(in + cand, in + pos, limit);
            if (m >= MIN_MATCH) {
                if (!lz_flush_literals(&s, pos))
                    return 0;
                if (s.out_cap - s.out_len < 2u)
                    return 0;
                s.out[s.out_len++] = (u8)(0x80u | (m - MIN_MATCH));
                s.out[s.out_len++] = (u8)(pos - cand - 1u);
                pos += m;
                s.literal_start = pos;
                continue;
            }
        }
        pos++;
    }
    if (!lz_flush_literals(&s, len))
        return 0;
    return s.out_len;
}

/* Returns the decompressed length, or 0 on a malformed stream. */
NOINLINE u32 lz_decompress(const u8 *in, u32 len, u8 *out, u32 cap)
{
    u32 ip = 0, op = 0;
    while (ip < len) {
        u32 tok = in[ip++];
        if (tok & 0x80u) {
            if (ip >= len)
                return 0;
            u32 n = (tok & 0x7fu) + MIN_MATCH;
            u32 dist = (u32)in[ip++] + 1u;
            if (dist > op || n > cap - op)
                return 0;
            for (u32 i = 0; i < n; i++, op++)  /* may overlap: byte by byte */
                out[op] = out[op - dist];
        } else {
            u32 n = tok + 1u;
            if (n > len - ip || n > cap - op)
                return 0;
            memcpy(out + op, in + ip, n);
            ip += n;
            op += n;
        }
    }
    return op;
}

/* Text-like input: a line of register names repeated, with one byte in
 * every copy changed by an LCG ("sp,lr,r7,pc,sp,lr,r3,pc,..."). */
NOINLINE void lz_generate(u8 *buf, u32 len, u32 seed)
{
    static const char line[12] = "sp,lr,r7,pc,";
    u32 pos = 0;
    while (pos < len) {
        u32 n = len - pos < 12u ? len - pos : 12u;
        memcpy(buf + pos, line, n);
        seed = seed * 1664525u + 1013904223u;
        buf[pos + (seed >> 28) % n] = (u8)('0' + ((seed >> 8) & 7u));
        pos += n;
    }
}

NOINLINE u32 lz_checksum(const u8 *p, u32 n)
{
    u32 a = 1u, b = 0u;
    for (u32 i = 0; i < n; i++) {
        a += p[i];
        b += a;
    }
    return (b << 16) ^ a;
}

unsigned entry_lz(void)
{
    rt_heap_reset();
    u8 *input = rt_alloc(INPUT_SIZE);
    u8 *packed = rt_alloc(INPUT_SIZE + INPUT_SIZE / 64u + 8u);
    u8 *unpacked = rt_alloc(INPUT_SIZE);
    if (!input || !packed || !unpacked)
        return 0;
    lz_generate(input, INPUT_SIZE, 0x1234au);
    u32 plen = lz_compress(input, INPUT_SIZE, packed, INPUT_SIZE + INPUT_SIZE / 64u + 8u);
    u32 ulen = lz_decompress(packed, plen, unpacked, INPUT_SIZE);
    u32 same = ulen == INPUT_SIZE;
    for (u32 i = 0; same && i < INPUT_SIZE; i++)
        same = input[i] == unpacked[i];
    u32 h = lz_checksum(packed, plen);
    h = mix32(h, plen);
    h = mix32(h, ulen);
    return mix32(h, same ? 0x600du : 0xbadu);
}
