/* The index of vmad's flow table: which entries are free, and a hash chain
 * per bucket through the entries in use. It holds entry numbers only; the
 * table and the comparison of keys are vmad_server's. A FLOW_ADD or
 * FLOW_DEL walks one chain instead of the whole table, and nothing above
 * the highest entry ever used is touched. */
#ifndef VMA_VMAD_FLOW_INDEX_H
#define VMA_VMAD_FLOW_INDEX_H

#include <stdint.h>

struct vmad_flow_index {
	int *bucket;        /* nbuckets heads, -1 = empty chain */
	int *next;          /* per entry: the next in its chain or in the free list, -1 = none */
	unsigned nbuckets;  /* a power of two */
	int capacity;
	int free_head;      /* released entries below hi, -1 = none */
	int hi;             /* entries at or above hi were never handed out */
};

/* 0, or -ENOMEM / -EINVAL (nbuckets not a power of two, capacity < 1). */
int vmad_flow_index_init(struct vmad_flow_index *x, int capacity, unsigned nbuckets);
void vmad_flow_index_fini(struct vmad_flow_index *x);
/* An entry number not in use, or -1 when all capacity entries are. */
int vmad_flow_index_alloc(struct vmad_flow_index *x);
/* Puts an allocated entry into the chain of hash (any value; the index
 * masks it). */
void vmad_flow_index_link(struct vmad_flow_index *x, int entry, uint32_t hash);
/* Gives an entry back: out of the chain of hash when linked is set (the
 * hash it was linked with), then onto the free list. */
void vmad_flow_index_release(struct vmad_flow_index *x, int entry, uint32_t hash, int linked);
/* The chain of hash: first entry (or -1), then the one after entry. */
static inline int vmad_flow_index_first(const struct vmad_flow_index *x, uint32_t hash)
{
	return x->bucket[hash & (x->nbuckets - 1)];
}
static inline int vmad_flow_index_next(const struct vmad_flow_index *x, int entry)
{
	return x->next[entry];
}
/* Entries below this were handed out at some time: a walk of every entry
 * in use stops here. */
static inline int vmad_flow_index_high(const struct vmad_flow_index *x)
{
	return x->hi;
}

#endif
