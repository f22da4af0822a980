/* VMA_SPEC profiles: named bundles of parameter values for common tunings.
 * Settings are written as the text a user would put in the environment, so
 * they go through the same validation as the variables themselves and the
 * documentation can print them verbatim. */
#include <stddef.h>
#include <strings.h>

#include "config/cfg_params.h"

/* Everything is spent on latency: poll forever, no interrupt moderation,
 * small queues, single-threaded locking, a pinned internal thread. */
static const struct cfg_spec_setting cfg_spec_ultra_latency[] = {
	{ "VMA_TX_SEGS_TCP", "512" },
	{ "VMA_TX_BUFS", "512" },
	{ "VMA_TX_WRE", "256" },
	{ "VMA_TX_WRE_BATCHING", "4" },
	{ "VMA_RX_BUFS", "1024" },
	{ "VMA_RX_WRE", "256" },
	{ "VMA_RX_WRE_BATCHING", "4" },
	{ "VMA_RX_POLL", "-1" },
	{ "VMA_RX_UDP_POLL_OS_RATIO", "0" },
	{ "VMA_RX_PREFETCH_BYTES_BEFORE_POLL", "256" },
	{ "VMA_SELECT_POLL", "-1" },
	{ "VMA_SELECT_POLL_OS_RATIO", "0" },
	{ "VMA_SELECT_SKIP_OS", "0" },
	{ "VMA_AVOID_SYS_CALLS_ON_TCP_FD", "1" },
	{ "VMA_GRO_STREAMS_MAX", "0" },
	{ "VMA_PROGRESS_ENGINE_INTERVAL", "0" },
	{ "VMA_CQ_KEEP_QP_FULL", "0" },
	{ "VMA_THREAD_MODE", "0" },
	{ "VMA_MEM_ALLOC_TYPE", "2" },
	{ "VMA_TCP_NODELAY", "1" },
	{ "VMA_RING_DEV_MEM_TX", "16384" },
	{ "VMA_INTERNAL_THREAD_AFFINITY", "0" },
	{ NULL, NULL },
};

/* Low latency that still leaves room for the kernel side (the manual's
 * sockperf example banner lists exactly these). */
static const struct cfg_spec_setting cfg_spec_latency[] = {
	{ "VMA_RING_DEV_MEM_TX", "16384" },
	{ "VMA_TX_WRE", "256" },
	{ "VMA_TX_WRE_BATCHING", "4" },
	{ "VMA_RX_WRE", "256" },
	{ "VMA_RX_WRE_BATCHING", "4" },
	{ "VMA_RX_POLL", "-1" },
	{ "VMA_RX_PREFETCH_BYTES_BEFORE_POLL", "256" },
	{ "VMA_GRO_STREAMS_MAX", "0" },
	{ "VMA_SELECT_POLL", "-1" },
	{ "VMA_SELECT_POLL_OS_FORCE", "1" },
	{ "VMA_SELECT_POLL_OS_RATIO", "1" },
	{ "VMA_SELECT_SKIP_OS", "1" },
	{ "VMA_PROGRESS_ENGINE_INTERVAL", "100" },
	{ "VMA_CQ_MODERATION_ENABLE", "0" },
	{ "VMA_CQ_AIM_MAX_COUNT", "128" },
	{ "VMA_CQ_AIM_INTERVAL_MSEC", "0" },
	{ "VMA_CQ_KEEP_QP_FULL", "0" },
	{ "VMA_TCP_NODELAY", "1" },
	{ "VMA_AVOID_SYS_CALLS_ON_TCP_FD", "1" },
	{ "VMA_INTERNAL_THREAD_AFFINITY", "0" },
	{ "VMA_THREAD_MODE", "0" },
	{ "VMA_MEM_ALLOC_TYPE", "2" },
	{ NULL, NULL },
};

/* Two processes talking over send-only and receive-only TCP sockets: a
 * ring per thread, and receive polling from the sending side. */
static const struct cfg_spec_setting cfg_spec_multi_ring_latency[] = {
	{ "VMA_MEM_ALLOC_TYPE", "2" },
	{ "VMA_SELECT_POLL", "-1" },
	{ "VMA_RX_POLL", "-1" },
	{ "VMA_RING_ALLOCATION_LOGIC_TX", "20" },
	{ "VMA_RING_ALLOCATION_LOGIC_RX", "20" },
	{ "VMA_SELECT_POLL_OS_RATIO", "0" },
	{ "VMA_SELECT_SKIP_OS", "0" },
	{ "VMA_RX_POLL_ON_TX_TCP", "1" },
	{ "VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME", "1" },
	{ NULL, NULL },
};

static const struct cfg_spec cfg_specs[] = {
	{ CFG_SPEC_ULTRA_LATENCY, { "ultra-latency", "10", NULL }, "Ultra Latency",
	  "Lowest latency at any cost in CPU and memory: small pools and queues, endless polling, "
	  "single-threaded locking, no kernel checks while polling.",
	  cfg_spec_ultra_latency },
	{ CFG_SPEC_LATENCY, { "latency", "15", NULL }, "Latency",
	  "Low latency for all kinds of traffic while still keeping an eye on kernel sockets; "
	  "may not reach full bandwidth.",
	  cfg_spec_latency },
	{ CFG_SPEC_MULTI_RING_LATENCY, { "multi_ring_latency", NULL, NULL }, "Multi Ring Latency",
	  "Low latency for two applications that talk over send-only and receive-only TCP sockets.",
	  cfg_spec_multi_ring_latency },
};

#define CFG_SPEC_COUNT ((int)(sizeof(cfg_specs) / sizeof(cfg_specs[0])))

int cfg_spec_count(void) { return CFG_SPEC_COUNT; }

const struct cfg_spec *cfg_spec_at(int index)
{
	return (index >= 0 && index < CFG_SPEC_COUNT) ? &cfg_specs[index] : NULL;
}

const struct cfg_spec *cfg_spec_find(const char *text)
{
	if (!text)
		return NULL;
	for (int i = 0; i < CFG_SPEC_COUNT; i++)
		for (int k = 0; cfg_specs[i].names[k]; k++)
			if (!strcasecmp(cfg_specs[i].names[k], text))
				return &cfg_specs[i];
	return NULL;
}

const struct cfg_spec *cfg_spec_by_id(int id)
{
	for (int i = 0; i < CFG_SPEC_COUNT; i++)
		if (cfg_specs[i].id == id)
			return &cfg_specs[i];
	return NULL;
}
