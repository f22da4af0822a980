/* Sockets across fork(), vfork() and a daemon-style double fork.
 *
 * The parent owns a listening socket for the whole run. Each child kind
 * inherits it (and the library's state), closes its copy, and talks back
 * over sockets it creates itself. The parent checks every byte, every exit
 * status, and that its listener still works after each child is gone: a
 * child must never tear down what belongs to the parent.
 *
 * Usage: fork_sock            (the test)
 *        fork_sock exec-child PORT   (internal: the vfork+exec child) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define STREAM_BYTES (256 * 1024)
#define TIMEOUT_MS 10000

static uint8_t pattern_byte(uint32_t seed, size_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ seed * 40503u;
	x ^= x >> 15;
	return (uint8_t)(x ^ (x >> 7) ^ (uint32_t)(i >> 9));
}

static int wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };
	int rc;
	do
		rc = poll(&p, 1, TIMEOUT_MS);
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		errno = ETIMEDOUT;
	return rc > 0 ? 0 : -1;
}

static int send_pattern(int fd, uint32_t seed, size_t len)
{
	uint8_t buf[8192];
	for (size_t off = 0; off < len;) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);
		for (size_t k = 0; k < n; k++)
			buf[k] = pattern_byte(seed, off + k);
		for (size_t done = 0; done < n;) {
			ssize_t w = send(fd, buf + done, n - done, MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return -1;
			done += (size_t)w;
		}
		off += n;
	}
	return 0;
}

/* Reads exactly len bytes and checks them; 0 on success. */
static int recv_pattern(int fd, uint32_t seed, size_t len)
{
	uint8_t buf[8192];
	for (size_t off = 0; off < len;) {
		if (wait_fd(fd, POLLIN) < 0)
			return -1;
		size_t want = len - off < sizeof(buf) ? len - off : sizeof(buf);
		ssize_t r = recv(fd, buf, want, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ECONNRESET;
			return -1;
		}
		for (ssize_t k = 0; k < r; k++) {
			if (buf[k] != pattern_byte(seed, off + (size_t)k)) {
				fprintf(stderr, "fork_sock: seed %u byte %zu mismatch\n", seed,
					off + (size_t)k);
				errno = EILSEQ;
				return -1;
			}
		}
		off += (size_t)r;
	}
	return 0;
}

static int connect_loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int listen_loopback(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

/* What every child does on its own connection: send its stream, then
 * receive the parent's answer. Seeds tell the children apart. */
static int child_talk(uint16_t port, uint32_t seed)
{
	int fd = connect_loopback(port);
	if (fd < 0 || send_pattern(fd, seed, STREAM_BYTES) < 0 ||
	    recv_pattern(fd, seed + 1, STREAM_BYTES) < 0) {
		perror("fork_sock child");
		return 1;
	}
	close(fd);
	return 0;
}

/* A child also proves it can run a private client/server pair of its own. */
static int child_self_test(uint32_t seed)
{
	uint16_t port;
	int lfd = listen_loopback(&port);
	int cfd = lfd < 0 ? -1 : connect_loopback(port);
	if (cfd < 0 || wait_fd(lfd, POLLIN) < 0) {
		perror("fork_sock child self-test setup");
		return 1;
	}
	int afd = accept(lfd, NULL, NULL);
	if (afd < 0 || send_pattern(cfd, seed, 64 * 1024) < 0 ||
	    recv_pattern(afd, seed, 64 * 1024) < 0) {
		perror("fork_sock child self-test");
		return 1;
	}
	close(afd);
	close(cfd);
	close(lfd);
	return 0;
}

/* Parent side of one child conversation. */
static int parent_serve(int lfd, uint32_t seed, const char *who)
{
	if (wait_fd(lfd, POLLIN) < 0) {
		fprintf(stderr, "fork_sock: no connection from %s: %s\n", who, strerror(errno));
		return -1;
	}
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0 || recv_pattern(fd, seed, STREAM_BYTES) < 0 ||
	    send_pattern(fd, seed + 1, STREAM_BYTES) < 0) {
		fprintf(stderr, "fork_sock: exchange with %s failed: %s\n", who, strerror(errno));
		return -1;
	}
	/* The child closes after reading everything; EOF proves it did. */
	uint8_t extra;
	if (wait_fd(fd, POLLIN) < 0 || recv(fd, &extra, 1, 0) != 0) {
		fprintf(stderr, "fork_sock: %s did not close cleanly\n", who);
		return -1;
	}
	close(fd);
	return 0;
}

static int reap(pid_t pid, const char *who)
{
	int status;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			perror("fork_sock waitpid");
			return -1;
		}
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "fork_sock: %s ended with status 0x%x\n", who, status);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "exec-child") == 0)
		return child_talk((uint16_t)atoi(argv[2]), 300) | child_self_test(301);

	uint16_t port;
	int lfd = listen_loopback(&port);
	if (lfd < 0) {
		perror("fork_sock listen");
		return 1;
	}
	int failed = 0;

	/* 1. Plain fork: the child drops its copy of the listener first. */
	pid_t pid = fork();
	if (pid == 0) {
		close(lfd);
		_exit(child_talk(port, 100) | child_self_test(101));
	}
	failed |= pid < 0 || parent_serve(lfd, 100, "fork child") < 0 || reap(pid, "fork child") < 0;

	/* 2a. vfork + _exit: nothing may run in the child but _exit. */
	pid = vfork();
	if (pid == 0)
		_exit(0);
	failed |= pid < 0 || reap(pid, "vfork+_exit child") < 0;

	/* 2b. vfork + exec of ourselves: a fresh image loads the library again. */
	char portarg[16];
	snprintf(portarg, sizeof(portarg), "%u", port);
	pid = vfork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "exec-child", portarg, (char *)NULL);
		_exit(127);
	}
	failed |= pid < 0 || parent_serve(lfd, 300, "vfork+exec child") < 0 ||
		  reap(pid, "vfork+exec child") < 0;

	/* 3. Daemon style: fork, setsid, fork again, middle exits at once. The
	 * grandchild is not ours to wait for, so its verdict travels in-band: it
	 * only connects after its self-test passed. */
	pid = fork();
	if (pid == 0) {
		close(lfd);
		if (setsid() < 0)
			_exit(2);
		pid_t grandchild = fork();
		if (grandchild < 0)
			_exit(3);
		if (grandchild > 0)
			_exit(0);
		if (child_self_test(201) != 0)
			_exit(1);
		_exit(child_talk(port, 200));
	}
	failed |= pid < 0 || reap(pid, "daemon middle child") < 0 ||
		  parent_serve(lfd, 200, "daemon grandchild") < 0;

	/* 4. After all that, the parent's own sockets still work. */
	failed |= child_self_test(400) != 0;
	pid = fork();
	if (pid == 0) {
		close(lfd);
		_exit(child_talk(port, 500));
	}
	failed |= pid < 0 || parent_serve(lfd, 500, "last fork child") < 0 ||
		  reap(pid, "last fork child") < 0;
	close(lfd);

	if (failed)
		return 1;
	printf("fork_sock: fork, vfork+_exit, vfork+exec and double-fork children all verified\n");
	return 0;
}
