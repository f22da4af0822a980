/* The steering program of this process on one interface: loaded through
 * libxdp's dispatcher (so other XDP users keep working), shared by every ring
 * of the process on that interface, removed with the last of them. */
#ifndef VMA_RING_XDP_PROG_H
#define VMA_RING_XDP_PROG_H

struct ring_xdp_prog;

enum ring_xdp_map {
	RING_XDP_MAP_XSKS,
	RING_XDP_MAP_FLOWS5,
	RING_XDP_MAP_FLOWS3,
	RING_XDP_MAP_GROUPS,
	RING_XDP_MAP_SHARES,
	RING_XDP_MAP_COUNT,
};

/* Returns the process's program on ifindex, loading and attaching it on
 * first use (after removing leftovers of dead processes). On failure returns
 * NULL, sets errno and has logged the warning. */
struct ring_xdp_prog *ring_xdp_prog_get(const char *ifname, unsigned ifindex, int force_skb_mode);
void ring_xdp_prog_put(struct ring_xdp_prog *prog);
int ring_xdp_prog_map_fd(const struct ring_xdp_prog *prog, enum ring_xdp_map map);
/* "native" or "skb". */
const char *ring_xdp_prog_mode(const struct ring_xdp_prog *prog);
/* Text after "ring: IFNAME: " for a negative errno from an XDP / XSK call. */
const char *ring_xdp_reason(int err);
/* Last warning libbpf/libxdp printed while we called them ("" if none). */
const char *ring_xdp_lib_message(void);
/* Routes libbpf/libxdp output to our log for the duration of a call. */
void ring_xdp_quiet_libs(int on);

#endif
