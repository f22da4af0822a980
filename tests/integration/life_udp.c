/* A UDP server driven line by line on stdin, for life_udp.sh: it exercises
 * fork, exec, signals and an unread socket under libvma while the script
 * watches the interface, the kernel counters and the leftovers.
 *
 * Usage: life_udp PORT     then commands on stdin, one reply line each:
 *   recv N MS        receive N datagrams (echo each), reply "recv K"
 *   sleep MS         sleep without calling any socket function
 *   count            drain without blocking, reply "count K BYTES"
 *   fork none|exec|sock PEER_IP PEER_PORT
 *                    the child exits / execs /bin/true / uses its own new
 *                    UDP socket (send to the peer, wait for the echo);
 *                    reply "fork KIND status S pid P" (the child's exit
 *                    status and pid)
 *   handler          install an application SIGINT handler that writes
 *                    "app-handler" and _exits 3; reply "handler"
 *   dflint           SIGINT back to its default action (a background job of a
 *                    script starts with it ignored); reply "dflint"
 *   tid              reply "tid T" for the "vma-internal" thread (0: none)
 *   quit             reply "bye" and exit(0)
 * Anything unexpected makes it reply "error ..." and continue. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int server_fd;

static void app_sigint(int sig)
{
	(void)sig;
	static const char msg[] = "app-handler\n";
	(void)!write(1, msg, sizeof(msg) - 1);
	_exit(3);
}

static int recv_echo(int want, int timeout_ms)
{
	int got = 0;
	char buf[65536];
	while (got < want) {
		struct pollfd p = { .fd = server_fd, .events = POLLIN };
		int rc = poll(&p, 1, timeout_ms);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			break;
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t n = recvfrom(server_fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
		if (n < 0)
			break;
		sendto(server_fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len);
		got++;
	}
	return got;
}

static void count_queued(long *count, long *bytes)
{
	char buf[65536];
	*count = *bytes = 0;
	for (;;) {
		ssize_t n = recv(server_fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0)
			break;
		++*count;
		*bytes += n;
	}
}

/* The child's own socket: one datagram to an echo peer and its answer. */
static int child_own_socket(const char *ip, int port)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return 10;
	struct sockaddr_in peer = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, ip, &peer.sin_addr) != 1)
		return 11;
	static const char msg[] = "from-child";
	char buf[64];
	for (int attempt = 0; attempt < 5; attempt++) {
		if (sendto(fd, msg, sizeof(msg), 0, (struct sockaddr *)&peer, sizeof(peer)) != (ssize_t)sizeof(msg))
			return 12;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 1000) == 1) {
			ssize_t n = recv(fd, buf, sizeof(buf), 0);
			close(fd);
			return n == (ssize_t)sizeof(msg) && memcmp(buf, msg, sizeof(msg)) == 0 ? 0 : 13;
		}
	}
	close(fd);
	return 14;
}

static int run_fork(const char *kind, const char *ip, int port, pid_t *child)
{
	fflush(stdout);
	pid_t pid = fork();
	*child = pid;
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (strcmp(kind, "exec") == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(20);
		}
		if (strcmp(kind, "sock") == 0)
			exit(child_own_socket(ip, port));
		exit(0);   /* "none": a normal exit, destructors and all */
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static long internal_tid(void)
{
	DIR *dir = opendir("/proc/self/task");
	long found = 0;
	if (!dir)
		return 0;
	struct dirent *entry;
	while ((entry = readdir(dir)) && !found) {
		char path[64], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", entry->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && strncmp(comm, "vma-internal", 12) == 0)
			found = atol(entry->d_name);
		fclose(f);
	}
	closedir(dir);
	return found;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: life_udp PORT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	server_fd = socket(AF_INET, SOCK_DGRAM, 0);
	int rcvbuf = 4 * 1024 * 1024;
	setsockopt(server_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
	if (server_fd < 0 || bind(server_fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		printf("error bind %s\n", strerror(errno));
		return 1;
	}
	printf("ready %d\n", (int)getpid());

	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		char cmd[16] = "", kind[16] = "", ip[64] = "";
		int a = 0, b = 0;
		int fields = sscanf(line, "%15s %d %d", cmd, &a, &b);
		if (fields < 1)
			continue;
		if (strcmp(cmd, "recv") == 0 && fields == 3) {
			printf("recv %d\n", recv_echo(a, b));
		} else if (strcmp(cmd, "sleep") == 0 && fields == 2) {
			struct timespec ts = { a / 1000, (long)(a % 1000) * 1000000L };
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
			printf("slept\n");
		} else if (strcmp(cmd, "count") == 0) {
			long count, bytes;
			count_queued(&count, &bytes);
			printf("count %ld %ld\n", count, bytes);
		} else if (strcmp(cmd, "fork") == 0 &&
			   sscanf(line, "%*s %15s %63s %d", kind, ip, &b) >= 1) {
			pid_t child;
			int status = run_fork(kind, ip, b, &child);
			printf("fork %s status %d pid %d\n", kind, status, (int)child);
		} else if (strcmp(cmd, "handler") == 0) {
			struct sigaction act;
			memset(&act, 0, sizeof(act));
			act.sa_handler = app_sigint;
			sigaction(SIGINT, &act, NULL);
			printf("handler\n");
		} else if (strcmp(cmd, "dflint") == 0) {
			signal(SIGINT, SIG_DFL);
			printf("dflint\n");
		} else if (strcmp(cmd, "tid") == 0) {
			printf("tid %ld\n", internal_tid());
		} else if (strcmp(cmd, "quit") == 0) {
			printf("bye\n");
			return 0;
		} else {
			printf("error unknown command\n");
		}
	}
	return 0;
}
