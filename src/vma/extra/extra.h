/* The Extra API behind include/mellanox/vma_extra.h (docs/extra_api.md).
 * extra_api.c (in libvma.so only) builds the table getsockopt(-1,
 * SOL_SOCKET, SO_VMA_GET_API) hands out; the members live here, in the
 * core library, one file per group:
 *   extra_udp.c    receive callback, zero-copy receive, free_packets
 *   extra_ring.c   ring fds, the network header, memory registration
 *   extra_conf.c   add_conf_rule, thread_offload
 *   extra_xtreme.c SocketXtreme: socketxtreme_poll and the buffer calls
 *   extra_dummy.c  dummy sends (VMA_SND_FLAGS_DUMMY)
 * and the hooks the UDP and TCP sockets call. */
#ifndef VMA_EXTRA_EXTRA_H
#define VMA_EXTRA_EXTRA_H

#include <pthread.h>
#include <stdbool.h>

#include <sys/socket.h>
#include <sys/types.h>

#include "config/cfg_params.h"
#include "stack/stack.h"
#include "mellanox/vma_extra.h"

struct msghdr;
struct sock_offload;
struct sock_tcp;
struct sock_udp;
struct sock_udp_entry;
struct sock_obj;
struct ring_buf;
struct extra_xt_node;

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

/* ---- SocketXtreme (extra_xtreme.c; VMA_SOCKETXTREME=1, else EOPNOTSUPP) ---- */
#define EXTRA_API_SOCKETXTREME_BITS                                                                            \
	(VMA_EXTRA_API_SOCKETXTREME_POLL | VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_PACKETS |                       \
	 VMA_EXTRA_API_SOCKETXTREME_REF_VMA_BUFF | VMA_EXTRA_API_SOCKETXTREME_FREE_VMA_BUFF)
int extra_socketxtreme_poll(int fd, struct vma_completion_t *completions, unsigned int ncompletions, int flags);
int extra_socketxtreme_free_vma_packets(struct vma_packet_desc_t *packets, int num);
int extra_socketxtreme_ref_vma_buff(struct vma_buff_t *buff);
int extra_socketxtreme_free_vma_buff(struct vma_buff_t *buff);
/* Hooks, lane lock held and VMA_SOCKETXTREME=1: a datagram was queued on
 * s; TCP socket s notified ev (sock_tcp_notify_locked). Each lists the
 * socket on its lane for the next socketxtreme_poll. */
void extra_xt_udp_ready_locked(struct sock_udp *s);
void extra_xt_tcp_event_locked(struct sock_tcp *s, uint32_t ev);
/* release (lane lock held): off the lane's list; frames the application
 * still holds stay lent until freed, accounted to no socket. */
void extra_xt_forget_locked(struct sock_offload *ctx, struct extra_xt_node *n);
/* SO_VMA_USER_DATA (level SOL_SOCKET) on an offloaded socket: the value a
 * completion reports as user_data (default: the fd). 0 or -1 with errno
 * (EINVAL: not 8 bytes, EFAULT). */
int extra_xt_user_data_set(struct extra_xt_node *n, const void *val, socklen_t len);
int extra_xt_user_data_get(const struct extra_xt_node *n, int fd, void *val, socklen_t *len);

/* ---- offloaded TCP connections (extra_tcp.c) ---- */
/* Lock held, in the engine's delivery: buf (one buffer, len > 0) waits for
 * the receive callback instead of the receive queue. */
void extra_tcp_stage_locked(struct sock_tcp *s, struct ring_buf *buf);
/* An application thread in a receive or poll call, no lock held: shows
 * the staged buffers to the callback and carries out its answers (never
 * on the internal thread). Returns how many it queued for reading. */
int extra_tcp_run_callbacks(struct sock_tcp *s);
/* release (lock held): frees the staged buffers. */
void extra_tcp_release_locked(struct sock_tcp *s);
/* The members on a TCP socket (extra_udp.c dispatches): EINVAL for a
 * listener or a connection the kernel serves. */
int extra_tcp_register(struct sock_tcp *s, vma_recv_callback_t callback, void *context);
int extra_tcp_recvfrom_zcopy(struct sock_tcp *s, void *buf, size_t len, int *flags, int base, bool force,
			     struct sockaddr *from, socklen_t *fromlen);
int extra_tcp_free_packets(struct sock_tcp *s, struct vma_packet_t *pkts, size_t count);

/* ---- dummy sends (extra_dummy.c) ---- */
/* A stack_netif that takes every frame the stack builds back into its
 * pool instead of sending it: a UDP send through it walks the whole send
 * path and puts nothing on the wire. */
struct extra_dummy_netif {
	struct stack_netif nif;
	const struct stack_netif *real;
	unsigned frames;
};
const struct stack_netif *extra_dummy_netif(struct extra_dummy_netif *d, const struct stack_netif *real);
/* send*(VMA_SND_FLAGS_DUMMY) on an offloaded TCP socket: builds the
 * segment the data would leave in (headers, checksum, payload) in a TX
 * frame of the connection's ring and takes the frame back unsent. The
 * byte count, or -1: EINVAL (not offloaded), EAGAIN (it would not leave
 * in one segment now: data unsent, window, MSS, several iovecs, MSG_MORE),
 * EPIPE/ENOTCONN by state. */
ssize_t extra_tcp_dummy_send(struct sock_tcp *s, const struct msghdr *msg, int flags);
/* VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME: getsockname() on offloaded socket
 * obj sends a dummy packet of 264 bytes (errno kept). */
void extra_dummy_on_getsockname(struct sock_obj *obj);
/* Whether send*(VMA_SND_FLAGS_DUMMY) may go to obj's op (an offloaded
 * UDP or TCP socket); other fds answer EINVAL, as libvma. */
bool extra_dummy_fd_ok(const struct sock_obj *obj);

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
