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
#include <pthread.h>
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

__thread struct sock_obj_calls sock_obj_calls __attribute__((tls_model("initial-exec")));

static pthread_key_t sock_obj_calls_key;
static bool sock_obj_calls_key_made;

/* The key's destructor: unpins what a thread that ends inside calls (a
 * pthread_cancel acted on in a call) still holds. */
static void sock_obj_calls_exit(void *value)
{
	struct sock_obj_calls *calls = value;
	unsigned n = calls->depth < SOCK_OBJ_CALL_DEPTH ? calls->depth : SOCK_OBJ_CALL_DEPTH;
	calls->depth = 0;
	while (n > 0)
		sock_obj_unpin(calls->objs[--n]);
}

static void sock_obj_calls_make_key(void)
{
	sock_obj_calls_key_made = pthread_key_create(&sock_obj_calls_key, sock_obj_calls_exit) == 0;
}

void sock_obj_calls_hook_exit(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int saved = errno;
	pthread_once(&once, sock_obj_calls_make_key);
	/* Without a key (the process used up PTHREAD_KEYS_MAX) a cancelled
	 * call keeps its object, as before. */
	if (sock_obj_calls_key_made)
		(void)pthread_setspecific(sock_obj_calls_key, &sock_obj_calls);
	sock_obj_calls.exit_hooked = true;
	errno = saved;
}

void sock_obj_flush_retired(void)
{
	for (size_t i = 0; i < SOCK_OBJ_GRAVE_SLOTS; i++)
		sock_obj_evict(__atomic_exchange_n(&sock_obj_grave[i], NULL, __ATOMIC_ACQ_REL));
}
