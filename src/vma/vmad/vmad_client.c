/* libvma's side of the vmad protocol (vmad_proto.h, docs/vmad.md).
 *
 * Finding vmad: the abstract socket of this network namespace. When nobody
 * answers and we run as root, we start a private vmad (--auto: it exits a
 * moment after its last member leaves), so a
 * plain `LD_PRELOAD=libvma.so app` needs no daemon set up beforehand, and a
 * pre-fork server's children or a second program find the same one.
 *
 * The start never shows the application a child of ours: no SIGCHLD, nothing
 * its waitpid(-1) could reap (vmad_client_spawn_child). */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "config/cfg_env.h"
#include "log/vlog.h"
#include "ring/ring_domain.h"
#include "vmad/vmad_client.h"
#include "vmad/vmad_peers.h"
#include "os/os.h"

#define VMAD_CLIENT_TIMEOUT_S 5
#define VMAD_CLIENT_SPAWN_STACK (64 * 1024)

extern char **environ;

static socklen_t vmad_client_address(struct sockaddr_un *addr)
{
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	/* Abstract: sun_path[0] stays '\0'. */
	memcpy(addr->sun_path + 1, VMAD_ABSTRACT_NAME, sizeof(VMAD_ABSTRACT_NAME) - 1);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + sizeof(VMAD_ABSTRACT_NAME) - 1);
}

/* vmad answers at once; a vmad that hangs must not hang the application. */
static void vmad_client_set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = VMAD_CLIENT_TIMEOUT_S };
	OS_CALL(setsockopt, fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	OS_CALL(setsockopt, fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int vmad_client_connect(char *why, size_t why_len)
{
	struct sockaddr_un addr;
	socklen_t len = vmad_client_address(&addr);
	int fd = OS_CALL(socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (OS_CALL(connect, fd, (struct sockaddr *)&addr, len) != 0) {
		int err = -errno;
		os_close_nocancel(fd);
		return err;
	}
	/* An abstract name has no owner: anyone could have bound it. */
	struct ucred cred;
	socklen_t cred_len = sizeof(cred);
	if (OS_CALL(getsockopt, fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 ||
	    (cred.uid != 0 && cred.uid != geteuid())) {
		snprintf(why, why_len, "the vmad socket is served by uid %u, not root: not trusted",
			 (unsigned)cred.uid);
		os_close_nocancel(fd);
		return -EACCES;
	}
	vmad_client_set_timeouts(fd);
	return fd;
}

static bool vmad_client_executable(const char *path)
{
	return access(path, X_OK) == 0;
}

/* vmad beside this library: the build tree (build/src/vma/.libs/libvma.so
 * -> build/tools/vmad/vmad), an install (lib/ or lib/<triplet>/ -> sbin/),
 * then the configured sbindir and the usual places. */
static bool vmad_client_find_binary(char *out, size_t len)
{
	Dl_info info;
	char dir[PATH_MAX];
	static const char *const relative[] = {
		"/../../../tools/vmad/vmad",
		"/../../tools/vmad/vmad",
		"/../sbin/vmad",
		"/../../sbin/vmad",
	};

	if (dladdr((void *)vmad_client_find_binary, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
		snprintf(dir, sizeof(dir), "%s", info.dli_fname);
		*strrchr(dir, '/') = '\0';
		for (size_t i = 0; i < sizeof(relative) / sizeof(relative[0]); i++) {
			snprintf(out, len, "%s%s", dir, relative[i]);
			if (vmad_client_executable(out))
				return true;
		}
	}
	const char *fixed[] = { VMA_SBINDIR "/vmad", "/usr/sbin/vmad", "/usr/local/sbin/vmad" };
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		snprintf(out, len, "%s", fixed[i]);
		if (vmad_client_executable(out))
			return true;
	}
	return false;
}

struct vmad_client_spawn {
	const char *path;
	char *const *argv;
	char *const *envp;
	int status;                 /* wait status of `vmad --daemon`, -errno if not started */
};

/* Runs in a CLONE_VM child with no exit signal. It must not exec itself:
 * exec would make it an ordinary child again and the application would see
 * a SIGCHLD (and might reap it). So it forks vmad with a raw clone (no
 * atfork handlers: they are the application's and ours) and waits for
 * `vmad --daemon` to report its socket bound and exit. */
static int vmad_client_spawn_child(void *arg)
{
	struct vmad_client_spawn *sp = arg;
	long pid = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);

	if (pid == 0) {
		syscall(SYS_execve, sp->path, sp->argv, sp->envp);
		syscall(SYS_exit, 127);
	}
	if (pid < 0) {
		sp->status = -ECHILD;
		return 0;
	}
	int status = 0;
	long got;
	do
		got = syscall(SYS_wait4, (pid_t)pid, &status, 0, NULL);
	while (got < 0 && errno == EINTR);
	sp->status = got == pid ? status : -ECHILD;
	return 0;
}

/* Starts `vmad --auto --daemon` without LD_PRELOAD (vmad must not run
 * through us) and waits until it has bound its socket. */
static int vmad_client_spawn(char *why, size_t why_len)
{
	char path[PATH_MAX];
	size_t nenv = 0, kept = 0;

	if (!vmad_client_find_binary(path, sizeof(path))) {
		snprintf(why, why_len, "no vmad is running and the vmad program was not found (install it, "
				       "or start vmad as root)");
		return -ENOENT;
	}
	while (environ && environ[nenv])
		nenv++;
	char **envp = calloc(nenv + 1, sizeof(*envp));
	void *stack = malloc(VMAD_CLIENT_SPAWN_STACK);
	if (!envp || !stack) {
		free(envp);
		free(stack);
		return -ENOMEM;
	}
	/* A program started with raised privileges starts vmad with them, and
	 * its environment was written by someone who does not hold them: vmad
	 * then gets none (it needs none). */
	bool secure = cfg_env_is_secure();
	for (size_t i = 0; i < nenv && !secure; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			envp[kept++] = environ[i];
	char *argv[] = { path, "--auto", "--daemon", NULL };
	struct vmad_client_spawn sp = { .path = path, .argv = argv, .envp = envp, .status = -ECHILD };

	/* CLONE_VFORK: we resume once the helper has exited, i.e. once vmad
	 * is serving. Exit signal 0: no SIGCHLD for the application; we reap
	 * the helper with __WCLONE. */
	pid_t pid = clone(vmad_client_spawn_child, (char *)stack + VMAD_CLIENT_SPAWN_STACK,
			  CLONE_VM | CLONE_VFORK, &sp);
	int err = pid < 0 ? -errno : 0;
	if (pid > 0) {
		pid_t got;
		do
			got = waitpid(pid, NULL, __WCLONE);
		while (got < 0 && errno == EINTR);
		int status = sp.status;
		if (status < 0) {
			snprintf(why, why_len, "cannot start %s", path);
			err = -ECHILD;
		} else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
			snprintf(why, why_len, "%s --auto exited with %s %d", path,
				 WIFEXITED(status) ? "status" : "signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			err = -ECHILD;
		}
	} else {
		snprintf(why, why_len, "cannot start %s: %s", path, strerror(-err));
	}
	free(stack);
	free(envp);
	if (!err)
		vlog_debug("vmad: started a private broker (%s)", path);
	return err;
}

/* Sends req on conn, with send_fd (-1: none) as SCM_RIGHTS. 0 or -errno. */
static int vmad_client_send(int conn, const struct vmad_request *req, int send_fd)
{
	struct iovec iov = { .iov_base = (void *)req, .iov_len = sizeof(*req) };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	memset(&ctl, 0, sizeof(ctl));
	if (send_fd >= 0) {
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &send_fd, sizeof(int));
	}
	do
		n = OS_CALL(sendmsg, conn, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(*req))
		return n < 0 ? -errno : -EPROTO;
	return 0;
}

/* Reads one reply from conn; its descriptors go to fds (*nfds of them),
 * or are closed when fds is NULL. 0 or -errno (-ETIMEDOUT). */
static int vmad_client_receive(int conn, struct vmad_reply *rep, int *fds, unsigned *nfds)
{
	struct iovec iov = { .iov_base = rep, .iov_len = sizeof(*rep) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * VMAD_REPLY_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;

	memset(&ctl, 0, sizeof(ctl));
	do
		n = OS_CALL(recvmsg, conn, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	unsigned got = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		unsigned count = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < count; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && got < VMAD_REPLY_MAX_FDS)
				fds[got++] = fd;
			else
				os_close_nocancel(fd);
		}
	}
	if (nfds)
		*nfds = got;
	else
		for (unsigned i = 0; i < got; i++)
			os_close_nocancel(fds[i]);
	if (n != (ssize_t)sizeof(*rep) || (msg.msg_flags & MSG_CTRUNC))
		return -EPROTO;
	return 0;
}

static int vmad_client_request(int conn, const struct vmad_request *req, int send_fd, struct vmad_reply *rep,
			       int *fds, unsigned *nfds)
{
	int err = vmad_client_send(conn, req, send_fd);
	return err ? err : vmad_client_receive(conn, rep, fds, nfds);
}

/* The SPAWNER connection of a process that was root when it dropped its
 * privileges (vmad_client_keep_spawner); -1 without one. Inherited by
 * forked children, which use it too: ADOPT has no reply on it. */
static int vmad_client_spawner = -1;

/* A connection to vmad, starting a private vmad first when none answers
 * and this process may. */
static int vmad_client_open(char *why, size_t why_len)
{
	int conn = vmad_client_connect(why, why_len);
	if (conn == -ECONNREFUSED || conn == -ENOENT) {
		if (geteuid() != 0) {
			snprintf(why, why_len, "no vmad is running in this network namespace and this process lacks "
					       "the privilege to start one (not root; run vmad as root, see docs/vmad.md)");
			return -EACCES;
		}
		int err = vmad_client_spawn(why, why_len);
		if (err)
			return err;
		conn = vmad_client_connect(why, why_len);
	}
	if (conn < 0 && !why[0])
		snprintf(why, why_len, "cannot reach vmad: %s", strerror(-conn));
	return conn;
}

/* A new connection with the spawner's credentials: one end of a socketpair
 * handed to vmad over the spawner; vmad's reply comes on the other end. */
static int vmad_client_adopt(void)
{
	struct vmad_request req;
	struct vmad_reply rep;
	int sv[2];

	if (OS_CALL(socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return -errno;
	memset(&req, 0, sizeof(req));
	req.op = VMAD_OP_ADOPT;
	req.version = VMAD_PROTO_VERSION;
	/* vmad's end has SO_PASSCRED: the kernel adds our pid itself. */
	int err = vmad_client_send(vmad_client_spawner, &req, sv[1]);
	os_close_nocancel(sv[1]);
	if (!err) {
		vmad_client_set_timeouts(sv[0]);
		err = vmad_client_receive(sv[0], &rep, NULL, NULL);
		/* A refused ADOPT closes the other end: the read ends early. */
		if (err == -EPROTO || (!err && (rep.op != VMAD_OP_ADOPT || rep.status != 0)))
			err = -ECONNREFUSED;
	}
	if (err) {
		os_close_nocancel(sv[0]);
		return err;
	}
	return sv[0];
}

int vmad_client_keep_spawner(void)
{
	struct vmad_request req;
	struct vmad_reply rep;
	char why[192] = "";

	if (vmad_client_spawner >= 0)
		return 0;
	if (geteuid() != 0)
		return -EPERM;
	int conn = vmad_client_open(why, sizeof(why));
	if (conn < 0) {
		vlog_debug("vmad: no spawner connection before the privilege drop: %s", why);
		return conn;
	}
	memset(&req, 0, sizeof(req));
	req.op = VMAD_OP_SPAWNER;
	req.version = VMAD_PROTO_VERSION;
	int err = vmad_client_request(conn, &req, -1, &rep, NULL, NULL);
	if (!err && rep.status < 0)
		err = rep.status;
	if (err) {
		vlog_debug("vmad: spawner refused: %s", strerror(-err));
		os_close_nocancel(conn);
		return err;
	}
	vmad_client_spawner = conn;
	vlog_debug("vmad: spawner connection kept across the privilege drop");
	return 0;
}

static int vmad_client_join_body(const char *ifname, unsigned queue, const struct ring_sizes *sizes,
				 const struct vmad_join_slot *slot, struct vmad_membership *m, char *why, size_t why_len)
{
	struct vmad_request req;
	struct vmad_reply rep;
	int fds[VMAD_REPLY_MAX_FDS];
	unsigned nfds = 0;

	*m = (struct vmad_membership){ .conn = -1, .memfd = -1, .umem_fd = -1, .xsk_fd = -1, .xsk_tx_fd = -1,
				  .flows5_fd = -1 };
	int conn = -1;
	if (vmad_client_spawner >= 0 && geteuid() != 0) {
		/* Root once, not any more: a connection as the root we were. */
		conn = vmad_client_adopt();
		if (conn < 0) {
			vlog_debug("vmad: the spawner connection failed (%s); dropped", strerror(-conn));
			os_close_nocancel(vmad_client_spawner);
			vmad_client_spawner = -1;
		}
	}
	if (conn < 0)
		conn = vmad_client_open(why, why_len);
	if (conn < 0)
		return conn;
	memset(&req, 0, sizeof(req));
	req.op = VMAD_OP_JOIN;
	req.version = VMAD_PROTO_VERSION;
	snprintf(req.ifname, sizeof(req.ifname), "%s", ifname);
	req.queue = queue;
	req.rx_frames = sizes->rx_frames;
	req.tx_frames = sizes->tx_frames;
	req.rx_descs = sizes->rx_descs;
	req.tx_descs = sizes->tx_frames; /* our TX ring holds every TX frame */
	req.want_slot = slot ? slot->want_slot : -1;
	req.span = slot ? slot->span : 1;
	req.mode = sizes->huge_pages ? VMAD_JOIN_M_HUGE : 0;
	/* The process's peers list goes with every JOIN (vmad_peers.h; a vmad
	 * before it closes the descriptor unread). */
	int err = vmad_client_request(conn, &req, vmad_peers_fd(), &rep, fds, &nfds);
	if (!err && rep.status < 0) {
		err = rep.status;
		rep.message[sizeof(rep.message) - 1] = '\0';
		snprintf(why, why_len, "vmad: %s", rep.message[0] ? rep.message : strerror(-err));
	} else if (!err && nfds < 4) {
		err = -EPROTO;
		snprintf(why, why_len, "vmad sent %u descriptors, expected 4 or more", nfds);
	} else if (err) {
		snprintf(why, why_len, "vmad did not answer: %s", strerror(-err));
	}
	if (err) {
		for (unsigned i = 0; i < nfds; i++)
			os_close_nocancel(fds[i]);
		os_close_nocancel(conn);
		return err;
	}
	m->conn = conn;
	m->slot = rep.slot;
	m->flags = rep.flags;
	m->memfd = fds[0];
	m->umem_fd = fds[1];
	if (sizes->huge_pages && !ring_domain_memfd_is_huge(m->memfd)) {
		/* Said once per process: every queue falls back the same way. */
		static bool warned;
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			vlog_warn("VMA_MEM_ALLOC_TYPE=2: the packet frames of %s queue %u are on ordinary pages (no free "
				  "huge pages when vmad created them, or the queue's frames already existed)",
				  ifname, queue);
	}
	m->xsk_fd = fds[2];
	m->xsk_tx_fd = fds[3];
	if ((rep.flags & VMAD_JOIN_F_MAPS) && nfds > 4)
		m->flows5_fd = fds[4];
	for (unsigned i = (m->flows5_fd >= 0 ? 5 : 4); i < nfds; i++)
		os_close_nocancel(fds[i]);
	return 0;
}

static int vmad_client_flow_body(struct vmad_membership *m, int op, const struct ring_flow *flow, int mode,
				 int owner_fd)
{
	struct vmad_request req;
	struct vmad_reply rep;

	if (m->conn < 0)
		return -ENOTCONN;
	memset(&req, 0, sizeof(req));
	req.op = (uint32_t)op;
	req.version = VMAD_PROTO_VERSION;
	req.mode = (uint32_t)mode;
	req.flow = *flow;
	req.flow.owner_fd = -1;
	int err = vmad_client_request(m->conn, &req, op == VMAD_OP_FLOW_ADD ? owner_fd : -1, &rep, NULL, NULL);
	if (err)
		return err;
	if (rep.status < 0) {
		rep.message[sizeof(rep.message) - 1] = '\0';
		vlog_debug("vmad: flow refused: %s", rep.message);
	}
	return rep.status;
}

/* A join or a flow request runs inside an application call (socket, bind,
 * connect, the first send...), often with a lane locked; its sendmsg,
 * recvmsg and connect are libc cancellation points. A pthread_cancel()
 * pending for the thread must not end it there (the lock would stay held
 * for every other thread): cancellation is off for the request's length
 * and acts at the thread's next cancellation point. */
int vmad_client_join(const char *ifname, unsigned queue, const struct ring_sizes *sizes,
		     const struct vmad_join_slot *slot, struct vmad_membership *m, char *why, size_t why_len)
{
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
	int r = vmad_client_join_body(ifname, queue, sizes, slot, m, why, why_len);
	pthread_setcancelstate(state, NULL);
	return r;
}

int vmad_client_flow(struct vmad_membership *m, int op, const struct ring_flow *flow, int mode, int owner_fd)
{
	int state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &state);
	int r = vmad_client_flow_body(m, op, flow, mode, owner_fd);
	pthread_setcancelstate(state, NULL);
	return r;
}

static void vmad_client_close(int *fd)
{
	if (*fd >= 0)
		os_close_nocancel(*fd);
	*fd = -1;
}

void vmad_client_leave(struct vmad_membership *m)
{
	vmad_client_close(&m->flows5_fd);
	vmad_client_close(&m->xsk_fd);
	vmad_client_close(&m->xsk_tx_fd);
	vmad_client_close(&m->memfd);
	vmad_client_close(&m->umem_fd);
	vmad_client_close(&m->conn);
}

void vmad_client_forget(struct vmad_membership *m)
{
	/* The same calls: closing our copies of inherited descriptors never
	 * touches the parent's, and the parent's membership must end when the
	 * parent goes, not when its last child does. */
	vmad_client_leave(m);
}
