/*
 * grow.c - the array-growth policy of grow.h. Owns nothing.
 */
#include "grow.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

size_t grow_capacity(size_t cap, size_t need, size_t size)
{
	size_t ncap = cap != 0 ? cap : GROW_FIRST;

	if (need <= cap)
		return cap;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return 0;
		ncap *= 2;
	}
	if (size != 0 && ncap > SIZE_MAX / size)
		return 0;
	return ncap;
}

int grow_array(void **arr, size_t *cap, size_t need, size_t size)
{
	size_t ncap = grow_capacity(*cap, need, size);
	void *p;

	if (ncap == *cap)
		return 0;
	if (ncap == 0)
		return -ENOMEM;
	p = realloc(*arr, ncap * size);
	if (p == NULL)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}
