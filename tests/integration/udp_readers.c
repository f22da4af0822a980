/* udp_readers PORT THREADS [tcp]: THREADS threads, each with a UDP socket of
 * its own bound to 198.18.0.2:PORT+i, each in a loop of blocking recvfrom();
 * with "tcp", each thread accepts one connection on its own listener
 * there and loops on blocking recv() of READERS_TCP_MSG-byte messages,
 * answered with READERS_TCP_REPLY bytes (the text, padded with spaces);
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
#define READERS_TCP_MSG 32
#define READERS_TCP_REPLY 48

struct reader {
	pthread_t tid;
	int index;
	int fd;       /* the UDP socket, or the TCP listener */
	int conn;     /* TCP: the accepted connection */
	int failed;
};

static int use_tcp;

/* One message: a datagram, or READERS_TCP_MSG bytes of the stream. */
static ssize_t reader_recv(struct reader *r, char *buf, size_t cap, struct sockaddr_in *from, socklen_t *len)
{
	if (!use_tcp)
		return recvfrom(r->fd, buf, cap, 0, (struct sockaddr *)from, len);
	size_t got = 0;
	while (got < READERS_TCP_MSG) {
		ssize_t n = recv(r->conn, buf + got, READERS_TCP_MSG - got, 0);
		if (n <= 0)
			return n < 0 ? -1 : 0;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static int reader_send(struct reader *r, char *reply, int m, const struct sockaddr_in *from, socklen_t len)
{
	if (!use_tcp)
		return sendto(r->fd, reply, (size_t)m, 0, (const struct sockaddr *)from, len) == m ? 0 : -1;
	memset(reply + m, ' ', READERS_TCP_REPLY - (size_t)m);
	return send(r->conn, reply, READERS_TCP_REPLY, 0) == READERS_TCP_REPLY ? 0 : -1;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char buf[256], reply[128];
	if (use_tcp) {
		r->conn = accept(r->fd, NULL, NULL);
		if (r->conn < 0) {
			perror("accept");
			r->failed = 1;
			return NULL;
		}
	}
	for (;;) {
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t n = reader_recv(r, buf, sizeof(buf) - 1, &from, &len);
		if (n <= 0) {
			perror(n < 0 ? "recv" : "recv: the peer closed");
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
		if (reader_send(r, reply, m, &from, len) != 0) {
			perror("send");
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
	if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "tcp") != 0)) {
		fprintf(stderr, "usage: %s PORT THREADS [tcp]\n", argv[0]);
		return 2;
	}
	use_tcp = argc == 4;
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
		readers[i].fd = socket(AF_INET, use_tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
		readers[i].conn = -1;
		int one = 1;
		if (readers[i].fd < 0 || setsockopt(readers[i].fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
		    bind(readers[i].fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
		    (use_tcp && listen(readers[i].fd, 4) != 0)) {
			perror("socket/bind/listen");
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
		if (readers[i].conn >= 0)
			close(readers[i].conn);
		close(readers[i].fd);
	}
	printf("done\n");
	return failed;
}
