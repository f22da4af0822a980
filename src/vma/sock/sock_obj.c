/* Deferred destruction of objects that left the fd table.
 *
 * The hot path looks objects up with one atomic load and takes no reference,
 * so an object cleared from the table may still be in use by a thread that
 * loaded it an instant earlier. Instead of reference counts on every call,
 * retired objects wait in a ring and are destroyed only when their slot is
 * needed again, SOCK_OBJ_GRAVE_SLOTS retirements later. The only memory a
 * late reader touches is the ops pointer and immutable fields, so that
 * grace covers it. Kinds that keep mutable state across a blocking call
 * must pin the object themselves. */
#include <stddef.h>
#include "sock/sock_obj.h"

static struct sock_obj *sock_obj_grave[SOCK_OBJ_GRAVE_SLOTS];
static unsigned long sock_obj_grave_next;

static void sock_obj_destroy(struct sock_obj *obj)
{
	if (obj && obj->ops->destroy)
		obj->ops->destroy(obj);
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
	sock_obj_destroy(oldest);
}

void sock_obj_flush_retired(void)
{
	for (size_t i = 0; i < SOCK_OBJ_GRAVE_SLOTS; i++)
		sock_obj_destroy(__atomic_exchange_n(&sock_obj_grave[i], NULL, __ATOMIC_ACQ_REL));
}
