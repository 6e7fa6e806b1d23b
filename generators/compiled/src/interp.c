/* Workload: a small expression interpreter.  A tokenizer, a recursive-descent
 * parser building an AST in the bump allocator, and a tree-walking evaluator,
 * run over a fixed program with assignments to single-letter variables.
 *
 * Grammar:
 *   program    := statement (';' statement)*
 *   statement  := IDENT '=' expr | expr
 *   expr       := comparison ('?' expr ':' expr)?
 *   comparison := additive (('<' | '>' | '==') additive)*
 *   additive   := term (('+' | '-') term)*
 *   term       := primary (('*' | '/' | '%') primary)*
 *   primary    := NUMBER | '-' primary | IDENT | IDENT '(' expr (',' expr)? ')'
 *               | '(' expr ')'
 * (comparison/additive/term are parsed by precedence climbing).
 * Values are 32-bit signed integers with wrap-around arithmetic (done in u32,
 * so there is no undefined behaviour); x/0 and x%0 give 0.
 */
#include "common.h"

enum tok_kind {
    T_END, T_NUM, T_IDENT, T_PLUS, T_MINUS, T_STAR, T_SLASH, T_PERCENT,
    T_LPAREN, T_RPAREN, T_LT, T_GT, T_EQEQ, T_ASSIGN, T_SEMI, T_COMMA,
    T_QUESTION, T_COLON, T_ERROR
};

struct token {
    u8 kind;
    u8 name;  /* identifier letter */
    u32 value;
};

enum node_kind { N_NUM, N_VAR, N_NEG, N_BIN, N_COND, N_CALL, N_ASSIGN };

struct node {
    u8 kind;
    u8 op;     /* token kind of a binary operator, or the variable/function letter */
    u32 value;
    struct node *a, *b, *c;
};

struct parser {
    const struct token *toks;
    u32 pos;
    u32 errors;
};

#define MAX_TOKENS 48u

#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')
#define IS_ALPHA(c) ((c) >= 'a' && (c) <= 'z')

/* Single-character tokens, indexed by character - ' ' (0 = not a token). */
static const u8 punct[64] = {
    ['+' - ' '] = T_PLUS, ['-' - ' '] = T_MINUS, ['*' - ' '] = T_STAR,
    ['/' - ' '] = T_SLASH, ['%' - ' '] = T_PERCENT, ['(' - ' '] = T_LPAREN,
    [')' - ' '] = T_RPAREN, ['<' - ' '] = T_LT, ['>' - ' '] = T_GT,
    [';' - ' '] = T_SEMI, [',' - ' '] = T_COMMA, ['?' - ' '] = T_QUESTION,
    [':' - ' '] = T_COLON, ['=' - ' '] = T_ASSIGN,
};

NOINLINE u32 tokenize(const char *s, struct token *out, u32 max)
{
    u32 n = 0;
    while (n + 1u < max) {
        char c = *s++;
        if (c == ' ')
            continue;
        struct token *t = &out[n++];
        if (c == 0) {
            t->kind = T_END;
            return n;
        }
        if (IS_DIGIT(c)) {
            u32 v = (u32)(c - '0');
            while (IS_DIGIT(*s))
                v = v * 10u + (u32)(*s++ - '0');
            t->kind = T_NUM;
            t->value = v;
        } else if (IS_ALPHA(c)) {
            t->kind = T_IDENT;
            t->name = (u8)c;
        } else if (c == '=' && *s == '=') {
            s++;
            t->kind = T_EQEQ;
        } else if (c > ' ' && c < ' ' + 64 && punct[c - ' ']) {
            t->kind = punct[c - ' '];
        } else {
            t->kind = T_ERROR;
        }
    }
    out[n].kind = T_END;
    return n + 1u;
}

static struct node *new_node(u8 kind, u8 op, u32 value)
{
    struct node *n = rt_alloc(sizeof *n);
    if (!n)
        return 0;
    n->kind = kind;
    n->op = op;
    n->value = value;
    n->a = n->b = n->c = 0;
    return n;
}

#define PEEK(p) ((p)->toks[(p)->pos].kind)

static void expect(struct parser *p, u8 kind)
{
    if (PEEK(p) == kind)
        p->pos++;
    else
        p->errors++;
}

/* Binding power of a binary operator token; 0 for anything else. */
static u32 precedence(u8 kind)
{
    switch (kind) {
    case T_LT: case T_GT: case T_EQEQ: return 1u;
    case T_PLUS: case T_MINUS: return 2u;
    case T_STAR: case T_SLASH: case T_PERCENT: return 3u;
    default: return 0;
    }
}

NOINLINE struct node *parse_expr(struct parser *p);

NOINLINE struct node *parse_primary(struct parser *p)
{
    const struct token *t = &p->toks[p->pos++];
    switch (t->kind) {
    case T_NUM:
        return new_node(N_NUM, 0, t->value);
    case T_MINUS: {
        struct node *n = new_node(N_NEG, 0, 0);
        n->a = parse_primary(p);
        return n;
    }
    case T_LPAREN: {
        struct node *inner = parse_expr(p);
        expect(p, T_RPAREN);
        return inner;
    }
    case T_IDENT:
        if (PEEK(p) == T_LPAREN) {
            struct node *call = new_node(N_CALL, t->name, 0);
            p->pos++;
            call->a = parse_expr(p);
            if (PEEK(p) == T_COMMA) {
                p->pos++;
                call->b = parse_expr(p);
            }
            expect(p, T_RPAREN);
            return call;
        }
        return new_node(N_VAR, t->name, 0);
    default:
        p->errors++;
        return new_node(N_NUM, 0, 0);
    }
}

/* Precedence climbing over the left-associative binary operators. */
NOINLINE struct node *parse_binary(struct parser *p, u32 min_prec)
{
    struct node *l = parse_primary(p);
    for (;;) {
        u8 k = PEEK(p);
        u32 prec = precedence(k);
        if (prec == 0 || prec < min_prec)
            return l;
        p->pos++;
        struct node *n = new_node(N_BIN, k, 0);
        n->a = l;
        n->b = parse_binary(p, prec + 1u);
        l = n;
    }
}

NOINLINE struct node *parse_expr(struct parser *p)
{
    struct node *c = parse_binary(p, 1u);
    if (PEEK(p) != T_QUESTION)
        return c;
    p->pos++;
    struct node *n = new_node(N_COND, 0, 0);
    n->a = c;
    n->b = parse_expr(p);
    expect(p, T_COLON);
    n->c = parse_expr(p);
    return n;
}

NOINLINE struct node *parse_statement(struct parser *p)
{
    if (PEEK(p) == T_IDENT && p->toks[p->pos + 1u].kind == T_ASSIGN) {
        struct node *n = new_node(N_ASSIGN, p->toks[p->pos].name, 0);
        p->pos += 2u;
        n->a = parse_expr(p);
        return n;
    }
    return parse_expr(p);
}

#define NVARS 8u  /* variables a..h; other letters alias them */

struct env {
    u32 vars[NVARS];
    u32 steps;
};

static i32 as_signed(u32 v)
{
    return v < 0x80000000u ? (i32)v : -(i32)(~v) - 1;
}

static u32 divide(u32 a, u32 b, int modulo)
{
    i32 x = as_signed(a), y = as_signed(b);
    if (y == 0 || (x == -2147483647 - 1 && y == -1))
        return 0;
    return modulo ? (u32)(x % y) : (u32)(x / y);
}

NOINLINE u32 eval(const struct node *n, struct env *env)
{
    env->steps++;
    switch (n->kind) {
    case N_NUM:
        return n->value;
    case N_VAR:
        return env->vars[(n->op - 'a') & (NVARS - 1u)];
    case N_NEG:
        return 0u - eval(n->a, env);
    case N_ASSIGN:
        return env->vars[(n->op - 'a') & (NVARS - 1u)] = eval(n->a, env);
    case N_COND:
        return eval(n->a, env) ? eval(n->b, env) : eval(n->c, env);
    case N_CALL: {
        u32 a = eval(n->a, env);
        u32 b = n->b ? eval(n->b, env) : 0;
        if (n->op == 'm')  /* m(a, b): signed minimum */
            return as_signed(a) < as_signed(b) ? a : b;
        if (n->op == 'h')  /* h(a): a hash step */
            return a * 2654435761u ^ b;
        return 0;
    }
    case N_BIN: {
        u32 l = eval(n->a, env);
        u32 r = eval(n->b, env);
        switch (n->op) {
        case T_PLUS: return l + r;
        case T_MINUS: return l - r;
        case T_STAR: return l * r;
        case T_SLASH: return divide(l, r, 0);
        case T_PERCENT: return divide(l, r, 1);
        case T_LT: return as_signed(l) < as_signed(r);
        case T_GT: return as_signed(l) > as_signed(r);
        case T_EQEQ: return l == r;
        default: return 0;
        }
    }
    default:
        return 0;
    }
}

NOINLINE u32 run_program(const char *text, struct env *env)
{
    struct token toks[MAX_TOKENS];
    u32 ntok = tokenize(text, toks, MAX_TOKENS);
    struct parser p = { toks, 0, 0 };
    u32 h = ntok;
    for (;;) {
        struct node *stmt = parse_statement(&p);
        h = mix32(h, eval(stmt, env));
        if (PEEK(&p) != T_SEMI)
            break;
        p.pos++;
    }
    if (PEEK(&p) != T_END)
        p.errors++;
    return mix32(h, p.errors);
}

static const char *const programs[] = {
    "a=9;h(a)%-a>5?a/7:2",
};

unsigned entry_interp(void)
{
    struct env env;
    u32 h = 0x1e7e9u;
    rt_heap_reset();
    for (u32 i = 0; i < NVARS; i++)
        env.vars[i] = 0;
    env.steps = 0;
    for (u32 i = 0; i < sizeof programs / sizeof programs[0]; i++)
        h = mix32(h, run_program(programs[i], &env));
    return mix32(h, env.steps);
}
