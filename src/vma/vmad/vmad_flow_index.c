/* vmad's flow table index (vmad_flow_index.h). */
#include "vmad/vmad_flow_index.h"

#include <errno.h>
#include <stdlib.h>

int vmad_flow_index_init(struct vmad_flow_index *x, int capacity, unsigned nbuckets)
{
	x->bucket = NULL;
	x->next = NULL;
	if (capacity < 1 || nbuckets == 0 || (nbuckets & (nbuckets - 1)) != 0)
		return -EINVAL;
	x->bucket = malloc(nbuckets * sizeof(*x->bucket));
	x->next = malloc((size_t)capacity * sizeof(*x->next));
	if (!x->bucket || !x->next) {
		vmad_flow_index_fini(x);
		return -ENOMEM;
	}
	for (unsigned b = 0; b < nbuckets; b++)
		x->bucket[b] = -1;
	x->nbuckets = nbuckets;
	x->capacity = capacity;
	x->free_head = -1;
	x->hi = 0;
	return 0;
}

void vmad_flow_index_fini(struct vmad_flow_index *x)
{
	free(x->bucket);
	free(x->next);
	x->bucket = NULL;
	x->next = NULL;
}

int vmad_flow_index_alloc(struct vmad_flow_index *x)
{
	int entry = x->free_head;

	if (entry >= 0)
		x->free_head = x->next[entry];
	else if (x->hi < x->capacity)
		entry = x->hi++;
	else
		return -1;
	x->next[entry] = -1;
	return entry;
}

void vmad_flow_index_link(struct vmad_flow_index *x, int entry, uint32_t hash)
{
	int *head = &x->bucket[hash & (x->nbuckets - 1)];

	x->next[entry] = *head;
	*head = entry;
}

void vmad_flow_index_release(struct vmad_flow_index *x, int entry, uint32_t hash, int linked)
{
	if (linked) {
		int *link = &x->bucket[hash & (x->nbuckets - 1)];
		while (*link >= 0 && *link != entry)
			link = &x->next[*link];
		if (*link == entry)
			*link = x->next[entry];
	}
	x->next[entry] = x->free_head;
	x->free_head = entry;
}
