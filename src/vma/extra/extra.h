/* The Extra API behind include/mellanox/vma_extra.h (docs/extra_api.md).
 * extra_api.c (in libvma.so only) builds the table getsockopt(-1,
 * SOL_SOCKET, SO_VMA_GET_API) hands out; the members live here, in the
 * core library, one file per group:
 *   extra_udp.c    receive callback, zero-copy receive, free_packets
 *   extra_ring.c   ring fds, the network header, memory registration
 *   extra_conf.c   add_conf_rule, thread_offload
 * and the hooks the UDP socket calls. */
#ifndef VMA_EXTRA_EXTRA_H
#define VMA_EXTRA_EXTRA_H

#include <pthread.h>
#include <stdbool.h>

#include "config/cfg_params.h"
#include "mellanox/vma_extra.h"

struct sock_udp;
struct sock_udp_entry;

/* ---- members (errno set on -1) ---- */
int extra_register_recv_callback(int fd, vma_recv_callback_t callback, void *context);
int extra_recvfrom_zcopy(int fd, void *buf, size_t len, int *flags, struct sockaddr *from, socklen_t *fromlen);
int extra_free_packets(int fd, struct vma_packet_t *pkts, size_t count);
int extra_add_conf_rule(const char *config_line);
int extra_thread_offload(int offload, pthread_t tid);
int extra_get_socket_rings_num(int fd);
int extra_get_socket_rings_fds(int fd, int *ring_fds, int ring_fds_sz);
int extra_get_socket_tx_ring_fd(int fd, struct sockaddr *to, socklen_t tolen);
int extra_get_socket_network_header(int fd, void *ptr, uint16_t *len);
int extra_register_memory_on_ring(int fd, void *addr, size_t length, uint32_t *key);
int extra_deregister_memory_on_ring(int fd, void *addr, size_t length);

/* ---- hooks of the UDP socket (sock_udp.c, sock_udp_io.c) ---- */
/* Delivery with a callback registered (lane lock held): the datagram waits
 * in the socket's stage for the callback; e->buf is the stage's (or freed
 * when the stage is full). */
void extra_udp_stage_locked(struct sock_udp *s, const struct sock_udp_entry *e);
/* An application thread in a receive or poll call, no lock held: shows the
 * staged datagrams to the callback and carries out its decisions. Never on
 * the internal thread (returns 0 there: its datagrams wait for the
 * application). Returns how many it queued for reading. */
int extra_udp_run_callbacks(struct sock_udp *s);
/* release (lane lock held): frees the staged and held datagrams. */
void extra_udp_release_locked(struct sock_udp *s);
/* destroy: frees the stage and hold table memory. */
void extra_udp_destroy(struct sock_udp *s);
/* Whether the application holds frames of this socket (lane lock held). */
bool extra_udp_holding(const struct sock_udp *s);

/* ---- thread_offload ---- */
/* Threads with a thread_offload() setting of their own; 0 almost always. */
extern unsigned extra_thread_offload_count;
bool extra_thread_offload_lookup(pthread_t tid, bool fallback);
/* Whether a socket the calling thread creates now is offloaded:
 * VMA_OFFLOADED_SOCKETS unless thread_offload() said otherwise for it.
 * Socket creation only (not a data path). */
static inline bool extra_thread_offload_wanted(void)
{
	bool dflt = g_cfg.offloaded_sockets != 0;
	if (__builtin_expect(__atomic_load_n(&extra_thread_offload_count, __ATOMIC_ACQUIRE) == 0, 1))
		return dflt;
	return extra_thread_offload_lookup(pthread_self(), dflt);
}

#endif
