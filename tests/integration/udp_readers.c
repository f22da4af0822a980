/* udp_readers PORT THREADS: THREADS threads, each with a UDP socket of its
 * own bound to 198.18.0.2:PORT+i, each in a loop of blocking recvfrom();
 * driven by udp_readers.sh (docs/process_model.md, "One ring, many
 * readers"). Every datagram is "SEQ MODE" and is answered to its sender with
 * "SEQ THREAD NVCSW", NVCSW being the thread's voluntary context switches
 * so far (getrusage RUSAGE_THREAD: the times it went to sleep), so the
 * client can count the wake-ups a datagram cost. MODE:
 *   e  echo
 *   a  echo, then stay away from recvfrom for 300 ms (a reader that leaves
 *      its receive and does other work)
 *   q  echo, then the thread ends
 * Prints "ready" once every socket is bound, "done" when every thread
 * ended. Exit 0, or 1 on a failed call (printed). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READERS_MAX 16
#define AWAY_NS (300 * 1000 * 1000L)

struct reader {
	pthread_t tid;
	int index;
	int fd;
	int failed;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char buf[256], reply[128];
	for (;;) {
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t n = recvfrom(r->fd, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &len);
		if (n < 0) {
			perror("recvfrom");
			r->failed = 1;
			return NULL;
		}
		buf[n] = '\0';
		unsigned long seq = 0;
		char mode = 'e';
		if (sscanf(buf, "%lu %c", &seq, &mode) != 2) {
			fprintf(stderr, "reader %d: malformed datagram '%s'\n", r->index, buf);
			r->failed = 1;
			continue;
		}
		struct rusage ru;
		getrusage(RUSAGE_THREAD, &ru);
		int m = snprintf(reply, sizeof(reply), "%lu %d %ld", seq, r->index, ru.ru_nvcsw);
		if (sendto(r->fd, reply, (size_t)m, 0, (struct sockaddr *)&from, len) != m) {
			perror("sendto");
			r->failed = 1;
		}
		if (mode == 'q')
			return NULL;
		if (mode == 'a') {
			struct timespec away = { 0, AWAY_NS };
			nanosleep(&away, NULL);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s PORT THREADS\n", argv[0]);
		return 2;
	}
	int port = atoi(argv[1]), nthreads = atoi(argv[2]);
	if (nthreads < 1 || nthreads > READERS_MAX) {
		fprintf(stderr, "THREADS: 1..%d\n", READERS_MAX);
		return 2;
	}
	static struct reader readers[READERS_MAX];
	for (int i = 0; i < nthreads; i++) {
		struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)(port + i)) };
		inet_pton(AF_INET, "198.18.0.2", &sin.sin_addr);
		readers[i].index = i;
		readers[i].fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (readers[i].fd < 0 || bind(readers[i].fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
			perror("socket/bind");
			return 1;
		}
	}
	for (int i = 0; i < nthreads; i++) {
		if (pthread_create(&readers[i].tid, NULL, reader_main, &readers[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	int failed = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(readers[i].tid, NULL);
		failed |= readers[i].failed;
		close(readers[i].fd);
	}
	printf("done\n");
	return failed;
}
