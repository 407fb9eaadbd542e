/*
 * grow.h - the one array-growth policy: capacities double from a first
 * size, and a growth that would overflow size_t fails with -ENOMEM instead
 * of wrapping. Owners keep their arrays; grow_array() only reallocates.
 * The engine, which counts its bytes, asks grow_capacity() and reallocates
 * itself.
 */
#ifndef NPUSAN_COMMON_GROW_H
#define NPUSAN_COMMON_GROW_H

#include <stddef.h>

/* The first capacity of an empty array. */
#define GROW_FIRST 16u

/*
 * The capacity, doubled from `cap` (GROW_FIRST when 0), that holds `need`
 * items of `size` bytes; `cap` itself when it already does; 0 when the
 * bytes would not fit in a size_t.
 */
size_t grow_capacity(size_t cap, size_t need, size_t size);

/*
 * Grows *arr, of *cap items of `size` bytes, to hold at least `need` items.
 * 0, or -ENOMEM with *arr and *cap unchanged (the caller still owns and
 * frees *arr).
 */
int grow_array(void **arr, size_t *cap, size_t need, size_t size);

#endif
