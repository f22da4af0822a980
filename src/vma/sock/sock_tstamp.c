/* SO_TIMESTAMPING on offloaded sockets: see sock_tstamp.h. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sock/sock_tstamp.h"

/* What a note costs the receive buffer besides its payload: about the
 * bookkeeping Linux charges for a small buffer on its error queue, so the
 * number of stamps a socket may hold unread is of the kernel's order. */
#define SOCK_TSTAMP_NOTE_OVERHEAD 512u

static void sock_tstamp_lock(struct sock_tstamp *t)
{
	while (__atomic_exchange_n(&t->lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&t->lock, __ATOMIC_RELAXED))
			__builtin_ia32_pause();
}

static void sock_tstamp_unlock(struct sock_tstamp *t)
{
	__atomic_store_n(&t->lock, 0, __ATOMIC_RELEASE);
}

bool sock_tstamp_note_flags(struct sock_tstamp *t, int optname, const void *val, socklen_t len)
{
	/* Linux reads the flags as the first int of either form. */
	if (!val || len < sizeof(int))
		return false;
	uint32_t flags;
	memcpy(&flags, val, sizeof(flags));
	bool id_started = (flags & SOF_TIMESTAMPING_OPT_ID) && !(t->flags & SOF_TIMESTAMPING_OPT_ID);
	__atomic_store_n(&t->flags, flags, __ATOMIC_RELEASE);
	t->new_layout = optname == SO_TIMESTAMPING_NEW;
	return id_started;
}

void sock_tstamp_put_cmsg(struct msghdr *msg, size_t *used, int level, int type, const void *data, size_t len)
{
	if (!msg->msg_control || *used + CMSG_LEN(len) > msg->msg_controllen) {
		msg->msg_flags |= MSG_CTRUNC;
		return;
	}
	struct cmsghdr *c = (struct cmsghdr *)((char *)msg->msg_control + *used);
	c->cmsg_level = level;
	c->cmsg_type = type;
	c->cmsg_len = CMSG_LEN(len);
	memcpy(CMSG_DATA(c), data, len);
	*used += CMSG_SPACE(len);
	if (*used > msg->msg_controllen)
		*used = msg->msg_controllen;
}

/* ts[0] software, ts[1] unused (always zero since Linux 3.17), ts[2]
 * hardware: none from AF_XDP. */
static void sock_tstamp_put_stamps(const struct sock_tstamp *t, struct msghdr *msg, size_t *used, uint64_t sw_ns)
{
	struct scm_timestamping stamps;
	memset(&stamps, 0, sizeof(stamps));
	stamps.ts[0].tv_sec = (time_t)(sw_ns / 1000000000u);
	stamps.ts[0].tv_nsec = (long)(sw_ns % 1000000000u);
	sock_tstamp_put_cmsg(msg, used, SOL_SOCKET, t->new_layout ? SO_TIMESTAMPING_NEW : SO_TIMESTAMPING_OLD,
			     &stamps, sizeof(stamps));
}

void sock_tstamp_put_rx(const struct sock_tstamp *t, struct msghdr *msg, size_t *used, uint64_t rx_ns)
{
	if (rx_ns)
		sock_tstamp_put_stamps(t, msg, used, rx_ns);
}

uint64_t sock_tstamp_now_ns(void)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

struct sock_tstamp_note *sock_tstamp_note_new(uint32_t len)
{
	struct sock_tstamp_note *n = malloc(sizeof(*n) + len);
	if (!n)
		return NULL;
	memset(n, 0, sizeof(*n));
	n->len = len;
	n->charge = sizeof(*n) + len + SOCK_TSTAMP_NOTE_OVERHEAD;
	return n;
}

bool sock_tstamp_queue(struct sock_tstamp *t, struct sock_tstamp_note *n, uint64_t limit)
{
	sock_tstamp_lock(t);
	bool fits = t->charged + n->charge < limit;
	if (fits) {
		n->next = NULL;
		if (t->tail)
			t->tail->next = n;
		else
			t->head = n;
		t->tail = n;
		t->charged += n->charge;
		__atomic_store_n(&t->count, t->count + 1, __ATOMIC_RELEASE);
	}
	sock_tstamp_unlock(t);
	if (!fits)
		free(n);
	return fits;
}

static struct sock_tstamp_note *sock_tstamp_dequeue(struct sock_tstamp *t)
{
	if (!sock_tstamp_errq_pending(t))
		return NULL;
	sock_tstamp_lock(t);
	struct sock_tstamp_note *n = t->head;
	if (n) {
		t->head = n->next;
		if (!t->head)
			t->tail = NULL;
		t->charged -= n->charge;
		__atomic_store_n(&t->count, t->count - 1, __ATOMIC_RELEASE);
	}
	sock_tstamp_unlock(t);
	return n;
}

static size_t sock_tstamp_copy_out(const unsigned char *data, size_t len, const struct iovec *iov, size_t iovcnt)
{
	size_t done = 0;
	for (size_t i = 0; i < iovcnt && done < len; i++) {
		size_t n = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;
		if (n)
			memcpy(iov[i].iov_base, data + done, n);
		done += n;
	}
	return done;
}

ssize_t sock_tstamp_errq_recv(struct sock_tstamp *t, struct msghdr *msg, const struct sock_tstamp_ip_cmsgs *ip)
{
	struct sock_tstamp_note *n = sock_tstamp_dequeue(t);
	if (!n)
		return SOCK_TSTAMP_ERRQ_EMPTY;
	uint32_t flags = __atomic_load_n(&t->flags, __ATOMIC_ACQUIRE);
	/* Linux's error-queue read: the payload (MSG_TRUNC when cut), no
	 * address (a stamp has no port), the stamps, then the error. */
	size_t copied = sock_tstamp_copy_out(n->data, n->len, msg->msg_iov, msg->msg_iovlen);
	msg->msg_flags = MSG_ERRQUEUE | (copied < n->len ? MSG_TRUNC : 0);
	msg->msg_namelen = 0;
	size_t used = 0;
	/* Without a control buffer Linux still tries each message: MSG_CTRUNC. */
	{
		if (flags & SOF_TIMESTAMPING_SOFTWARE)
			sock_tstamp_put_stamps(t, msg, &used, n->stamp_ns);
		/* OPT_CMSG: the sent packet's IP control messages, as a
		 * received one would carry them (not with OPT_TSONLY). */
		bool ip_cmsgs = (flags & SOF_TIMESTAMPING_OPT_CMSG) && n->has_packet && n->ifindex;
		if (ip_cmsgs && ip && ip->pktinfo) {
			struct in_pktinfo pi = { .ipi_ifindex = n->ifindex };
			pi.ipi_spec_dst.s_addr = n->src_ip;
			pi.ipi_addr.s_addr = n->dst_ip;
			sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_PKTINFO, &pi, sizeof(pi));
		}
		if (ip_cmsgs && ip && ip->ttl) {
			int ttl = n->ttl;
			sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl));
		}
		if (ip_cmsgs && ip && ip->tos)
			sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_TOS, &n->tos, sizeof(n->tos));
		struct {
			struct sock_extended_err ee;
			struct sockaddr_in offender;
		} err;
		memset(&err, 0, sizeof(err));
		err.ee.ee_errno = ENOMSG;
		err.ee.ee_origin = SO_EE_ORIGIN_TIMESTAMPING;
		err.ee.ee_info = n->kind;
		if (flags & SOF_TIMESTAMPING_OPT_ID)
			err.ee.ee_data = n->key;
		if (ip_cmsgs) {
			err.offender.sin_family = AF_INET;
			err.offender.sin_addr.s_addr = n->src_ip;
		}
		sock_tstamp_put_cmsg(msg, &used, IPPROTO_IP, IP_RECVERR, &err, sizeof(err));
	}
	msg->msg_controllen = used;
	free(n);
	return (ssize_t)copied;
}

void sock_tstamp_clear(struct sock_tstamp *t)
{
	struct sock_tstamp_note *n;
	while ((n = sock_tstamp_dequeue(t)))
		free(n);
}
