/* setjmp/longjmp through several frames, recursion, malloc/free, qsort with
 * a callback, printf and puts.  A recursive-descent parser builds a tree
 * of malloc'd nodes for each generated arithmetic expression and evaluates
 * it recursively; a syntax error (in the parser) or a division by zero (in
 * the evaluator) longjmps from deep inside the recursion back to the loop in
 * main.  The results are then sorted with qsort.  Deterministic output: the
 * expressions come from a fixed LCG seed. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ERR_SYNTAX = 1, ERR_DIV0 = 2 };

static jmp_buf on_error;

struct node {
    char op;                  /* '+', '-', '*', '/', or 0 for a number */
    long long value;
    struct node *lhs, *rhs;
    struct node *next_alloc;  /* every node of this expression, for freeing */
};

static struct node *allocated;  /* nodes of the current expression */
static const char *cursor;      /* parser position */

static struct node *new_node(char op, long long value, struct node *lhs, struct node *rhs)
{
    struct node *n = malloc(sizeof *n);
    if (!n) { puts("out of memory"); exit(1); }
    n->op = op; n->value = value; n->lhs = lhs; n->rhs = rhs;
    n->next_alloc = allocated;
    allocated = n;
    return n;
}

/* Frees the whole expression: also the one a longjmp abandoned halfway,
 * which is why nodes are chained as they are allocated, not freed as a tree. */
static void free_all(void)
{
    while (allocated) {
        struct node *n = allocated;
        allocated = n->next_alloc;
        free(n);
    }
}

static struct node *parse_expr(void);

/* factor := number | '(' expr ')' */
static struct node *parse_factor(void)
{
    if (*cursor == '(') {
        cursor++;
        struct node *n = parse_expr();
        if (*cursor != ')') longjmp(on_error, ERR_SYNTAX);
        cursor++;
        return n;
    }
    if (*cursor < '0' || *cursor > '9') longjmp(on_error, ERR_SYNTAX);
    long long v = 0;
    while (*cursor >= '0' && *cursor <= '9') v = v * 10 + (*cursor++ - '0');
    return new_node(0, v, NULL, NULL);
}

/* term := factor (('*' | '/') factor)* */
static struct node *parse_term(void)
{
    struct node *n = parse_factor();
    while (*cursor == '*' || *cursor == '/') {
        char op = *cursor++;
        n = new_node(op, 0, n, parse_factor());
    }
    return n;
}

/* expr := term (('+' | '-') term)* */
static struct node *parse_expr(void)
{
    struct node *n = parse_term();
    while (*cursor == '+' || *cursor == '-') {
        char op = *cursor++;
        n = new_node(op, 0, n, parse_term());
    }
    return n;
}

/* Values stay small (mod a prime) so nothing overflows; long long division
 * goes through libgcc's __aeabi_ldivmod. */
static long long eval(const struct node *n)
{
    if (!n->op) return n->value;
    long long a = eval(n->lhs), b = eval(n->rhs);
    switch (n->op) {
    case '+': return (a + b) % 1000003;
    case '-': return (a - b) % 1000003;
    case '*': return (a * b) % 1000003;
    default:
        if (b == 0) longjmp(on_error, ERR_DIV0);
        return a / b;
    }
}

static unsigned seed = 7;
static unsigned rnd(unsigned n)
{
    seed = seed * 1103515245u + 12345u;
    return (seed >> 16) % n;
}

/* Writes a random expression of at most `depth` levels into buf; returns
 * the new end.  Recursive, like the parser that reads it back. */
static char *generate(char *p, int depth)
{
    if (depth == 0 || rnd(4) == 0) {
        return p + sprintf(p, "%u", rnd(6) == 0 ? 0 : rnd(90) + 1);
    }
    static const char ops[] = "+-*/";
    *p++ = '(';
    p = generate(p, depth - 1);
    *p++ = ops[rnd(4)];
    p = generate(p, depth - 1);
    *p++ = ')';
    return p;
}

static int compare_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Parses and evaluates one expression.  Returns 0 with the value in *out,
 * or the error that was longjmp'ed here.  The setjmp sits in its own small
 * function so that no local of main is live across it (-Wclobbered). */
static int evaluate(const char *text, long long *out)
{
    /* volatile: written between setjmp and longjmp, read after the jump. */
    volatile int stage = 0;
    int err = setjmp(on_error);
    if (err == 0) {
        cursor = text;
        stage = ERR_SYNTAX;
        struct node *tree = parse_expr();
        if (*cursor) longjmp(on_error, ERR_SYNTAX);
        stage = ERR_DIV0;
        *out = eval(tree);
    } else if (err != stage) {
        puts("error from the wrong stage");
    }
    free_all();
    return err;
}

int main(void)
{
    enum { COUNT = 100 };
    long long *results = malloc(COUNT * sizeof *results);
    char *text = malloc(1 << 16);
    int ok = 0, syntax = 0, div0 = 0;
    if (!results || !text) return 1;

    for (int i = 0; i < COUNT; i++) {
        *generate(text, 5) = '\0';
        if (i % 10 == 9) text[strlen(text) / 2] = '\0';  /* truncated: a syntax error */
        switch (evaluate(text, &results[ok])) {
        case 0: ok++; break;
        case ERR_SYNTAX: syntax++; break;
        default: div0++; break;
        }
    }

    qsort(results, ok, sizeof *results, compare_ll);
    long long sum = 0;
    for (int i = 0; i < ok; i++) sum += results[i];
    printf("expressions: %d ok, %d syntax errors, %d divisions by zero\n", ok, syntax, div0);
    if (ok)
        printf("min %lld median %lld max %lld sum %lld\n", results[0], results[ok / 2],
               results[ok - 1], sum);
    puts(ok + syntax + div0 == COUNT ? "all accounted for" : "lost some");
    free(text);
    free(results);
    return 0;
}
