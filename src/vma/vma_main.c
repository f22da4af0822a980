/* The library's start (constructor or first interposed call, whichever
 * comes first) and stop. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "vma_main.h"
#include "config/cfg_params.h"
#include "config/cfg_rules.h"
#include "log/vlog.h"
#include "redirect/redirect.h"
#include "sock/sock_fd_table.h"

static pthread_once_t vma_once = PTHREAD_ONCE_INIT;
static bool vma_ready;
/* Set while this thread runs vma_init: its own interposed calls must not
 * wait on vma_once (they would deadlock) and go to libc instead. */
static __thread bool vma_in_init;
static pid_t vma_fork_hook_pid;
static vma_cleanup_fn vma_sigint_cleanup;

static const char *vma_getenv(const char *name)
{
	return getenv(name);
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

static void vma_atfork_child(void)
{
	vma_after_fork_child();
}

static void vma_init(void)
{
	vma_in_init = true;
	redirect_resolve_originals();
	cfg_params_load(&g_cfg, vma_getenv);

	struct vlog_settings log = {
		.level = g_cfg.tracelevel,
		.details = g_cfg.log_details,
		.colors = g_cfg.log_colors,
		.file = g_cfg.log_file,
	};
	vlog_configure(&log);
	cfg_params_print_banner(&g_cfg);
	vlog_warn_if_high_level();

	char missing[512];
	redirect_orig_missing(missing, sizeof(missing));
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

	redirect_signal_init();
	/* Covers forks that bypass our fork symbol (glibc's daemon(), a
	 * library calling __fork); the pid guard makes it run once per child. */
	pthread_atfork(NULL, NULL, vma_atfork_child);

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
	vlog_debug("fork: child process %d inherits %u tracked fds", (int)self, sock_fd_tracked_count());
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

__attribute__((destructor)) static void vma_destructor(void)
{
	vlog_shutdown();
}
