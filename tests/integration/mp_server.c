/* Echo server with several process and thread models, for mp_procs.sh
 * (docs/process_model.md: one interface, many processes).
 *
 *   mp_server --port P [--bind ADDR] [--model M] [--workers N] [--size B]
 *             [--stats FILE] [--pidfile FILE] [--max-seconds S] [--user NAME]
 *
 * Models:
 *   single       one process, one epoll loop.
 *   prefork      the master binds and listens, forks N workers and only
 *                waits for them; each worker has its own epoll with the
 *                shared listener and accepts non-blocking.
 *   threads      one process, N threads, each its own epoll on the shared
 *                listener (EPOLLEXCLUSIVE).
 *   threads-reuseport  one process, N threads, each with its own
 *                SO_REUSEPORT listener on the port and its own epoll.
 *   udp-threads  one process, N threads, each with its own SO_REUSEPORT UDP
 *                socket on the port, blocking recvfrom + sendto echo.
 *   udp-shared   the main thread makes and binds one UDP socket, then N
 *                threads echo on it (blocking recvfrom + sendto).
 *   threads-handoff  one process: the main thread accepts and hands each
 *                connection to one of N worker threads in turn (through a
 *                pipe), each with its own epoll: the acceptor/worker model
 *                of memcached and many thread-pool servers.
 *   forkconn     blocking accept loop; one child per connection serves it
 *                with blocking I/O and exits; SIGCHLD reaps.
 *   daemon       `single` after a fork + setsid + fork done after listen();
 *                the original process exits 0 at once.
 *   udp-prefork  the master binds a UDP socket and forks N workers doing
 *                blocking recvfrom + sendto echo.
 *
 * TCP protocol: fixed-size requests of B bytes (default 64) echoed back
 * unchanged, one at a time per connection, until the client closes.
 *
 * Output (stdout): "worker PID" per forked worker, then "ready" once every
 * worker is in its serving loop. Stats lines go to --stats FILE (opened
 * O_APPEND so every process can share it) or stdout, one write() each:
 *   worker ID accepted A requests R           at exit
 *   snapshot worker ID accepted A requests R  on SIGUSR1 (the master of
 *                                             prefork forwards it)
 * ID is the pid, or the thread id in the threads model. For forkconn the one
 * line is the master's: connections it accepted, requests its children
 * echoed (summed in shared memory). For UDP "accepted" is always 0.
 * --work-us N: every request costs about N microseconds of CPU (a loop
 * calibrated at start) before its echo, as a real server's requests do, so
 * a benchmark on a small machine measures the server rather than the load
 * generator sharing its cores (TCP models with epoll, UDP models).
 * --user NAME: started as root, the server becomes NAME (setgroups, setgid,
 * setuid) before it opens any socket, as daemons' "-u user" options do.
 * SIGTERM/SIGINT stop every model cleanly (exit 0). --max-seconds (default
 * 120) is a safety net: every process stops by itself after that long, so
 * a killed test never leaves a server behind.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 64
#define MAX_SIZE 65536
/* Loops wake this often to see the stop flag even if a signal raced them. */
#define TICK_MS 200
/* A blocking forkconn child gives up on a silent client after this long. */
#define CHILD_IDLE_SEC 10
#define READY_WAIT_MS 10000

enum model {
	M_SINGLE, M_PREFORK, M_THREADS, M_FORKCONN, M_DAEMON, M_UDP_PREFORK, M_THREADS_REUSEPORT, M_UDP_THREADS,
	M_UDP_SHARED, M_THREADS_HANDOFF
};

/* Indexed by enum model. */
static const char *const model_names[] = { "single",  "prefork",     "threads",          "forkconn",
					   "daemon",  "udp-prefork", "threads-reuseport", "udp-threads",
					   "udp-shared", "threads-handoff" };

static struct {
	const char *bind_addr;
	int port;
	enum model model;
	int workers;
	size_t size;
	const char *stats;
	const char *pidfile;
	int max_seconds;
	const char *user;
	int work_us;
} opt = { "0.0.0.0", 0, M_SINGLE, 4, 64, NULL, NULL, 120, NULL, 0 };

/* --work-us: the CPU a request costs before its answer, as a real server's
 * requests do (parsing, a lookup, building the reply). A loop of rounds
 * measured once at start, so time spent descheduled is not counted as work
 * done: the cost is CPU, whatever the machine's load. */
static unsigned long work_rounds_per_us;
static volatile uint64_t work_sink;

static uint64_t work_rounds(const unsigned char *req, size_t len, unsigned long rounds)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
	for (unsigned long i = 0; i < rounds; i++)
		h = (h ^ req[i % len]) * 0x100000001b3ull + i;
	return h;
}

static void work_calibrate(void)
{
	unsigned char probe[64] = { 1 };
	unsigned long rounds = 1000;
	for (;;) {
		struct timespec a, b;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
		work_sink += work_rounds(probe, sizeof(probe), rounds);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
		uint64_t ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
		if (ns >= 20000000u) {   /* 20 ms of CPU: a stable rate */
			work_rounds_per_us = (unsigned long)(rounds * 1000u / ns);
			if (!work_rounds_per_us)
				work_rounds_per_us = 1;
			return;
		}
		rounds *= 2;
	}
}

static void request_work(const unsigned char *req, size_t len)
{
	if (opt.work_us > 0)
		work_sink += work_rounds(req, len, work_rounds_per_us * (unsigned long)opt.work_us);
}

static volatile sig_atomic_t stop_flag;
/* Bumped by SIGUSR1; every worker compares it with the value it last saw,
 * so each thread of the threads model writes its own snapshot. */
static volatile sig_atomic_t dump_gen;
static double deadline;
static int stats_fd = STDOUT_FILENO;

static double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int should_stop(void)
{
	return stop_flag || now_sec() >= deadline;
}

static void msg(const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "mp_server[%d]: ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf))
		n = sizeof(buf) - 1;
	buf[n++] = '\n';
	/* One write: lines of concurrent processes never interleave. */
	if (write(STDERR_FILENO, buf, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void on_usr1(int sig)
{
	(void)sig;
	dump_gen++;
}

/* No SA_RESTART: a blocking accept/recvfrom/waitpid returns EINTR, so the
 * flag is seen at once. */
static void set_handler(int sig, void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void write_stats(const char *prefix, long id, long accepted, long requests)
{
	char line[128];
	int n = snprintf(line, sizeof(line), "%sworker %ld accepted %ld requests %ld\n", prefix, id,
			 accepted, requests);
	/* One write() on an O_APPEND file: atomic between processes. */
	if (write(stats_fd, line, (size_t)n) != n)
		msg("stats write: %s", strerror(errno));
}

static void write_pidfile(pid_t pid)
{
	if (!opt.pidfile)
		return;
	/* Written beside and renamed, so the test never reads half a pid. */
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", opt.pidfile, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", (int)pid) < 0 || fclose(f) || rename(tmp, opt.pidfile))
		msg("pidfile %s: %s", opt.pidfile, strerror(errno));
}

static void say_ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

static struct sockaddr_in bind_sockaddr(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port) };
	if (inet_pton(AF_INET, opt.bind_addr, &sa.sin_addr) != 1) {
		msg("bad --bind address %s", opt.bind_addr);
		exit(2);
	}
	return sa;
}

static int make_listener(int type)
{
	struct sockaddr_in sa = bind_sockaddr();
	int fd = socket(AF_INET, type, 0), one = 1;
	if (fd < 0) {
		msg("socket: %s", strerror(errno));
		exit(1);
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if ((opt.model == M_THREADS_REUSEPORT || opt.model == M_UDP_THREADS) &&
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) {
		msg("SO_REUSEPORT: %s", strerror(errno));
		exit(1);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		msg("bind %s:%d: %s", opt.bind_addr, opt.port, strerror(errno));
		exit(1);
	}
	if (type == SOCK_STREAM && listen(fd, 1024)) {
		msg("listen: %s", strerror(errno));
		exit(1);
	}
	return fd;
}

static void set_nonblocking(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* A worker must not outlive its master: a SIGKILLed master would otherwise
 * leave workers serving (and holding the namespace) forever. */
static void die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(0);
}

/* ---------------- epoll worker (single, prefork, threads, daemon) ---------------- */

struct conn {
	struct conn *prev, *next; /* the worker's open connections */
	int fd;
	size_t rlen; /* bytes of the current request received */
	size_t woff; /* bytes of it echoed; > 0 or rlen == size means echoing */
	int want_out;
	unsigned char buf[];
};

struct worker_stats {
	long id;
	long accepted;
	long requests;
	struct conn *conns; /* open connections, closed when the worker stops */
};

static void conn_close(int ep, struct conn *c, struct worker_stats *st)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		st->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c);
}

/* Moves the connection as far as it can go without blocking; returns 1 when
 * it ended (EOF or error) and must be closed. */
static int conn_service(int ep, struct conn *c, struct worker_stats *st)
{
	for (;;) {
		if (c->rlen < opt.size) {
			ssize_t r = recv(c->fd, c->buf + c->rlen, opt.size - c->rlen, 0);
			if (r == 0) {
				if (c->rlen)
					msg("connection closed mid-request (%zu of %zu bytes)", c->rlen, opt.size);
				return 1;
			}
			if (r < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					break;
				if (errno != ECONNRESET)
					msg("recv: %s", strerror(errno));
				return 1;
			}
			c->rlen += (size_t)r;
			if (c->rlen == opt.size)
				request_work(c->buf, opt.size);
			continue;
		}
		ssize_t w = send(c->fd, c->buf + c->woff, opt.size - c->woff, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (errno != ECONNRESET && errno != EPIPE)
				msg("send: %s", strerror(errno));
			return 1;
		}
		c->woff += (size_t)w;
		if (c->woff == opt.size) {
			st->requests++;
			c->rlen = c->woff = 0;
		}
	}
	/* Ask for EPOLLOUT only while an echo is stuck, else a level-triggered
	 * EPOLLOUT would spin the loop. */
	int want_out = c->rlen == opt.size;
	if (want_out != c->want_out) {
		struct epoll_event ev = { .events = want_out ? EPOLLOUT : EPOLLIN, .data.ptr = c };
		epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		c->want_out = want_out;
	}
	return 0;
}

/* A connection fd (non-blocking) joins this worker's epoll and is served. */
static void conn_add(int ep, int fd, struct worker_stats *st)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct conn *c = calloc(1, sizeof(*c) + opt.size);
	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
		msg("epoll_ctl add conn: %s", strerror(errno));
		close(fd);
		free(c);
		return;
	}
	st->accepted++;
	c->next = st->conns;
	if (c->next)
		c->next->prev = c;
	st->conns = c;
	/* The request may be there already. */
	if (conn_service(ep, c, st))
		conn_close(ep, c, st);
}

static void accept_all(int ep, int ls, struct worker_stats *st)
{
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			/* EAGAIN: another worker won this connection, as expected
			 * when several epolls watch one listener. */
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				msg("accept: %s", strerror(errno));
			return;
		}
		conn_add(ep, fd, st);
	}
}

/* threads-handoff: connection fds the acceptor wrote to this worker's
 * pipe (ls is the pipe's read end). */
static void handoff_take(int ep, int pipe_fd, struct worker_stats *st)
{
	int fds[64];
	ssize_t r;
	while ((r = read(pipe_fd, fds, sizeof(fds))) > 0)
		for (ssize_t i = 0; i < r / (ssize_t)sizeof(int); i++)
			conn_add(ep, fds[i], st);
}

/* Serves the listener until stopped. ready(ready_arg) is called once after
 * the first epoll_wait: from that point this worker takes its share (libvma
 * joins a listener's share group on the first poll over it), so nobody says
 * "ready" before every worker can accept. */
static void epoll_worker(int ls, int exclusive, void (*ready)(int), int ready_arg,
			 struct worker_stats *st)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		msg("epoll_create1: %s", strerror(errno));
		exit(1);
	}
	/* data.ptr NULL marks the listener. */
	struct epoll_event lev = { .events = EPOLLIN | (exclusive ? EPOLLEXCLUSIVE : 0), .data.ptr = NULL };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev)) {
		msg("epoll_ctl add listener: %s", strerror(errno));
		exit(1);
	}
	struct epoll_event evs[64];
	int first = 1;
	sig_atomic_t seen_gen = dump_gen;
	while (!should_stop()) {
		int n = epoll_wait(ep, evs, 64, first ? 0 : TICK_MS);
		if (n < 0 && errno != EINTR) {
			msg("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c && opt.model == M_THREADS_HANDOFF)
				handoff_take(ep, ls, st);
			else if (!c)
				accept_all(ep, ls, st);
			else if (conn_service(ep, c, st))
				conn_close(ep, c, st);
		}
		if (first)
			ready(ready_arg);
		first = 0;
		if (seen_gen != dump_gen) {
			seen_gen = dump_gen;
			write_stats("snapshot ", st->id, st->accepted, st->requests);
		}
	}
	/* A thread's process lives on until every thread stopped: what this
	 * worker opened is closed here, not left to the process exit. */
	while (st->conns)
		conn_close(ep, st->conns, st);
	close(ep);
	write_stats("", st->id, st->accepted, st->requests);
}

/* Waits until `count` ready bytes arrived (every worker polls its
 * listener); returns 0, or -1 on timeout or a worker gone early. */
static int wait_ready(int rfd, int count)
{
	double end = now_sec() + READY_WAIT_MS / 1000.0;
	while (count > 0 && !should_stop()) {
		struct pollfd p = { .fd = rfd, .events = POLLIN };
		int left = (int)((end - now_sec()) * 1000);
		if (left <= 0)
			return -1;
		int n = poll(&p, 1, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		char b[MAX_WORKERS];
		ssize_t r = read(rfd, b, sizeof(b));
		if (r <= 0)
			return -1;
		count -= (int)r;
	}
	return count > 0 ? -1 : 0;
}

/* ---------------- models ---------------- */

static void ready_print(int unused)
{
	(void)unused;
	say_ready();
}

static void ready_pipe(int fd)
{
	char b = 'r';
	if (write(fd, &b, 1) != 1)
		msg("ready pipe: %s", strerror(errno));
}

static int run_single(int ls)
{
	struct worker_stats st = { .id = getpid() };
	set_nonblocking(ls, 1);
	write_pidfile(getpid());
	epoll_worker(ls, 0, ready_print, 0, &st);
	return 0;
}

/* daemon(1, 1) by hand, after listen(): the listener crosses two forks and a
 * new session, which is what a daemonising server does to a preloaded
 * library. */
static int run_daemon(int ls)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		msg("fork: %s", strerror(errno));
		return 1;
	}
	if (pid > 0)
		_exit(0);
	if (setsid() < 0)
		msg("setsid: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		msg("second fork: %s", strerror(errno));
		_exit(1);
	}
	if (pid > 0)
		_exit(0);
	return run_single(ls);
}

/* Master of prefork and udp-prefork: waits for the workers (no accept, no
 * poll of the listener: it must never take a share), forwards SIGUSR1,
 * stops them on SIGTERM. Returns the exit status. */
static int supervise(pid_t *pids, int n)
{
	int alive = n, stopped = 0;
	sig_atomic_t seen_gen = dump_gen;
	while (alive > 0) {
		if (should_stop()) {
			stopped = 1;
			break;
		}
		if (seen_gen != dump_gen) {
			seen_gen = dump_gen;
			for (int i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGUSR1);
		}
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid < 0 && errno == ECHILD)
			break;
		if (pid <= 0) {
			/* Polled rather than blocking so a signal that lands just
			 * before the call is never lost. */
			struct timespec ts = { 0, 50 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			continue;
		}
		for (int i = 0; i < n; i++)
			if (pids[i] == pid) {
				pids[i] = -1;
				alive--;
				if (WIFSIGNALED(status))
					msg("worker %d killed by signal %d", (int)pid, WTERMSIG(status));
				else
					msg("worker %d exited with %d", (int)pid, WEXITSTATUS(status));
			}
	}
	if (!stopped) {
		msg("every worker is gone");
		return 1;
	}
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGTERM);
	/* Workers stop within a tick; a stuck one is killed after 3 s. */
	double end = now_sec() + 3;
	while (alive > 0) {
		pid_t pid = waitpid(-1, NULL, WNOHANG);
		if (pid < 0)
			break;
		if (pid == 0) {
			if (now_sec() > end) {
				for (int i = 0; i < n; i++)
					if (pids[i] > 0) {
						msg("worker %d did not stop, SIGKILL", (int)pids[i]);
						kill(pids[i], SIGKILL);
					}
				end = now_sec() + 3600;
			}
			struct timespec ts = { 0, 20 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			continue;
		}
		for (int i = 0; i < n; i++)
			if (pids[i] == pid) {
				pids[i] = -1;
				alive--;
			}
	}
	return 0;
}

static void udp_worker(int fd, int ready_fd, struct worker_stats *st);

/* prefork and udp-prefork: fork the workers, wait until each one has polled
 * the socket, say ready, supervise. */
static int run_prefork(int ls, int udp)
{
	pid_t pids[MAX_WORKERS], master = getpid();
	int rp[2];
	if (pipe(rp)) {
		msg("pipe: %s", strerror(errno));
		return 1;
	}
	if (!udp)
		set_nonblocking(ls, 1);
	for (int i = 0; i < opt.workers; i++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			msg("fork: %s", strerror(errno));
			for (int j = 0; j < i; j++)
				kill(pids[j], SIGKILL);
			return 1;
		}
		if (pid == 0) {
			close(rp[0]);
			die_with_parent(master);
			struct worker_stats st = { .id = getpid() };
			if (udp)
				udp_worker(ls, rp[1], &st);
			else
				epoll_worker(ls, 0, ready_pipe, rp[1], &st);
			_exit(0);
		}
		pids[i] = pid;
		printf("worker %d\n", (int)pid);
	}
	close(rp[1]);
	if (wait_ready(rp[0], opt.workers)) {
		msg("workers did not all become ready");
		stop_flag = 1;
		supervise(pids, opt.workers);
		return 1;
	}
	close(rp[0]);
	write_pidfile(getpid());
	say_ready();
	return supervise(pids, opt.workers);
}

struct thread_arg {
	pthread_t tid;
	int ls, ready_fd;
	int handoff[2];              /* threads-handoff: the acceptor writes fds to [1] */
	struct worker_stats st;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	a->st.id = gettid();
	if (opt.model == M_UDP_SHARED) {
		udp_worker(a->ls, a->ready_fd, &a->st);
		return NULL;
	}
	if (opt.model == M_UDP_THREADS) {
		/* Its own socket, made by this thread (a ring per thread). */
		int fd = make_listener(SOCK_DGRAM);
		udp_worker(fd, a->ready_fd, &a->st);
		close(fd);
		return NULL;
	}
	if (opt.model == M_THREADS_REUSEPORT) {
		a->ls = make_listener(SOCK_STREAM);
		set_nonblocking(a->ls, 1);
	}
	if (opt.model == M_THREADS_HANDOFF) {
		epoll_worker(a->handoff[0], 0, ready_pipe, a->ready_fd, &a->st);
		return NULL;
	}
	epoll_worker(a->ls, 1, ready_pipe, a->ready_fd, &a->st);
	if (opt.model == M_THREADS_REUSEPORT)
		close(a->ls);
	return NULL;
}

/* threads-handoff: the main thread accepts and gives each connection to
 * the next worker in turn. */
static void handoff_accept(int ls, struct thread_arg *args, int workers)
{
	int next = 0;
	while (!should_stop()) {
		struct pollfd p = { .fd = ls, .events = POLLIN };
		if (poll(&p, 1, TICK_MS) <= 0)
			continue;
		int fd;
		while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
			if (write(args[next].handoff[1], &fd, sizeof(fd)) != (ssize_t)sizeof(fd)) {
				msg("handoff write: %s", strerror(errno));
				close(fd);
			}
			next = (next + 1) % workers;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
			msg("accept: %s", strerror(errno));
	}
}

static int run_threads(int ls)
{
	struct thread_arg args[MAX_WORKERS];
	int rp[2], started = 0, rc = 0;
	if (pipe(rp)) {
		msg("pipe: %s", strerror(errno));
		return 1;
	}
	if (ls >= 0 && opt.model != M_UDP_SHARED)
		set_nonblocking(ls, 1);
	for (int i = 0; i < opt.workers; i++) {
		args[i] = (struct thread_arg){ .ls = ls, .ready_fd = rp[1], .handoff = { -1, -1 } };
		if (opt.model == M_THREADS_HANDOFF && pipe2(args[i].handoff, O_NONBLOCK | O_CLOEXEC)) {
			msg("pipe2: %s", strerror(errno));
			stop_flag = 1;
			rc = 1;
			break;
		}
		int e = pthread_create(&args[i].tid, NULL, thread_main, &args[i]);
		if (e) {
			msg("pthread_create: %s", strerror(e));
			stop_flag = 1;
			rc = 1;
			break;
		}
		started++;
	}
	if (!rc && wait_ready(rp[0], started) == 0) {
		write_pidfile(getpid());
		say_ready();
		if (opt.model == M_THREADS_HANDOFF)
			handoff_accept(ls, args, started);
	} else if (!rc) {
		msg("threads did not all become ready");
		stop_flag = 1;
		rc = 1;
	}
	for (int i = 0; i < started; i++)
		pthread_join(args[i].tid, NULL);
	for (int i = 0; i < started; i++)
		if (args[i].handoff[0] >= 0) {
			close(args[i].handoff[0]);
			close(args[i].handoff[1]);
		}
	close(rp[0]);
	close(rp[1]);
	return rc;
}

/* forkconn: the children add their echoed requests here (shared memory),
 * so the master's one stats line covers every child, killed ones too. */
static long *shared_requests;
static volatile sig_atomic_t children_alive;
/* Running children, so a stopping master can pass SIGTERM on (a child not
 * in the table, if it is ever full, still ends by PR_SET_PDEATHSIG). */
#define MAX_CHILDREN 1024
static volatile pid_t children[MAX_CHILDREN];

static void on_chld(int sig)
{
	(void)sig;
	int saved = errno;
	pid_t pid;
	while ((pid = waitpid(-1, NULL, WNOHANG)) > 0) {
		children_alive--;
		for (int i = 0; i < MAX_CHILDREN; i++)
			if (children[i] == pid) {
				children[i] = 0;
				break;
			}
	}
	errno = saved;
}

/* A forkconn child: blocking recv/send of whole requests until EOF. */
static void serve_blocking(int fd)
{
	unsigned char *buf = malloc(opt.size);
	/* A one-second receive timeout lets the child see SIGTERM races and
	 * give up on a silent client; EINTR does the rest. */
	struct timeval tv = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int one = 1, idle = 0;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while (buf && !should_stop()) {
		size_t got = 0;
		while (got < opt.size && !should_stop()) {
			ssize_t r = recv(fd, buf + got, opt.size - got, 0);
			if (r > 0) {
				got += (size_t)r;
				idle = 0;
				continue;
			}
			if (r == 0) {
				if (got)
					msg("connection closed mid-request (%zu of %zu bytes)", got, opt.size);
				goto out;
			}
			if (errno == EINTR)
				continue;
			if ((errno == EAGAIN || errno == EWOULDBLOCK) && ++idle < CHILD_IDLE_SEC)
				continue;
			if (errno != ECONNRESET)
				msg("child recv: %s", strerror(errno));
			goto out;
		}
		size_t off = 0;
		while (off < got) {
			ssize_t w = send(fd, buf + off, got - off, MSG_NOSIGNAL);
			if (w > 0) {
				off += (size_t)w;
				continue;
			}
			if (w < 0 && errno == EINTR && !should_stop())
				continue;
			msg("child send: %s", strerror(errno));
			goto out;
		}
		if (got == opt.size)
			__atomic_add_fetch(shared_requests, 1, __ATOMIC_RELAXED);
	}
out:
	free(buf);
	close(fd);
}

static int run_forkconn(int ls)
{
	pid_t master = getpid();
	long accepted = 0;
	shared_requests = mmap(NULL, sizeof(long), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared_requests == MAP_FAILED) {
		msg("mmap: %s", strerror(errno));
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_chld;
	sa.sa_flags = SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	write_pidfile(getpid());
	say_ready();
	while (!should_stop()) {
		/* poll first so the loop wakes each tick to see the deadline;
		 * the accept itself is the classic blocking one. */
		struct pollfd p = { .fd = ls, .events = POLLIN };
		if (poll(&p, 1, TICK_MS) <= 0)
			continue;
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				msg("accept: %s", strerror(errno));
			continue;
		}
		accepted++;
		fflush(stdout);
		/* SIGCHLD is held from the count to after the fork: the handler
		 * must not decrement between our read and write of the counter,
		 * nor before the child was counted. */
		sigset_t chld, old;
		sigemptyset(&chld);
		sigaddset(&chld, SIGCHLD);
		sigprocmask(SIG_BLOCK, &chld, &old);
		children_alive++;
		pid_t pid = fork();
		if (pid < 0) {
			children_alive--;
			sigprocmask(SIG_SETMASK, &old, NULL);
			msg("fork: %s", strerror(errno));
			close(fd);
			continue;
		}
		if (pid == 0) {
			signal(SIGCHLD, SIG_DFL);
			sigprocmask(SIG_SETMASK, &old, NULL);
			close(ls);
			die_with_parent(master);
			serve_blocking(fd);
			_exit(0);
		}
		for (int i = 0; i < MAX_CHILDREN; i++)
			if (!children[i]) {
				children[i] = pid;
				break;
			}
		sigprocmask(SIG_SETMASK, &old, NULL);
		close(fd);
	}
	close(ls);
	/* Stop the children too, and wait for them (2 s at most) so the
	 * requests they echoed are all counted. */
	sigset_t chld, old;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	for (int i = 0; i < MAX_CHILDREN; i++)
		if (children[i])
			kill(children[i], SIGTERM);
	sigprocmask(SIG_SETMASK, &old, NULL);
	double end = now_sec() + 2;
	while (children_alive > 0 && now_sec() < end) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	write_stats("", getpid(), accepted, __atomic_load_n(shared_requests, __ATOMIC_RELAXED));
	return 0;
}

/* A udp-prefork worker: blocking recvfrom, sendto back. */
static void udp_worker(int fd, int ready_fd, struct worker_stats *st)
{
	unsigned char *buf = malloc(MAX_SIZE);
	if (!buf)
		_exit(1);
	/* The timeout only bounds how long a SIGTERM that raced the call
	 * waits; recvfrom stays a blocking call. */
	struct timeval tv = { 0, TICK_MS * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int first = 1;
	sig_atomic_t seen_gen = dump_gen;
	while (!should_stop()) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		/* The first call does not wait: it only makes this worker take
		 * its share of the port before the master says ready. */
		ssize_t r = recvfrom(fd, buf, MAX_SIZE, first ? MSG_DONTWAIT : 0, (struct sockaddr *)&from, &fl);
		if (first)
			ready_pipe(ready_fd);
		first = 0;
		if (r >= 0) {
			if (r > 0)
				request_work(buf, (size_t)r);
			if (sendto(fd, buf, (size_t)r, 0, (struct sockaddr *)&from, fl) != r)
				msg("sendto: %s", strerror(errno));
			else
				st->requests++;
		} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			msg("recvfrom: %s", strerror(errno));
			break;
		}
		if (seen_gen != dump_gen) {
			seen_gen = dump_gen;
			write_stats("snapshot ", st->id, st->accepted, st->requests);
		}
	}
	free(buf);
	write_stats("", st->id, st->accepted, st->requests);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: mp_server --port P [--bind ADDR]\n"
		"                 [--model single|prefork|threads|forkconn|daemon|udp-prefork|threads-reuseport|udp-threads|\n"
		"                          udp-shared|threads-handoff]\n"
		"                 [--workers N] [--size B] [--stats FILE] [--pidfile FILE] [--max-seconds S]\n"
		"                 [--user NAME] [--work-us N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "bind", required_argument, NULL, 'b' },
		{ "model", required_argument, NULL, 'm' },
		{ "workers", required_argument, NULL, 'w' },
		{ "size", required_argument, NULL, 's' },
		{ "stats", required_argument, NULL, 'S' },
		{ "pidfile", required_argument, NULL, 'P' },
		{ "max-seconds", required_argument, NULL, 'T' },
		{ "user", required_argument, NULL, 'u' },
		{ "work-us", required_argument, NULL, 'W' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'p': opt.port = atoi(optarg); break;
		case 'b': opt.bind_addr = optarg; break;
		case 'm': {
			size_t i, n = sizeof(model_names) / sizeof(model_names[0]);
			for (i = 0; i < n && strcmp(optarg, model_names[i]); i++)
				;
			if (i == n)
				usage();
			opt.model = (enum model)i;
			break;
		}
		case 'w': opt.workers = atoi(optarg); break;
		case 's': opt.size = (size_t)atol(optarg); break;
		case 'S': opt.stats = optarg; break;
		case 'P': opt.pidfile = optarg; break;
		case 'T': opt.max_seconds = atoi(optarg); break;
		case 'u': opt.user = optarg; break;
		case 'W': opt.work_us = atoi(optarg); break;
		default: usage();
		}
	}
	if (optind != argc || opt.port <= 0 || opt.port > 65535 || opt.workers < 1 ||
	    opt.workers > MAX_WORKERS || opt.size < 1 || opt.size > MAX_SIZE || opt.max_seconds < 1 || opt.work_us < 0 || opt.work_us > 1000000)
		usage();
	if (opt.work_us)
		work_calibrate();
	if (opt.stats) {
		stats_fd = open(opt.stats, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (stats_fd < 0) {
			msg("--stats %s: %s", opt.stats, strerror(errno));
			return 1;
		}
	}
	deadline = now_sec() + opt.max_seconds;
	set_handler(SIGTERM, on_stop);
	set_handler(SIGINT, on_stop);
	set_handler(SIGUSR1, on_usr1);
	signal(SIGPIPE, SIG_IGN);

	if (opt.user) {
		struct passwd *pw = getpwnam(opt.user);
		if (!pw || setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
			msg("--user %s: %s", opt.user, pw ? strerror(errno) : "no such user");
			return 1;
		}
	}
	/* The per-thread models make their sockets in their threads. */
	int ls = opt.model == M_THREADS_REUSEPORT || opt.model == M_UDP_THREADS ?
			 -1 :
			 make_listener(opt.model == M_UDP_PREFORK || opt.model == M_UDP_SHARED ? SOCK_DGRAM : SOCK_STREAM);
	switch (opt.model) {
	case M_SINGLE: return run_single(ls);
	case M_DAEMON: return run_daemon(ls);
	case M_PREFORK: return run_prefork(ls, 0);
	case M_UDP_PREFORK: return run_prefork(ls, 1);
	case M_THREADS:
	case M_THREADS_HANDOFF:
	case M_THREADS_REUSEPORT:
	case M_UDP_THREADS:
	case M_UDP_SHARED: return run_threads(ls);
	case M_FORKCONN: return run_forkconn(ls);
	}
	return 2;
}
