/* The library's start (constructor or first interposed call, whichever
 * comes first) and stop. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "vma_main.h"
#include "redirect/redirect_signal.h"
#include "config/cfg_env.h"
#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "log/vlog.h"
#include "redirect/redirect.h"
#include "ring/ring_spin.h"
#include "sock/sock_fd_table.h"
#include "sock/sock_obj.h"
#include "sock/sock_offload.h"
#include "engine/engine.h"
#include "stats/stats.h"
#include "stats/stats_layout.h"
#include "vmad/vmad_client.h"
#include "vmad/vmad_peers.h"
#include "config.h"

static pthread_once_t vma_once = PTHREAD_ONCE_INIT;
static bool vma_ready;
/* Set while this thread runs vma_init: its own interposed calls must not
 * wait on vma_once (they would deadlock) and go to libc instead. */
static __thread bool vma_in_init;
static pid_t vma_fork_hook_pid;
static vma_cleanup_fn vma_sigint_cleanup;
static struct engine_timer vma_stats_timer;

/* How often the internal thread looks for vma_stats requests (-z, -l, -D, -S). */
#define VMA_STATS_SERVICE_MS 100

/* Without a dump op, a tracked fd still shows its kind and its counters. */
static void vma_dump_one_fd(int fd, int log_level)
{
	struct sock_obj *obj = sock_fd_get(fd);
	if (!obj) {
		if (fd != 0)
			vlog_print(log_level, "fd %d: not a socket libvma tracks", fd);
		return;
	}
	if (obj->ops->dump) {
		obj->ops->dump(obj, log_level);
		return;
	}
	vlog_print(log_level, "fd %d: %s socket (domain %d, type %d)", fd, obj->ops->kind, obj->domain, obj->type);
	stats_socket_dump_fd(fd, log_level);
}

/* vma_stats -S fd [level]; fd 0 = every tracked fd. */
void vma_dump_fd(int fd, int log_level)
{
	if (fd != 0) {
		vma_dump_one_fd(fd, log_level);
		return;
	}
	unsigned size = sock_fd_table_size();
	for (unsigned i = 1; i < size; i++)
		if (sock_fd_get((int)i))
			vma_dump_one_fd((int)i, log_level);
}

static const struct stats_control_ops vma_stats_control = {
	.set_log_level = vlog_set_level,
	.set_log_details = vlog_set_details,
	.dump_fd = vma_dump_fd,
};

/* Children's statistics files are looked at every this many services. */
#define VMA_STATS_REAP_EVERY 10

static void vma_stats_service(void *arg)
{
	static unsigned calls;
	(void)arg;
	stats_service_control(&vma_stats_control);
	if (++calls % VMA_STATS_REAP_EVERY == 0)
		stats_reap_children();
}

void vma_after_fork_parent(pid_t child)
{
	stats_note_child((int)child);
}

static void vma_open_stats(void)
{
	struct stats_settings settings = {
		.shmem_dir = g_cfg.stats_shmem_dir,
		.fd_num = g_cfg.stats_fd_num,
		.cpu_usage = g_cfg.cpu_usage_stats,
		.stats_file = g_cfg.stats_file,
		.process_name = NULL,
		.lib_version = PACKAGE_VERSION,
	};
	stats_open(&settings);
}

/* Exit hook, async-signal-safe: a signal that ends the process (SIGINT or
 * SIGTERM with VMA_HANDLE_SIGINTR=1, whose application handler may _exit)
 * must not leave the statistics file behind; stats_close later finds it
 * gone, which is harmless. Only a file this process created goes: never a
 * parent's, never a name it refused (another user's, a symbolic link). */
static void vma_stats_unlink(void *arg)
{
	(void)arg;
	stats_unlink_own_file();
}


/* The name libvma.conf's application-id globs match: the name the program
 * was started as, else the basename of /proc/self/exe. */
static const char *vma_program_name(char *buf, size_t size)
{
	if (program_invocation_short_name && program_invocation_short_name[0])
		return program_invocation_short_name;
	ssize_t len = readlink("/proc/self/exe", buf, size - 1);
	if (len <= 0)
		return "";
	buf[len] = '\0';
	const char *slash = strrchr(buf, '/');
	return slash ? slash + 1 : buf;
}

/* Reset in a forked child, whose internal thread is gone. */
static int vma_engine_started;

static void vma_atfork_child(void)
{
	vma_after_fork_child();
}

/* Before every fork (ours, glibc's daemon(), a library's): see
 * sock_offload_before_fork. */
static void vma_atfork_prepare(void)
{
	sock_offload_before_fork();
}

static void vma_atfork_parent(void)
{
	sock_offload_after_fork_parent();
}

static void vma_init(void)
{
	vma_in_init = true;
	os_libc_resolve();
	/* secure_getenv: a set-user-ID, set-group-ID or file-capability program
	 * ignores VMA_* (cfg_env.h); cfg_env_warn_ignored says so below. */
	cfg_params_load(&g_cfg, cfg_env_get);

	struct vlog_settings log = {
		.level = g_cfg.tracelevel,
		.details = g_cfg.log_details,
		.colors = g_cfg.log_colors,
		.file = g_cfg.log_file,
	};
	vlog_configure(&log);
	cfg_params_print_banner(&g_cfg);
	cfg_env_warn_ignored(g_cfg.config_file);
	vlog_warn_if_high_level();

	char missing[512];
	os_libc_missing(missing, sizeof(missing));
	if (missing[0])
		vlog_debug("not in this libc (calls return ENOSYS): %s", missing);

	char exe[PATH_MAX];
	if (g_cfg.config_file[0])
		cfg_rules_load_file(g_cfg.config_file, vma_program_name(exe, sizeof(exe)), g_cfg.application_id);

	if (sock_fd_table_init(0) != 0)
		vlog_warn("cannot allocate the fd table (%s): every socket stays with the kernel",
			  strerror(errno));
	else
		vlog_debug("fd table: %u entries", sock_fd_table_size());

	vma_open_stats();
	engine_exit_hook_add(vma_stats_unlink, NULL, ENGINE_HOOK_SIGNAL_SAFE | ENGINE_HOOK_FORK_SAFE);
	/* Runs before the default action of a terminating signal (and for
	 * SIGINT/SIGTERM always with VMA_HANDLE_SIGINTR=1): redirect_signal.c. */
	vma_set_sigint_cleanup(engine_shutdown_from_signal);

	redirect_signal_init();
	if (g_cfg.handle_sigsegv)
		vlog_segv_install();
	/* Covers forks that bypass our fork symbol (glibc's daemon(), a
	 * library calling __fork); the pid guard makes it run once per child. */
	pthread_atfork(vma_atfork_prepare, vma_atfork_parent, vma_atfork_child);

	vma_in_init = false;
	__atomic_store_n(&vma_ready, true, __ATOMIC_RELEASE);
}

bool vma_init_once(void)
{
	if (__builtin_expect(__atomic_load_n(&vma_ready, __ATOMIC_ACQUIRE), 1))
		return true;
	if (vma_in_init)
		return false;
	pthread_once(&vma_once, vma_init);
	return __atomic_load_n(&vma_ready, __ATOMIC_ACQUIRE);
}

void vma_after_fork_child(void)
{
	pid_t self = getpid();
	if (vma_fork_hook_pid == self)
		return;
	vma_fork_hook_pid = self;
	/* Only the forking thread exists in the child: a vma_init() that
	 * another thread was running at fork time will never finish here,
	 * and glibc's pthread_once lets the child run it again. */
	vma_in_init = false;
	/* Before anything frees a connection of the parent's lanes here: the
	 * peers list is shared with the parent, whose entries they are. */
	vmad_peers_after_fork_child();
	/* First: the rings, flows and XDP program are the parent's. */
	sock_offload_after_fork_child();
	ring_spin_after_fork_child();
	os_signal_after_fork_child();
	engine_after_fork_child();
	__atomic_store_n(&vma_engine_started, 0, __ATOMIC_RELEASE);
	stats_after_fork_child();
	vlog_debug("fork: child process %d inherits %u tracked fds", (int)self, sock_fd_tracked_count());
}

void vma_before_privilege_drop(void)
{
#if VMA_HAVE_XDP
	if (!vma_init_once() || !g_cfg.offloaded_sockets)
		return;
	if (vmad_client_keep_spawner() != 0)
		vlog_info("setuid: no vmad connection could be kept for after the privilege drop; sockets opened "
			  "afterwards use the kernel unless a vmad service serves this user (docs/vmad.md)");
#endif
}

void vma_set_sigint_cleanup(vma_cleanup_fn fn)
{
	__atomic_store_n(&vma_sigint_cleanup, fn, __ATOMIC_RELEASE);
}

void vma_run_sigint_cleanup(void)
{
	vma_cleanup_fn fn = __atomic_load_n(&vma_sigint_cleanup, __ATOMIC_ACQUIRE);
	if (fn)
		fn();
}

__attribute__((constructor)) static void vma_constructor(void)
{
	vma_init_once();
}

void vma_engine_start(void)
{
	if (__atomic_load_n(&vma_engine_started, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_exchange_n(&vma_engine_started, 1, __ATOMIC_ACQ_REL))
		return;
	if (engine_start() != 0)
		return;   /* engine_start warned; sockets work without the thread */
	engine_timer_init(&vma_stats_timer);
	engine_timer_add(&vma_stats_timer, VMA_STATS_SERVICE_MS, VMA_STATS_SERVICE_MS, vma_stats_service, NULL);
}

__attribute__((destructor)) static void vma_destructor(void)
{
	engine_shutdown();
	stats_close();
	vlog_shutdown();
}
