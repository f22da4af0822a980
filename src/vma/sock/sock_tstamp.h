/* SO_TIMESTAMPING on offloaded sockets (docs/udp.md and docs/tcp_sockets.md,
 * "Timestamping"): the flags as the application set them, the receive stamp
 * as a SCM_TIMESTAMPING control message, and the socket's own error queue of
 * transmit stamps read with recvmsg(MSG_ERRQUEUE).
 *
 * Only software stamps exist here: AF_XDP gives no hardware time, so the
 * hardware flags are accepted (the kernel socket validates them) and
 * produce nothing, as on a device without hardware stamping. */
#ifndef VMA_SOCK_SOCK_TSTAMP_H
#define VMA_SOCK_SOCK_TSTAMP_H

#include <time.h>

#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Flags newer than some installed headers (their values are ABI). */
#define SOCK_TSTAMP_OPT_ID_TCP    (1u << 16)
#define SOCK_TSTAMP_OPT_RX_FILTER (1u << 17)

/* The flags that make a send record a transmit stamp (and advance the
 * OPT_ID counter): Linux's SOF_TIMESTAMPING_TX_RECORD_MASK. */
#define SOCK_TSTAMP_TX_RECORD                                                     \
	((uint32_t)(SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_TX_SOFTWARE | \
		    SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_ACK))

/* recvmsg(MSG_ERRQUEUE) found nothing of ours: the kernel socket answers. */
#define SOCK_TSTAMP_ERRQ_EMPTY (-2)

/* One transmit stamp waiting on the error queue. */
struct sock_tstamp_note {
	struct sock_tstamp_note *next;
	uint64_t stamp_ns;        /* CLOCK_REALTIME */
	uint32_t key;             /* ee_data under SOF_TIMESTAMPING_OPT_ID */
	uint32_t kind;            /* ee_info: SCM_TSTAMP_SND, _SCHED or _ACK */
	/* The packet as sent (not OPT_TSONLY): what SOF_TIMESTAMPING_OPT_CMSG
	 * reports about it (the offender's address, IP_PKTINFO...). */
	bool has_packet;
	int ifindex;
	uint32_t src_ip, dst_ip;  /* network order */
	uint8_t ttl, tos;
	size_t charge;            /* bytes counted against the receive buffer */
	uint32_t len;
	unsigned char data[];     /* the payload recvmsg returns */
};

struct sock_tstamp {
	uint32_t flags;           /* SOF_TIMESTAMPING_* as set (0: off) */
	bool new_layout;          /* set as SO_TIMESTAMPING_NEW: cmsgs use that type */
	/* OPT_ID: the next datagram's counter (UDP), or the sequence number
	 * byte offsets count from (TCP). */
	uint32_t key_next;
	/* The error queue: its own lock, taken only while timestamping is
	 * used (the lane lock is not held when it is read). */
	int lock;
	struct sock_tstamp_note *head, *tail;
	unsigned count;           /* read without the lock by poll_ready */
	size_t charged;
};

/* Mirrors an SO_TIMESTAMPING the kernel (or our own check) accepted: val
 * is an int or a struct so_timestamping, its flags first. Returns true when
 * OPT_ID was just switched on (the counter restarts: the caller sets
 * key_next as Linux does for its protocol). */
bool sock_tstamp_note_flags(struct sock_tstamp *t, int optname, const void *val, socklen_t len);

/* A receive stamp is reported: SOFTWARE reporting and RX_SOFTWARE
 * generation (Linux reports one without RX_SOFTWARE only while another
 * socket of the host asked for receive stamps; we never do). */
static inline bool sock_tstamp_rx_on(const struct sock_tstamp *t)
{
	const uint32_t both = SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE;
	return (t->flags & both) == both;
}

/* Appends a control message at *used of msg's control buffer (MSG_CTRUNC
 * when it does not fit), as Linux's put_cmsg. */
void sock_tstamp_put_cmsg(struct msghdr *msg, size_t *used, int level, int type, const void *data, size_t len);

/* Appends SCM_TIMESTAMPING with rx_ns as the software stamp. */
void sock_tstamp_put_rx(const struct sock_tstamp *t, struct msghdr *msg, size_t *used, uint64_t rx_ns);

/* CLOCK_REALTIME in ns (the vDSO: no system call). */
uint64_t sock_tstamp_now_ns(void);

/* A note with room for len bytes of payload; NULL when out of memory. */
struct sock_tstamp_note *sock_tstamp_note_new(uint32_t len);

/* Queues n unless the queue's charge would reach limit (the receive
 * buffer, as Linux charges its error queue): then n is freed and false
 * returned. */
bool sock_tstamp_queue(struct sock_tstamp *t, struct sock_tstamp_note *n, uint64_t limit);

static inline bool sock_tstamp_errq_pending(const struct sock_tstamp *t)
{
	return __atomic_load_n(&t->count, __ATOMIC_ACQUIRE) != 0;
}

/* What the receiving socket asked of IP control messages: reported with
 * a stamp of a sent packet under SOF_TIMESTAMPING_OPT_CMSG. */
struct sock_tstamp_ip_cmsgs {
	bool pktinfo, ttl, tos;
};

/* recvmsg(MSG_ERRQUEUE): dequeues the oldest note into msg (payload,
 * SCM_TIMESTAMPING, IP_RECVERR) and returns the bytes copied, or
 * SOCK_TSTAMP_ERRQ_EMPTY. */
ssize_t sock_tstamp_errq_recv(struct sock_tstamp *t, struct msghdr *msg, const struct sock_tstamp_ip_cmsgs *ip);

/* Frees every queued note (close). */
void sock_tstamp_clear(struct sock_tstamp *t);

#endif
