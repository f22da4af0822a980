/* The Extra API's configuration calls: add_conf_rule (a libvma.conf line
 * for sockets made afterwards) and thread_offload (per-thread offload of
 * the sockets a thread creates afterwards). docs/extra_api.md */
#include <errno.h>
#include <stdbool.h>

#include "config/cfg_rules.h"
#include "extra/extra.h"
#include "log/vlog.h"

int extra_add_conf_rule(const char *config_line)
{
	if (!config_line) {
		errno = EINVAL;
		return -1;
	}
	/* Parsed and put ahead of every rule; the sockets that consult the
	 * rules from now on (bind, connect, listen, first send) see it. */
	return cfg_rules_add_first(config_line);
}

/* Threads with a setting of their own. Entries are never removed: a
 * thread that ends keeps its row, and a later thread that gets the same
 * pthread_t inherits it (libvma keys by pthread_t too). */
#define EXTRA_THREAD_OFFLOAD_MAX 1024

struct extra_thread_setting {
	pthread_t tid;
	bool offload;
};

static struct extra_thread_setting extra_threads[EXTRA_THREAD_OFFLOAD_MAX];
unsigned extra_thread_offload_count;
static pthread_mutex_t extra_threads_lock = PTHREAD_MUTEX_INITIALIZER;

int extra_thread_offload(int offload, pthread_t tid)
{
	int rc = 0;
	pthread_mutex_lock(&extra_threads_lock);
	unsigned n = extra_thread_offload_count, i;
	for (i = 0; i < n; i++)
		if (pthread_equal(extra_threads[i].tid, tid))
			break;
	if (i == n && n == EXTRA_THREAD_OFFLOAD_MAX) {
		rc = -1;
	} else {
		extra_threads[i].tid = tid;
		extra_threads[i].offload = offload != 0;
		if (i == n)
			__atomic_store_n(&extra_thread_offload_count, n + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&extra_threads_lock);
	if (rc < 0) {
		vlog_warn("thread_offload: settings for %d threads already held; this one is refused",
			  EXTRA_THREAD_OFFLOAD_MAX);
		errno = ENOMEM;
		return -1;
	}
	vlog_debug("thread_offload: sockets created by thread %#lx from now on are %s", (unsigned long)tid,
		   offload ? "offloaded" : "kernel sockets");
	return 0;
}

bool extra_thread_offload_lookup(pthread_t tid, bool fallback)
{
	bool offload = fallback;
	pthread_mutex_lock(&extra_threads_lock);
	for (unsigned i = 0; i < extra_thread_offload_count; i++) {
		if (pthread_equal(extra_threads[i].tid, tid)) {
			offload = extra_threads[i].offload;
			break;
		}
	}
	pthread_mutex_unlock(&extra_threads_lock);
	return offload;
}
