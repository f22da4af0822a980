/* Text forms of the statistics shared by libvma (VMA_STATS_FILE records, fd
 * dumps) and vma_stats (its views), so both print the same shapes. Pure
 * formatting over stats_layout.h: no libvma internals, no allocation. */
#ifndef VMA_STATS_STATS_FORMAT_H
#define VMA_STATS_STATS_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "stats/stats_layout.h"

/* "a.b.c.d:port" (port "*" when 0). addr/port in network byte order. */
#define STATS_ADDR_TEXT_SIZE 24
void stats_format_addr(char out[STATS_ADDR_TEXT_SIZE], uint32_t addr, uint16_t port);
/* "LISTEN", "ESTABLISHED", ... ; "UNKNOWN" for out-of-range values. */
const char *stats_tcp_state_name(uint32_t state);
/* hit / (hit + miss) in percent; 0 when both are 0. */
double stats_hit_percent(uint64_t hit, uint64_t miss);

/* The per-socket block VMA_STATS_FILE gets when a socket closes, one line per
 * counter group, each starting with "VMA: [fd=N] ". Returns the length written
 * (always < size, NUL-terminated when size > 0; cut at a line end if short). */
size_t stats_format_socket_record(char *buf, size_t size, const struct stats_socket *s);
/* True when the socket carried any traffic (only those get a record). */
int stats_socket_had_traffic(const struct stats_socket *s);

#endif
