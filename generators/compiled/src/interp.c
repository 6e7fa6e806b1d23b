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
 *   term       := unary (('*' | '/' | '%') unary)*
 *   unary      := '-' unary | primary
 *   primary    := NUMBER | IDENT | IDENT '(' expr (',' expr)* ')' | '(' expr ')'
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

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return c >= 'a' && c <= 'z'; }

NOINLINE u32 tokenize(const char *s, struct token *out, u32 max)
{
    u32 n = 0;
    while (n + 1u < max) {
        char c = *s;
        if (c == ' ') {
            s++;
            continue;
        }
        struct token *t = &out[n++];
        t->value = 0;
        t->name = 0;
        if (c == 0) {
            t->kind = T_END;
            return n;
        }
        if (is_digit(c)) {
            u32 v = 0;
            while (is_digit(*s))
                v = v * 10u + (u32)(*s++ - '0');
            t->kind = T_NUM;
            t->value = v;
            continue;
        }
        if (is_alpha(c)) {
            t->kind = T_IDENT;
            t->name = (u8)c;
            s++;
            continue;
        }
        s++;
        switch (c) {
        case '+': t->kind = T_PLUS; break;
        case '-': t->kind = T_MINUS; break;
        case '*': t->kind = T_STAR; break;
        case '/': t->kind = T_SLASH; break;
        case '%': t->kind = T_PERCENT; break;
        case '(': t->kind = T_LPAREN; break;
        case ')': t->kind = T_RPAREN; break;
        case '<': t->kind = T_LT; break;
        case '>': t->kind = T_GT; break;
        case ';': t->kind = T_SEMI; break;
        case ',': t->kind = T_COMMA; break;
        case '?': t->kind = T_QUESTION; break;
        case ':': t->kind = T_COLON; break;
        case '=':
            if (*s == '=') {
                s++;
                t->kind = T_EQEQ;
            } else {
                t->kind = T_ASSIGN;
            }
            break;
        default: t->kind = T_ERROR; break;
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

static u8 peek(const struct parser *p) { return p->toks[p->pos].kind; }

static int accept(struct parser *p, u8 kind)
{
    if (peek(p) != kind)
        return 0;
    p->pos++;
    return 1;
}

static void expect(struct parser *p, u8 kind)
{
    if (!accept(p, kind))
        p->errors++;
}

NOINLINE struct node *parse_expr(struct parser *p);

NOINLINE struct node *parse_primary(struct parser *p)
{
    const struct token *t = &p->toks[p->pos];
    if (accept(p, T_NUM))
        return new_node(N_NUM, 0, t->value);
    if (accept(p, T_IDENT)) {
        if (!accept(p, T_LPAREN))
            return new_node(N_VAR, t->name, 0);
        struct node *call = new_node(N_CALL, t->name, 0);
        call->a = parse_expr(p);
        if (accept(p, T_COMMA))
            call->b = parse_expr(p);
        expect(p, T_RPAREN);
        return call;
    }
    if (accept(p, T_LPAREN)) {
        struct node *inner = parse_expr(p);
        expect(p, T_RPAREN);
        return inner;
    }
    p->errors++;
    p->pos++;
    return new_node(N_NUM, 0, 0);
}

NOINLINE struct node *parse_unary(struct parser *p)
{
    if (accept(p, T_MINUS)) {
        struct node *n = new_node(N_NEG, 0, 0);
        n->a = parse_unary(p);
        return n;
    }
    return parse_primary(p);
}

static struct node *binary(u8 op, struct node *l, struct node *r)
{
    struct node *n = new_node(N_BIN, op, 0);
    n->a = l;
    n->b = r;
    return n;
}

NOINLINE struct node *parse_term(struct parser *p)
{
    struct node *l = parse_unary(p);
    for (;;) {
        u8 k = peek(p);
        if (k != T_STAR && k != T_SLASH && k != T_PERCENT)
            return l;
        p->pos++;
        l = binary(k, l, parse_unary(p));
    }
}

NOINLINE struct node *parse_additive(struct parser *p)
{
    struct node *l = parse_term(p);
    for (;;) {
        u8 k = peek(p);
        if (k != T_PLUS && k != T_MINUS)
            return l;
        p->pos++;
        l = binary(k, l, parse_term(p));
    }
}

NOINLINE struct node *parse_comparison(struct parser *p)
{
    struct node *l = parse_additive(p);
    for (;;) {
        u8 k = peek(p);
        if (k != T_LT && k != T_GT && k != T_EQEQ)
            return l;
        p->pos++;
        l = binary(k, l, parse_additive(p));
    }
}

NOINLINE struct node *parse_expr(struct parser *p)
{
    struct node *c = parse_comparison(p);
    if (!accept(p, T_QUESTION))
        return c;
    struct node *n = new_node(N_COND, 0, 0);
    n->a = c;
    n->b = parse_expr(p);
    expect(p, T_COLON);
    n->c = parse_expr(p);
    return n;
}

NOINLINE struct node *parse_statement(struct parser *p)
{
    if (peek(p) == T_IDENT && p->toks[p->pos + 1u].kind == T_ASSIGN) {
        struct node *n = new_node(N_ASSIGN, p->toks[p->pos].name, 0);
        p->pos += 2u;
        n->a = parse_expr(p);
        return n;
    }
    return parse_expr(p);
}

struct env {
    u32 vars[26];
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
        return env->vars[n->op - 'a'];
    case N_NEG:
        return 0u - eval(n->a, env);
    case N_ASSIGN:
        return env->vars[n->op - 'a'] = eval(n->a, env);
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
        if (!accept(&p, T_SEMI))
            break;
    }
    if (peek(&p) != T_END)
        p.errors++;
    return mix32(h, p.errors);
}

static const char *const programs[] = {
    "a=7;b=a*3-20;(a+b)*-b%5",
    "m(a,9)>b?h(17)/-3:0",
};

unsigned entry_interp(void)
{
    struct env env;
    u32 h = 0x1e7e9u;
    rt_heap_reset();
    for (u32 i = 0; i < 26u; i++)
        env.vars[i] = 0;
    env.steps = 0;
    for (u32 i = 0; i < sizeof programs / sizeof programs[0]; i++)
        h = mix32(h, run_program(programs[i], &env));
    return mix32(h, env.steps);
}
