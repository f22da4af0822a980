/* Deferred destruction of objects that left the fd table.
 *
 * The hot path looks objects up with one atomic load, then pins the object
 * for the length of the call (sock_obj_pin: a count in the object). Retired
 * objects wait in a ring for SOCK_OBJ_GRAVE_SLOTS retirements, which covers
 * the instant between a late reader's load and its pin; when the slot is
 * needed the object is evicted, and destroyed then if no call pins it, or
 * by the last call that unpins it (a recv blocked across close() and many
 * later closes). */
#include <errno.h>
#include <stddef.h>
#include "sock/sock_obj.h"

static struct sock_obj *sock_obj_grave[SOCK_OBJ_GRAVE_SLOTS];
static unsigned long sock_obj_grave_next;

static void sock_obj_destroy(struct sock_obj *obj)
{
	if (obj && obj->ops->destroy)
		obj->ops->destroy(obj);
}

void sock_obj_destroy_unpinned(struct sock_obj *obj)
{
	int saved = errno;   /* the call that unpinned it reports its own */
	sock_obj_destroy(obj);
	errno = saved;
}

/* The graveyard lets go of obj: destroyed now unless a call pins it. */
static void sock_obj_evict(struct sock_obj *obj)
{
	if (!obj)
		return;
	unsigned old = __atomic_fetch_or(&obj->pins, SOCK_OBJ_EVICTED, __ATOMIC_ACQ_REL);
	if ((old & ~SOCK_OBJ_EVICTED) == 0)
		sock_obj_destroy(obj);
}

void sock_obj_retire(struct sock_obj *obj)
{
	if (!obj)
		return;
	if (obj->ops->release)
		obj->ops->release(obj);
	unsigned long ticket = __atomic_fetch_add(&sock_obj_grave_next, 1, __ATOMIC_RELAXED);
	/* Exchange, not store: two retirers that wrapped onto the same slot
	 * each get a distinct previous occupant to destroy. */
	struct sock_obj *oldest = __atomic_exchange_n(&sock_obj_grave[ticket % SOCK_OBJ_GRAVE_SLOTS],
						      obj, __ATOMIC_ACQ_REL);
	sock_obj_evict(oldest);
}

void sock_obj_flush_retired(void)
{
	for (size_t i = 0; i < SOCK_OBJ_GRAVE_SLOTS; i++)
		sock_obj_evict(__atomic_exchange_n(&sock_obj_grave[i], NULL, __ATOMIC_ACQ_REL));
}
