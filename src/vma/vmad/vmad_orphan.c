/* The probe that resets the peer of a dead process's connection
 * (vmad_orphan.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "os/os.h"
#include "stack/stack_csum.h"
#include "vmad/vmad_orphan.h"

int vmad_orphan_probe(int *raw_fd, uint32_t local_ip, uint16_t local_port, uint32_t remote_ip,
		      uint16_t remote_port)
{
	uint8_t pkt[40];
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = remote_ip };

	if (*raw_fd < 0) {
		*raw_fd = OS_CALL(socket, AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
		if (*raw_fd < 0)
			return -errno;
	}
	memset(pkt, 0, sizeof(pkt));
	pkt[0] = 0x45;                      /* IPv4, 20-byte header */
	pkt[3] = sizeof(pkt);
	pkt[6] = 0x40;                      /* DF */
	pkt[8] = 64;                        /* TTL */
	pkt[9] = IPPROTO_TCP;
	memcpy(pkt + 12, &local_ip, 4);
	memcpy(pkt + 16, &remote_ip, 4);
	uint8_t *tcp = pkt + 20;
	memcpy(tcp, &local_port, 2);
	memcpy(tcp + 2, &remote_port, 2);
	uint32_t seq = (uint32_t)rand();
	memcpy(tcp + 4, &seq, 4);
	tcp[12] = 5 << 4;                   /* 20-byte header, no options */
	tcp[13] = 0x02;                     /* SYN */
	tcp[14] = 0x10;                     /* window 4096 */
	uint16_t sum = stack_csum_finish(
		stack_csum_add(stack_csum_pseudo(local_ip, remote_ip, IPPROTO_TCP, 20), tcp, 20));
	memcpy(tcp + 16, &sum, 2);
	/* The kernel fills the IP id and header checksum of IPPROTO_RAW sends. */
	if (OS_CALL(sendto, *raw_fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)) != (ssize_t)sizeof(pkt))
		return -errno;
	return 0;
}
