/* Ranges: sorted, disjoint [low, high) ranges of pcs, each with a value and
 * an id (kernel.h), as the sources keep the rules of the ranges they made
 * (sources.c) and the tracer the classes of the pcs it met (trace_stop.c). It
 * depends on no other file of the kernel, so that both can use it.
 */
#include "kernel.h"

#include <string.h>

const Range *ranges_find(Ranges *set, int64_t pc, Py_ssize_t *slot) {
    if (set->last < set->count && set->items[set->last].low <= pc && pc < set->items[set->last].high)
        return &set->items[set->last];  /* stops come in runs of nearby pcs */
    Py_ssize_t lo = 0, hi = set->count;
    while (lo < hi) {  /* the first range starting above pc */
        Py_ssize_t mid = (lo + hi) / 2;
        if (set->items[mid].low <= pc) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && pc < set->items[lo - 1].high) {
        set->last = lo - 1;
        return &set->items[lo - 1];
    }
    *slot = lo;
    return NULL;
}

int ranges_insert(Ranges *set, Py_ssize_t slot, Range range) {
    if (slot > 0 && range.low < set->items[slot - 1].high) range.low = set->items[slot - 1].high;
    if (slot < set->count && range.high > set->items[slot].low) range.high = set->items[slot].low;
    if (set->count == set->capacity) {
        Py_ssize_t capacity = set->capacity ? 2 * set->capacity : 64;
        Range *items = PyMem_Realloc(set->items, capacity * sizeof(Range));
        if (!items) { PyErr_NoMemory(); return -1; }
        set->items = items;
        set->capacity = capacity;
    }
    memmove(&set->items[slot + 1], &set->items[slot], (set->count - slot) * sizeof(Range));
    Py_XINCREF(range.value);
    set->items[slot] = range;
    set->count++;
    set->last = slot;
    return 0;
}

void ranges_clear(Ranges *set) {
    for (Py_ssize_t i = 0; i < set->count; i++) Py_XDECREF(set->items[i].value);
    PyMem_Free(set->items);
    memset(set, 0, sizeof *set);
}
