/* One function's analysis in progress (frame_analysis._Analysis). */
#ifndef PATHS_H
#define PATHS_H

#include "analysis.h"

typedef struct {
    int64_t *items;
    Py_ssize_t count, capacity;
} Ints;

typedef struct {
    int64_t address;
    Path path;
} Pending;

/* The states reached at an address, one per fact, in the order first met. */
typedef struct {
    int next; /* the next entry of the address, -1 */
    Path path; /* its fact and state (the block is not kept) */
} Entry;

typedef struct {
    const Code *code;
    int64_t start, end;
    bool arm;           /* the function is ARM code (the Python's when a path would change state) */
    PyObject *noreturn; /* a set: membership only */
    PyObject *asked;    /* a set: what was asked of noreturn */
    Py_ssize_t halfwords;
    int *head, *tail;       /* per halfword: its entries, -1 */
    uint8_t *sizes;         /* per halfword: the instruction's size where paths went, 0 */
    uint8_t *data;          /* per byte: read as data */
    Entry *entries;
    int nentries, entries_capacity;
    Pending *pending;
    int npending, pending_capacity;
    long visited, max_states; /* states visited, and the most it may visit (_Analysis.max_states) */
    bool trial;               /* a landing pad's trial: dropped where it meets a problem */
    PyObject *problems;       /* a list: "address: why" each (_Analysis._refuse), NULL in a trial */
    int trial_problems;       /* a trial's: counted, not worded */
    uint8_t *refused;         /* per halfword: a problem named there (_Analysis.refused) */
    uint8_t *decoded;         /* per halfword: an instruction decoded on a path, in it or a trial (_Analysis.decoded) */
    bool all_refused;         /* too many states: every row refuses */
    bool returns, falls_through;
    Ints outer_data; /* data bytes outside the function */
    Ints labels;     /* the program's data's labels inside it, sorted: a computed goto's targets */
    Ints calls, callees, arm_callees, branched, loaded, call_sites; /* call_sites: target, return address pairs */
} Analysis;

/* The last refusal's why: the Python's words, after the instruction's text where `named`. */
typedef struct {
    const char *why;
    bool named, arm;
} Refusal;
extern Refusal last_refusal;

void ints_add(Ints *list, int64_t value);
Pending *pending_slot(Analysis *a);
void mark_data(Analysis *a, int64_t first, int64_t size);
void table_data(Analysis *a, const Insn *insn);
Step table_successors(Analysis *a, const Insn *insn, const State *before_state, const Path *onward, int *count);
void ints_free(Ints *list);
bool in_function(const Analysis *a, int64_t address);
bool is_data(const Analysis *a, int64_t address);
Step never_returns(Analysis *a, bool has, int64_t target, bool *answer);
bool formed_address(Analysis *a, const Insn *insn, int64_t *formed);
bool thunk_target(Analysis *a, const Insn *insn, int64_t *target);
Step read_code(Analysis *a, const Insn *insn);
Step successors(Analysis *a, const Insn *insn, const Path *path, int *count);
void start_path(Analysis *a, int64_t address, const State *state);
Step explore(Analysis *a, const uint8_t *kept);
Step landing_pads(Analysis *a);
void gap_spans(Analysis *a, Ints *spans);
Step rows_of(const Analysis *a, PyObject *rows);
void analysis_free(Analysis *a);
bool pushes_lr(const Code *code, int64_t address, int64_t end, bool arm);

#endif
