/* Telling the peer of a TCP connection whose process died (SIGKILL) that
 * the connection is gone: vmad does it for the xdp backend, a surviving
 * member of the device's share board for the verbs backend. */
#ifndef VMA_VMAD_VMAD_ORPHAN_H
#define VMA_VMAD_VMAD_ORPHAN_H

#include <stdint.h>

/* Once the connection's steering is gone, a SYN from its local end makes
 * a Linux peer answer with a challenge ACK (RFC 5961 4, whatever the
 * SYN's sequence number) carrying its rcv_nxt; that ACK reaches a stack
 * with no connection for it (the kernel, or a listener of the port), which
 * answers with an RST of exactly that sequence number: the peer sees
 * ECONNRESET within a round trip. Sends the SYN through *raw_fd (an
 * IPPROTO_RAW socket opened on first use; needs CAP_NET_RAW). Addresses
 * and ports in network order. 0 or -errno. */
int vmad_orphan_probe(int *raw_fd, uint32_t local_ip, uint16_t local_port, uint32_t remote_ip,
		      uint16_t remote_port);

#endif
