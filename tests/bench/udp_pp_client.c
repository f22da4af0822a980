/* udp_pp_client IP PORT [COUNT [SIZE [WARMUP]]]: UDP ping-pong over a kernel
 * socket with SO_BUSY_POLL and a non-blocking spin. Each round trip sends
 * SIZE bytes carrying a sequence number and waits for the same bytes back;
 * a reply that does not arrive within 100 ms counts as lost and the next
 * round starts. Prints half round trip (RTT/2) avg, p50, p99 in usec:
 *   rounds=N lost=N avg_us=X p50_us=X p99_us=X
 * Exit 0, 1 on a setup error or when every round was lost, 2 on usage. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define PP_TIMEOUT_NS 100000000LL

static int64_t pp_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int pp_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct sockaddr_in server = { .sin_family = AF_INET };
	long count = argc > 3 ? atol(argv[3]) : 100000;
	long size = argc > 4 ? atol(argv[4]) : 64;
	long warmup = argc > 5 ? atol(argv[5]) : 1000;
	int busy_usec = 50;
	char out[65536], in[65536];

	if (argc < 3 || argc > 6 || inet_pton(AF_INET, argv[1], &server.sin_addr) != 1 ||
	    atoi(argv[2]) <= 0 || atoi(argv[2]) > 65535 || count <= 0 ||
	    size < (long)sizeof(uint64_t) || size > 1472 || warmup < 0) {
		fprintf(stderr, "usage: %s IP PORT [COUNT [SIZE(8..1472) [WARMUP]]]\n", argv[0]);
		return 2;
	}
	server.sin_port = htons((uint16_t)atoi(argv[2]));
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&server, sizeof(server)) != 0) {
		perror("udp_pp_client: socket/connect");
		return 1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &busy_usec, sizeof(busy_usec)) != 0)
		perror("udp_pp_client: SO_BUSY_POLL (continuing without)");

	int64_t *half = calloc((size_t)count, sizeof(*half));
	if (!half)
		return 1;
	memset(out, 0xa5, (size_t)size);
	long measured = 0, lost = 0;
	for (uint64_t seq = 0; seq < (uint64_t)(count + warmup); seq++) {
		memcpy(out, &seq, sizeof(seq));
		int64_t start = pp_now_ns();
		if (send(fd, out, (size_t)size, 0) != size) {
			lost++;
			continue;
		}
		int64_t end;
		for (;;) {
			ssize_t n = recv(fd, in, sizeof(in), 0);
			end = pp_now_ns();
			if (n == size && memcmp(in, out, (size_t)size) == 0)
				break;
			if (end - start > PP_TIMEOUT_NS) {
				end = 0;
				break;
			}
		}
		if (!end) {
			lost++;
			continue;
		}
		if (seq >= (uint64_t)warmup)
			half[measured++] = (end - start) / 2;
	}
	if (!measured) {
		printf("rounds=0 lost=%ld\n", lost);
		free(half);
		return 1;
	}
	qsort(half, (size_t)measured, sizeof(*half), pp_cmp);
	double sum = 0;
	for (long i = 0; i < measured; i++)
		sum += (double)half[i];
	printf("rounds=%ld lost=%ld avg_us=%.3f p50_us=%.3f p99_us=%.3f\n", measured, lost,
	       sum / (double)measured / 1000.0, (double)half[measured / 2] / 1000.0,
	       (double)half[(measured * 99) / 100] / 1000.0);
	free(half);
	return 0;
}
