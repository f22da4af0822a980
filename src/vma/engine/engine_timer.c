/* Timers (a binary min-heap ordered by deadline, then arming order) and the
 * progress pass over pollers, which is itself one of the timers. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include "config/cfg_params.h"
#include "os/os.h"
#include "engine/engine_internal.h"

static uint64_t (*engine_clock_hook)(void);

uint64_t engine_now_us(void)
{
	uint64_t (*hook)(void) = __atomic_load_n(&engine_clock_hook, __ATOMIC_ACQUIRE);
	if (hook)
		return hook() * 1000u;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t engine_now_ms(void)
{
	uint64_t (*hook)(void) = __atomic_load_n(&engine_clock_hook, __ATOMIC_ACQUIRE);
	if (hook)
		return hook();
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

bool engine_deadline_passed(uint64_t due_ms)
{
	if (due_ms == UINT64_MAX)
		return false;
	/* The precise clock, not CLOCK_MONOTONIC_COARSE (7 ns against 35 ns
	 * on the development guest): the coarse clock moves only when the CPU
	 * that keeps time takes its tick, and a virtual CPU the host has
	 * descheduled takes none. It lagged by more than its resolution plus
	 * 2 ms in CI (a deadline of now read as not passed), and a lane whose
	 * timer is due would then be skipped until it caught up. */
	return engine_now_ms() >= due_ms;
}

void engine_set_clock(uint64_t (*now_ms)(void))
{
	__atomic_store_n(&engine_clock_hook, now_ms, __ATOMIC_RELEASE);
}

uint32_t engine_timer_resolution_ms(void)
{
	/* g_cfg is all zeros until cfg_params_load ran (early callers, tests). */
	return g_cfg.timer_resolution_msec > 0 ? (uint32_t)g_cfg.timer_resolution_msec : 10u;
}

uint32_t engine_tcp_timer_period_ms(void)
{
	uint32_t resolution = engine_timer_resolution_ms();
	uint32_t tcp = g_cfg.tcp_timer_resolution_msec > 0 ? (uint32_t)g_cfg.tcp_timer_resolution_msec : 100u;
	return tcp < resolution ? resolution : tcp;
}

bool engine_tcp_timer_immediate(void)
{
	return g_cfg.internal_thread_tcp_timer_handling == 1;
}

bool engine_arm_cq(void)
{
	return g_cfg.internal_thread_arm_cq != 0;
}

/* ---- heap (engine.lock held) ---- */

static bool timer_before(const struct engine_timer *a, const struct engine_timer *b)
{
	return a->deadline_ms < b->deadline_ms || (a->deadline_ms == b->deadline_ms && a->seq < b->seq);
}

static void heap_place(size_t index, struct engine_timer *timer)
{
	engine.heap[index] = timer;
	timer->heap_index = (int32_t)index;
}

static void heap_sift_up(size_t index)
{
	struct engine_timer *timer = engine.heap[index];
	while (index > 0) {
		size_t parent = (index - 1) / 2;
		if (!timer_before(timer, engine.heap[parent]))
			break;
		heap_place(index, engine.heap[parent]);
		index = parent;
	}
	heap_place(index, timer);
}

static void heap_sift_down(size_t index)
{
	struct engine_timer *timer = engine.heap[index];
	for (;;) {
		size_t child = 2 * index + 1;
		if (child >= engine.heap_len)
			break;
		if (child + 1 < engine.heap_len && timer_before(engine.heap[child + 1], engine.heap[child]))
			child++;
		if (!timer_before(engine.heap[child], timer))
			break;
		heap_place(index, engine.heap[child]);
		index = child;
	}
	heap_place(index, timer);
}

static bool timer_armed_locked(const struct engine_timer *timer)
{
	return timer->generation == engine.generation && timer->heap_index >= 0 &&
	       (size_t)timer->heap_index < engine.heap_len && engine.heap[timer->heap_index] == timer;
}

static void heap_remove(struct engine_timer *timer)
{
	size_t index = (size_t)timer->heap_index;
	struct engine_timer *last = engine.heap[--engine.heap_len];
	timer->heap_index = -1;
	if (last == timer)
		return;
	heap_place(index, last);
	if (index > 0 && timer_before(last, engine.heap[(index - 1) / 2]))
		heap_sift_up(index);
	else
		heap_sift_down(index);
}

static int heap_push(struct engine_timer *timer)
{
	if (engine.heap_len == engine.heap_cap) {
		size_t cap = engine.heap_cap ? engine.heap_cap * 2 : 64;
		struct engine_timer **grown = realloc(engine.heap, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		engine.heap = grown;
		engine.heap_cap = cap;
	}
	heap_place(engine.heap_len, timer);
	engine.heap_len++;
	heap_sift_up(engine.heap_len - 1);
	return 0;
}

/* ---- timer API ---- */

void engine_timer_init(struct engine_timer *timer)
{
	*timer = (struct engine_timer){ .heap_index = -1 };
}

static int timer_arm_locked(struct engine_timer *timer, uint32_t delay_ms, uint32_t period_ms)
{
	if (timer_armed_locked(timer))
		heap_remove(timer);
	uint32_t resolution = engine_timer_resolution_ms();
	timer->period_ms = (period_ms && period_ms < resolution) ? resolution : period_ms;
	timer->deadline_ms = engine_now_ms() + delay_ms;
	timer->seq = ++engine.seq;
	timer->generation = engine.generation;
	int ret = heap_push(timer);
	if (ret != 0)
		timer->heap_index = -1;
	return ret;
}

static int timer_arm(struct engine_timer *timer, uint32_t delay_ms, uint32_t period_ms, bool set_fn,
		     engine_timer_fn fn, void *arg)
{
	pthread_mutex_lock(&engine.lock);
	if (set_fn) {
		timer->fn = fn;
		timer->arg = arg;
	}
	int ret = timer->fn ? timer_arm_locked(timer, delay_ms, period_ms) : -EINVAL;
	bool earliest = ret == 0 && engine.heap[0] == timer;
	pthread_mutex_unlock(&engine.lock);
	/* The thread sleeps until the previous earliest deadline. */
	if (earliest && !engine_on_thread())
		engine_wake();
	return ret;
}

int engine_timer_add(struct engine_timer *timer, uint32_t delay_ms, uint32_t period_ms,
		     engine_timer_fn fn, void *arg)
{
	if (!fn)
		return -EINVAL;
	return timer_arm(timer, delay_ms, period_ms, true, fn, arg);
}

int engine_timer_rearm(struct engine_timer *timer, uint32_t delay_ms, uint32_t period_ms)
{
	return timer_arm(timer, delay_ms, period_ms, false, NULL, NULL);
}

bool engine_timer_cancel(struct engine_timer *timer)
{
	pthread_mutex_lock(&engine.lock);
	bool armed = timer_armed_locked(timer);
	if (armed)
		heap_remove(timer);
	pthread_mutex_unlock(&engine.lock);
	return armed;
}

bool engine_timer_cancel_sync(struct engine_timer *timer)
{
	pthread_mutex_lock(&engine.lock);
	bool armed = timer_armed_locked(timer);
	if (armed)
		heap_remove(timer);
	while (engine.running_timer == timer && !pthread_equal(engine.running_timer_thread, pthread_self()))
		os_cond_wait_nocancel(&engine.callback_done, &engine.lock);   /* under engine.lock: os.h */
	pthread_mutex_unlock(&engine.lock);
	return armed;
}

bool engine_timer_armed(const struct engine_timer *timer)
{
	pthread_mutex_lock(&engine.lock);
	bool armed = timer_armed_locked(timer);
	pthread_mutex_unlock(&engine.lock);
	return armed;
}

/* ---- pollers ---- */

static void engine_progress_pass(void *unused)
{
	(void)unused;
	int budget = g_cfg.progress_engine_wce_max;
	pthread_mutex_lock(&engine.lock);
	uint32_t pass = ++engine.pass;
	for (;;) {
		/* Rescan from the head each time: callbacks may (un)register
		 * pollers while the lock is dropped. Rings are few. */
		struct engine_poller *poller = engine.pollers;
		while (poller && poller->pass == pass)
			poller = poller->next;
		if (!poller)
			break;
		poller->pass = pass;
		if (__atomic_load_n(&poller->app_polled, __ATOMIC_RELAXED)) {
			/* A note that lands between the load and this store
			 * costs one needless drain next time, nothing more. */
			__atomic_store_n(&poller->app_polled, 0, __ATOMIC_RELAXED);
			continue;
		}
		engine_poller_fn fn = poller->fn;
		void *arg = poller->arg;
		engine.running_poller = poller;
		engine.running_poller_thread = pthread_self();
		pthread_mutex_unlock(&engine.lock);
		int work = fn(arg, budget);
		pthread_mutex_lock(&engine.lock);
		if (poller->registered)
			poller->last_work = work;
		engine.running_poller = NULL;
		pthread_cond_broadcast(&engine.callback_done);
	}
	pthread_mutex_unlock(&engine.lock);
}

int engine_poller_register(struct engine_poller *poller, engine_poller_fn fn, void *arg)
{
	if (!poller || !fn)
		return -EINVAL;
	pthread_mutex_lock(&engine.lock);
	bool live = poller->registered && poller->generation == engine.generation;
	if (!live) {
		poller->next = engine.pollers;
		engine.pollers = poller;
	}
	poller->fn = fn;
	poller->arg = arg;
	poller->app_polled = 0;
	poller->pass = engine.pass;
	poller->generation = engine.generation;
	poller->registered = true;
	poller->last_work = 0;
	int interval = g_cfg.progress_engine_interval;
	bool start_pass = interval > 0 && !timer_armed_locked(&engine.progress);
	pthread_mutex_unlock(&engine.lock);
	if (start_pass)
		engine_timer_add(&engine.progress, (uint32_t)interval, (uint32_t)interval, engine_progress_pass, NULL);
	return 0;
}

void engine_poller_unregister(struct engine_poller *poller)
{
	pthread_mutex_lock(&engine.lock);
	if (poller->registered && poller->generation == engine.generation) {
		struct engine_poller **link = &engine.pollers;
		while (*link && *link != poller)
			link = &(*link)->next;
		if (*link)
			*link = poller->next;
	}
	poller->registered = false;
	poller->next = NULL;
	while (engine.running_poller == poller && !pthread_equal(engine.running_poller_thread, pthread_self()))
		os_cond_wait_nocancel(&engine.callback_done, &engine.lock);   /* under engine.lock: os.h */
	pthread_mutex_unlock(&engine.lock);
}

/* ---- one tick ---- */

int engine_tick(void)
{
	if (__atomic_exchange_n(&engine.ticking, 1, __ATOMIC_ACQUIRE))
		return 0;   /* another thread is ticking; ask to come back soon */
	uint64_t now = engine_now_ms();
	pthread_mutex_lock(&engine.lock);
	/* Timers armed during this tick (a callback re-arming itself with
	 * delay 0) wait for the next one, so a tick always ends. */
	uint64_t last_seq = engine.seq;
	while (engine.heap_len > 0 && engine.heap[0]->deadline_ms <= now && engine.heap[0]->seq <= last_seq) {
		struct engine_timer *timer = engine.heap[0];
		if (timer->period_ms) {
			/* Fixed rate; periods missed while late are skipped,
			 * not replayed in a burst. */
			timer->deadline_ms += timer->period_ms;
			if (timer->deadline_ms <= now)
				timer->deadline_ms = now + timer->period_ms;
			heap_sift_down(0);
		} else {
			heap_remove(timer);
		}
		engine_timer_fn fn = timer->fn;
		void *arg = timer->arg;
		engine.running_timer = timer;
		engine.running_timer_thread = pthread_self();
		pthread_mutex_unlock(&engine.lock);
		fn(arg);
		pthread_mutex_lock(&engine.lock);
		engine.running_timer = NULL;
		pthread_cond_broadcast(&engine.callback_done);
	}
	int next = -1;
	if (engine.heap_len > 0) {
		uint64_t deadline = engine.heap[0]->deadline_ms;
		uint64_t current = engine_now_ms();
		uint64_t wait = deadline > current ? deadline - current : 0;
		next = wait > (uint64_t)INT32_MAX ? INT32_MAX : (int)wait;
	}
	pthread_mutex_unlock(&engine.lock);
	__atomic_store_n(&engine.ticking, 0, __ATOMIC_RELEASE);
	return next;
}
