/* getsockopt(-1, SOL_SOCKET, SO_VMA_GET_API, val, len): writes the address
 * of the Extra API table into val. 0, or -1 with EINVAL (len too short).
 * In libvma.so only (extra_api.c). */
#ifndef VMA_EXTRA_EXTRA_API_H
#define VMA_EXTRA_EXTRA_API_H

#include <sys/socket.h>

int extra_api_getsockopt(void *val, socklen_t *len);

#endif
