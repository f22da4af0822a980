/* udp_echo_kernel PORT [BIND_IP]: the kernel baseline for ring_echo. A UDP
 * socket with SO_BUSY_POLL, polled in a non-blocking spin, sends every
 * datagram back to its sender. Prints "ready" once bound; SIGINT/SIGTERM
 * exit 0 after printing the count. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

static volatile sig_atomic_t echo_stop;

static void echo_on_signal(int sig)
{
	(void)sig;
	echo_stop = 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	char buf[65536];
	unsigned long long count = 0;
	int busy_usec = 50;

	if (argc < 2 || argc > 3 || atoi(argv[1]) <= 0 || atoi(argv[1]) > 65535 ||
	    (argc == 3 && inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1)) {
		fprintf(stderr, "usage: %s PORT [BIND_IP]\n", argv[0]);
		return 2;
	}
	addr.sin_port = htons((uint16_t)atoi(argv[1]));
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		perror("udp_echo_kernel: socket/bind");
		return 1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &busy_usec, sizeof(busy_usec)) != 0)
		perror("udp_echo_kernel: SO_BUSY_POLL (continuing without)");

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = echo_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	printf("ready\n");
	fflush(stdout);

	while (!echo_stop) {
		struct sockaddr_in peer;
		socklen_t peer_len = sizeof(peer);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&peer, &peer_len);
		if (n < 0)
			continue; /* EAGAIN: spin */
		if (sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&peer, peer_len) == n)
			count++;
	}
	fprintf(stderr, "udp_echo_kernel: echoed %llu\n", count);
	close(fd);
	return 0;
}
