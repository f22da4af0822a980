/* One bulk TCP transfer with an end-to-end digest, for tcp_stream.sh.
 *
 *   tcp_stream send|recv listen|connect ADDR PORT [-n BYTES] [-s SEED] [-r READYFILE]
 *   tcp_stream gen BYTES SEED        (the send stream on stdout, to check our sha256)
 *
 * The sender writes a deterministic pseudo-random stream in pseudo-random write
 * sizes (1 byte .. 256 KiB), then shuts down its write side and waits for the
 * receiver's EOF, so the last bytes are known delivered before it exits.
 * The receiver reads with pseudo-random sizes until EOF, then closes.
 * Both print "bytes N sha256 HEX secs S MBps R" on stdout. Blocking I/O only.
 * Exit 0 on a complete transfer, 1 on any socket error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- SHA-256 (FIPS 180-4), written here so the test needs no crypto lib ---- */

struct sha256 {
	uint32_t state[8];
	uint64_t total_len;
	uint8_t block[64];
	size_t block_used;
};

static const uint32_t sha256_round_constants[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr32(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void sha256_init(struct sha256 *h)
{
	static const uint32_t initial[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(h->state, initial, sizeof(initial));
	h->total_len = 0;
	h->block_used = 0;
}

static void sha256_compress(struct sha256 *h, const uint8_t *p)
{
	uint32_t w[64], v[8];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(v, h->state, sizeof(v));
	for (int i = 0; i < 64; i++) {
		uint32_t s1 = rotr32(v[4], 6) ^ rotr32(v[4], 11) ^ rotr32(v[4], 25);
		uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
		uint32_t t1 = v[7] + s1 + ch + sha256_round_constants[i] + w[i];
		uint32_t s0 = rotr32(v[0], 2) ^ rotr32(v[0], 13) ^ rotr32(v[0], 22);
		uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
		memmove(v + 1, v, 7 * sizeof(v[0]));
		v[4] += t1;
		v[0] = t1 + s0 + maj;
	}
	for (int i = 0; i < 8; i++)
		h->state[i] += v[i];
}

static void sha256_update(struct sha256 *h, const void *data, size_t len)
{
	const uint8_t *p = data;
	h->total_len += len;
	while (len > 0) {
		if (h->block_used == 0 && len >= 64) {
			sha256_compress(h, p);
			p += 64;
			len -= 64;
			continue;
		}
		size_t take = 64 - h->block_used < len ? 64 - h->block_used : len;
		memcpy(h->block + h->block_used, p, take);
		h->block_used += take;
		p += take;
		len -= take;
		if (h->block_used == 64) {
			sha256_compress(h, h->block);
			h->block_used = 0;
		}
	}
}

static void sha256_hex(struct sha256 *h, char out[65])
{
	uint64_t bits = h->total_len * 8;
	uint8_t pad[72] = { 0x80 };
	size_t pad_len = (h->block_used < 56 ? 56 : 120) - h->block_used;
	for (int i = 0; i < 8; i++)
		pad[pad_len + i] = (uint8_t)(bits >> (56 - 8 * i));
	sha256_update(h, pad, pad_len + 8);
	for (int i = 0; i < 8; i++)
		sprintf(out + 8 * i, "%08" PRIx32, h->state[i]);
}

/* ---- deterministic stream and sizes ---- */

static uint64_t prng_next(uint64_t *s)
{
	/* splitmix64: every seed (even 0) gives a full-period, well-mixed sequence. */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The content generator is separate from the size generator, so the stream
 * bytes do not depend on how they were cut into writes. */
struct stream_gen {
	uint64_t state;
	uint64_t word;
	unsigned word_left;
};

static void stream_fill(struct stream_gen *g, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (g->word_left == 0) {
			g->word = prng_next(&g->state);
			g->word_left = 8;
		}
		buf[i] = (uint8_t)g->word;
		g->word >>= 8;
		g->word_left--;
	}
}

#define MAX_IO (256 * 1024)

/* Mostly mid-sized I/O, with tiny and huge ones mixed in: tiny writes stress
 * Nagle/coalescing, huge ones a full send buffer. */
static size_t next_io_size(uint64_t *s)
{
	uint64_t r = prng_next(s);
	switch (r % 8) {
	case 0: return 1 + (r >> 8) % 16;
	case 1: return 1 + (r >> 8) % 1500;
	case 2: return MAX_IO;
	default: return 1 + (r >> 8) % 65536;
	}
}

static double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
	fprintf(stderr, "usage: tcp_stream send|recv listen|connect ADDR PORT [-n BYTES] [-s SEED] [-r READYFILE]\n"
			"       tcp_stream gen BYTES SEED\n");
	exit(2);
}

static int open_connection(int listen_mode, const char *addr, int port, const char *ready_file)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		fprintf(stderr, "tcp_stream: bad address %s\n", addr);
		exit(2);
	}
	if (listen_mode) {
		int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 4)) {
			perror("tcp_stream: listen socket");
			return -1;
		}
		if (ready_file) {
			FILE *f = fopen(ready_file, "w");
			if (f)
				fclose(f);
		}
		int fd = accept(ls, NULL, NULL);
		if (fd < 0)
			perror("tcp_stream: accept");
		close(ls);
		return fd;
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("tcp_stream: connect");
		return -1;
	}
	return fd;
}

static void report(const char *role, uint64_t bytes, struct sha256 *h, double secs)
{
	char hex[65];
	sha256_hex(h, hex);
	printf("%s bytes %" PRIu64 " sha256 %s secs %.3f MBps %.1f\n", role, bytes, hex, secs,
	       secs > 0 ? bytes / secs / 1e6 : 0.0);
	fflush(stdout);
}

static int do_send(int fd, uint64_t total, uint64_t seed)
{
	static uint8_t buf[MAX_IO];
	struct stream_gen gen = { .state = seed };
	uint64_t size_state = seed ^ 0x5eedf00dULL, sent = 0;
	struct sha256 h;
	sha256_init(&h);
	double t0 = now_sec();
	while (sent < total) {
		size_t n = next_io_size(&size_state);
		if (n > total - sent)
			n = (size_t)(total - sent);
		stream_fill(&gen, buf, n);
		sha256_update(&h, buf, n);
		for (size_t off = 0; off < n;) {
			ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				fprintf(stderr, "tcp_stream: send after %" PRIu64 " bytes: %s\n", sent + off,
					w < 0 ? strerror(errno) : "returned 0");
				return 1;
			}
			off += (size_t)w;
		}
		sent += n;
	}
	if (shutdown(fd, SHUT_WR)) {
		perror("tcp_stream: shutdown(SHUT_WR)");
		return 1;
	}
	/* The receiver closes only after it has read everything: its EOF is the
	 * end-to-end acknowledgement. It must send nothing else. */
	char extra;
	ssize_t r;
	while ((r = recv(fd, &extra, 1, 0)) < 0 && errno == EINTR)
		;
	if (r != 0) {
		fprintf(stderr, "tcp_stream: waiting for the receiver's EOF: %s\n",
			r < 0 ? strerror(errno) : "unexpected data");
		return 1;
	}
	report("send", sent, &h, now_sec() - t0);
	return 0;
}

static int do_recv(int fd, uint64_t seed)
{
	static uint8_t buf[MAX_IO];
	uint64_t size_state = seed ^ 0x7ecef00dULL, got = 0;
	struct sha256 h;
	sha256_init(&h);
	double t0 = 0;
	for (;;) {
		ssize_t r = recv(fd, buf, next_io_size(&size_state), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "tcp_stream: recv after %" PRIu64 " bytes: %s\n", got, strerror(errno));
			return 1;
		}
		if (r == 0)
			break;
		if (got == 0)
			t0 = now_sec();
		sha256_update(&h, buf, (size_t)r);
		got += (uint64_t)r;
	}
	double secs = got ? now_sec() - t0 : 0;
	if (close(fd)) {
		perror("tcp_stream: close");
		return 1;
	}
	report("recv", got, &h, secs);
	return 0;
}

static int do_gen(uint64_t total, uint64_t seed)
{
	static uint8_t buf[65536];
	struct stream_gen gen = { .state = seed };
	while (total > 0) {
		size_t n = total < sizeof(buf) ? (size_t)total : sizeof(buf);
		stream_fill(&gen, buf, n);
		if (fwrite(buf, 1, n, stdout) != n)
			return 1;
		total -= n;
	}
	return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "gen") == 0)
		return do_gen(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
	if (argc < 5)
		usage();
	int sender = strcmp(argv[1], "send") == 0;
	int listen_mode = strcmp(argv[2], "listen") == 0;
	if ((!sender && strcmp(argv[1], "recv")) || (!listen_mode && strcmp(argv[2], "connect")))
		usage();
	uint64_t bytes = 64ULL << 20, seed = 1;
	const char *ready_file = NULL;
	for (int i = 5; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (strcmp(argv[i], "-n") == 0)
			bytes = strtoull(argv[++i], NULL, 0);
		else if (strcmp(argv[i], "-s") == 0)
			seed = strtoull(argv[++i], NULL, 0);
		else if (strcmp(argv[i], "-r") == 0)
			ready_file = argv[++i];
		else
			usage();
	}
	signal(SIGPIPE, SIG_IGN);
	int fd = open_connection(listen_mode, argv[3], atoi(argv[4]), ready_file);
	if (fd < 0)
		return 1;
	return sender ? do_send(fd, bytes, seed) : do_recv(fd, seed);
}
