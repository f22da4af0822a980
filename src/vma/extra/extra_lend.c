/* Ring frames lent to the application: the per-lane descriptor tables
 * (extra_lend.h). */
#include <stdlib.h>
#include <string.h>

#include "extra/extra_lend.h"
#include "sock/sock_tcp_internal.h"

static struct extra_xt_table *extra_xt_tables[EXTRA_XT_TABLES];
static unsigned extra_xt_ntables;
static pthread_mutex_t extra_xt_tables_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the table of lent frames ---- */

struct extra_xt_table *extra_lend_table(struct sock_offload *ctx)
{
	struct extra_xt_table *t = __atomic_load_n(&ctx->xtreme.table, __ATOMIC_ACQUIRE);
	if (__builtin_expect(t != NULL, 1))
		return t;
	/* Once per lane, outside its lock. */
	pthread_mutex_lock(&extra_xt_tables_lock);
	t = ctx->xtreme.table;
	if (!t && extra_xt_ntables < EXTRA_XT_TABLES) {
		t = calloc(1, sizeof(*t));
		if (t) {
			t->ctx = ctx;
			for (int i = 0; i < EXTRA_XT_BUFS; i++)
				t->slot[i].next_free = i + 1 < EXTRA_XT_BUFS ? i + 1 : -1;
			t->nfree = EXTRA_XT_BUFS;
			extra_xt_tables[extra_xt_ntables] = t;
			__atomic_store_n(&extra_xt_ntables, extra_xt_ntables + 1, __ATOMIC_RELEASE);
			/* The poll that lends from it holds the lane lock: the
			 * store is seen by every later locker. */
			__atomic_store_n(&ctx->xtreme.table, t, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&extra_xt_tables_lock);
	return t;
}

/* The descriptor behind an address the application gave back, or NULL:
 * anything else (garbage, a freed buffer) is refused, never followed. */
struct extra_xt_buf *extra_lend_lookup(const void *p, struct extra_xt_table **table)
{
	unsigned n = __atomic_load_n(&extra_xt_ntables, __ATOMIC_ACQUIRE);
	uintptr_t a = (uintptr_t)p;
	for (unsigned i = 0; i < n; i++) {
		struct extra_xt_table *t = extra_xt_tables[i];
		uintptr_t base = (uintptr_t)&t->slot[0];
		if (a < base || a >= (uintptr_t)&t->slot[EXTRA_XT_BUFS] || (a - base) % sizeof(t->slot[0]))
			continue;
		*table = t;
		return &t->slot[(a - base) / sizeof(t->slot[0])];
	}
	return NULL;
}

struct extra_xt_buf *extra_lend_alloc_locked(struct extra_xt_table *t)
{
	int i = t->free_head;
	struct extra_xt_buf *b = &t->slot[i];
	t->free_head = b->next_free;
	t->nfree--;
	b->next_free = -1;
	return b;
}

static void extra_lend_put_locked(struct extra_xt_table *t, struct extra_xt_buf *b)
{
	memset(b, 0, sizeof(*b));
	b->next_free = t->free_head;
	t->free_head = (int)(b - t->slot);
	t->nfree++;
}

struct sock_tcp *extra_lend_tcp_of(struct extra_xt_node *n)
{
	return (struct sock_tcp *)((char *)n - offsetof(struct sock_tcp, base.xt));
}

/* TCP: bytes the application consumed reopen the window (lock held). */
void extra_lend_tcp_recved_locked(struct sock_offload *ctx, struct extra_xt_buf *b)
{
	if (!b->owed)
		return;
	uint32_t owed = b->owed;
	b->owed = 0;
	if (!b->owner)
		return;
	struct sock_tcp *s = extra_lend_tcp_of(b->owner);
	if (!s->pcb)
		return;
	sock_offload_clock_locked(ctx);   /* tcp_recved may send a window update */
	tcp_recved(s->pcb, owed);
	sock_tcp_tx_kick_locked(s);
}

/* The last reference of a unit's buffer went: the unit's frames go back
 * when it was the last one (lock held, lane alive). */
void extra_lend_release_locked(struct sock_offload *ctx, struct extra_xt_table *t,
					struct extra_xt_buf *b)
{
	struct extra_xt_buf *lead = b->lead;
	if (b->tcp)
		extra_lend_tcp_recved_locked(ctx, b);
	if (b != lead)
		extra_lend_put_locked(t, b);
	if (--lead->live)
		return;
	ring_buf_free(lead->unit);
	struct extra_xt_node *owner = lead->owner;
	if (owner && owner->lent)
		owner->lent--;
	if (owner && lead->tcp) {
		struct sock_tcp *s = extra_lend_tcp_of(owner);
		if (s->pcb)
			tcp_rcv_held_set(s->pcb, s->rxq_frames + owner->lent);
	}
	extra_lend_put_locked(t, lead);
}

void extra_lend_forget_locked(struct sock_offload *ctx, struct extra_xt_node *n)
{
	struct extra_xt_table *t = ctx->xtreme.table;
	if (!t || !n->lent)
		return;
	for (unsigned i = 0; i < EXTRA_XT_BUFS; i++) {
		struct extra_xt_buf *b = &t->slot[i];
		if (!b->refs || b->owner != n)
			continue;
		if (b->by_fd) {
			/* A packet id of the closed fd: nothing can give it back. */
			b->owed = 0;
			b->owner = NULL;
			b->refs = 0;
			extra_lend_release_locked(ctx, t, b);
		} else {
			/* SocketXtreme's: the application may still read it; it
			 * stays until freed, accounted to no socket. */
			b->owner = NULL;
			b->owed = 0;
		}
	}
	n->lent = 0;
}

unsigned extra_lend_chain_bufs(const struct ring_buf *chain, uint32_t len)
{
	unsigned nbufs = 0;
	for (const struct ring_buf *b = chain; b && (nbufs == 0 || len); b = b->next) {
		len -= b->len < len ? b->len : len;
		nbufs++;
	}
	return nbufs;
}

struct extra_xt_buf *extra_lend_chain_locked(struct extra_xt_table *t, struct extra_xt_node *n,
					     struct ring_buf *chain, uint32_t len, unsigned nbufs)
{
	struct extra_xt_buf *lead = NULL, *prev = NULL;
	unsigned made = 0;
	for (struct ring_buf *b = chain; b && made < nbufs; b = b->next, made++) {
		struct extra_xt_buf *x = extra_lend_alloc_locked(t);
		uint32_t part = b->len < len ? b->len : len;
		len -= part;
		x->vb.payload = b->data;
		x->vb.len = (uint16_t)part;
		x->refs = 1;
		if (!lead) {
			lead = x;
			x->unit = chain;
			x->owner = n;
			x->live = nbufs;
		} else {
			prev->vb.next = &x->vb;
		}
		x->lead = lead;
		prev = x;
	}
	n->lent++;
	return lead;
}

struct extra_xt_buf *extra_lend_tcp_locked(struct extra_xt_table *t, struct sock_tcp *s, struct ring_buf *b,
					   bool by_fd)
{
	if (!t->nfree)
		return NULL;
	struct extra_xt_buf *x = extra_lend_alloc_locked(t);
	x->vb.payload = b->data;
	x->vb.len = (uint16_t)b->len;
	x->refs = 1;
	x->lead = x;
	x->unit = b;
	x->owner = &s->base.xt;
	x->live = 1;
	x->owed = b->len;
	x->tcp = true;
	x->by_fd = by_fd;
	s->base.xt.lent++;
	return x;
}

/* Locks the lane of table t; false when the lane is gone (exit, a forked
 * child's copy): its frames are not ours to give back any more. */
bool extra_lend_lock(struct extra_xt_table *t)
{
	if (!sock_offload_usable(t->ctx))
		return false;
	sock_offload_lock(t->ctx);
	if (t->ctx->dead) {
		sock_offload_unlock(t->ctx);
		return false;
	}
	return true;
}
