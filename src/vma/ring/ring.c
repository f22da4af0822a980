/* Backend choice. Only the xdp backend exists yet; verbs slots in here. */
#include "config.h"

#include <errno.h>
#include <stddef.h>

#include "log/vlog.h"
#include "ring/ring.h"

struct ring *ring_open(const char *ifname, unsigned queue, const struct ring_config *cfg)
{
	enum ring_backend backend = cfg ? cfg->backend : RING_BACKEND_AUTO;

	switch (backend) {
	case RING_BACKEND_AUTO:
	case RING_BACKEND_XDP:
		return ring_xdp_open(ifname, queue, cfg);
	}
	vlog_warn("ring: %s: unknown backend %d, traffic stays on the kernel path",
		  ifname, (int)backend);
	errno = EINVAL;
	return NULL;
}

void ring_close(struct ring *ring)
{
	if (ring)
		ring->ops->close(ring);
}
