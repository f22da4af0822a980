/* Loading the library at run time instead of LD_PRELOAD (manual 7.3): this
 * program is not linked against libvma. It dlopen()s the library by path,
 * takes socket/bind/connect/send/recv/close from it with dlsym(), checks
 * that each pointer really lives in that library (dlsym on a handle falls
 * back to the library's dependencies, i.e. libc, when the symbol is
 * missing), and runs a loopback TCP exchange through those pointers.
 * listen/accept/getsockname come from libc: mixing both must work.
 *
 * Usage: dlopen_sock /path/to/libvma.so */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*socket_fn)(int, int, int);
typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);
typedef int (*close_fn)(int);

static void *lookup(void *lib, const char *lib_real, const char *name)
{
	void *sym = dlsym(lib, name);
	Dl_info info;
	char sym_real[PATH_MAX];

	if (!sym) {
		fprintf(stderr, "dlopen_sock: dlsym(%s): %s\n", name, dlerror());
		exit(1);
	}
	if (!dladdr(sym, &info) || !info.dli_fname || !realpath(info.dli_fname, sym_real) ||
	    strcmp(sym_real, lib_real) != 0) {
		fprintf(stderr, "dlopen_sock: %s resolved to %s, not to %s (symbol not exported)\n",
			name, info.dli_fname ? info.dli_fname : "?", lib_real);
		exit(1);
	}
	return sym;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s /path/to/libvma.so\n", argv[0]);
		return 2;
	}
	char lib_real[PATH_MAX];
	if (!realpath(argv[1], lib_real)) {
		perror(argv[1]);
		return 1;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen_sock: dlopen: %s\n", dlerror());
		return 1;
	}
	socket_fn vma_socket = (socket_fn)lookup(lib, lib_real, "socket");
	bind_fn vma_bind = (bind_fn)lookup(lib, lib_real, "bind");
	connect_fn vma_connect = (connect_fn)lookup(lib, lib_real, "connect");
	send_fn vma_send = (send_fn)lookup(lib, lib_real, "send");
	recv_fn vma_recv = (recv_fn)lookup(lib, lib_real, "recv");
	close_fn vma_close = (close_fn)lookup(lib, lib_real, "close");

	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(addr);
	int lfd = vma_socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || vma_bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(lfd, 1) < 0 || getsockname(lfd, (struct sockaddr *)&addr, &alen) < 0 ||
	    addr.sin_port == 0) {
		perror("dlopen_sock: server setup");
		return 1;
	}
	int cfd = vma_socket(AF_INET, SOCK_STREAM, 0);
	if (cfd < 0 || vma_connect(cfd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		perror("dlopen_sock: connect");
		return 1;
	}
	int sfd = accept(lfd, NULL, NULL);
	if (sfd < 0) {
		perror("dlopen_sock: accept");
		return 1;
	}

	/* 64 rounds of 4 KiB each way, each round with its own pattern. */
	uint8_t out[4096], in[4096];
	for (unsigned round = 0; round < 64; round++) {
		int from = round & 1 ? sfd : cfd, to = round & 1 ? cfd : sfd;
		for (size_t k = 0; k < sizeof(out); k++)
			out[k] = (uint8_t)(k * 31u + round * 7u + (k >> 8));
		if (vma_send(from, out, sizeof(out), 0) != (ssize_t)sizeof(out)) {
			perror("dlopen_sock: send");
			return 1;
		}
		for (size_t got = 0; got < sizeof(in);) {
			ssize_t r = vma_recv(to, in + got, sizeof(in) - got, 0);
			if (r <= 0) {
				fprintf(stderr, "dlopen_sock: recv returned %zd: %s\n", r, strerror(errno));
				return 1;
			}
			got += (size_t)r;
		}
		if (memcmp(in, out, sizeof(in)) != 0) {
			fprintf(stderr, "dlopen_sock: round %u: data mismatch\n", round);
			return 1;
		}
	}
	if (vma_close(sfd) || vma_close(cfd) || vma_close(lfd)) {
		perror("dlopen_sock: close");
		return 1;
	}
	/* A closed fd must be closed for libc too. */
	if (vma_send(cfd, "x", 1, MSG_NOSIGNAL) != -1 || errno != EBADF) {
		fprintf(stderr, "dlopen_sock: send after close did not fail with EBADF\n");
		return 1;
	}
	printf("dlopen_sock: 64 rounds x 4096 bytes through dlsym'd socket calls verified\n");
	dlclose(lib);
	return 0;
}
