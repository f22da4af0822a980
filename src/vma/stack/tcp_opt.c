/* TCP options (RFC 9293 section 3.2, RFC 7323, RFC 2018) and initial
 * sequence numbers (RFC 6528). */
#include "stack/tcp_priv.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#define OPT_END      0
#define OPT_NOP      1
#define OPT_MSS      2
#define OPT_WS       3
#define OPT_SACK_OK  4
#define OPT_SACK     5
#define OPT_TS       8

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Options with a wrong length for their kind are ignored one by one; a
 * length that is 0, 1 or runs past the header ends parsing (what came before
 * stays valid). Returns false when parsing had to stop early. */
bool tcp_opts_parse(const uint8_t *p, uint32_t len, struct tcp_opts *o)
{
	uint32_t i = 0;

	memset(o, 0, sizeof(*o));
	while (i < len) {
		uint8_t kind = p[i];
		if (kind == OPT_END)
			return true;
		if (kind == OPT_NOP) {
			i++;
			continue;
		}
		if (i + 1 >= len)
			return false;
		uint8_t olen = p[i + 1];
		if (olen < 2 || i + olen > len)
			return false;
		const uint8_t *v = p + i + 2;
		switch (kind) {
		case OPT_MSS:
			if (olen == 4) {
				o->has_mss = true;
				o->mss = (uint16_t)(v[0] << 8 | v[1]);
			}
			break;
		case OPT_WS:
			if (olen == 3) {
				o->has_ws = true;
				/* RFC 7323 2.3: a shift above 14 is used as 14. */
				o->ws = v[0] > TCP_MAX_WSCALE ? TCP_MAX_WSCALE : v[0];
			}
			break;
		case OPT_SACK_OK:
			if (olen == 2)
				o->sack_perm = true;
			break;
		case OPT_TS:
			if (olen == 10) {
				o->has_ts = true;
				o->ts_val = get32(v);
				o->ts_ecr = get32(v + 4);
			}
			break;
		case OPT_SACK:
			if (olen >= 10 && (olen - 2) % 8 == 0) {
				unsigned n = (olen - 2u) / 8u;
				for (unsigned b = 0; b < n && o->nsack < TCP_SACK_MAX_BLOCKS; b++) {
					o->sack[o->nsack][0] = get32(v + 8 * b);
					o->sack[o->nsack][1] = get32(v + 8 * b + 4);
					o->nsack++;
				}
			}
			break;
		default:
			break;
		}
		i += olen;
	}
	return true;
}

/* SipHash-2-4 over 12 bytes of connection identity: the keyed function F of
 * RFC 6528, so ISNs are unguessable across connections yet monotonic (via
 * the clock term) for one 4-tuple. */
static uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static void sip_round(uint64_t v[4])
{
	v[0] += v[1]; v[1] = rotl(v[1], 13); v[1] ^= v[0]; v[0] = rotl(v[0], 32);
	v[2] += v[3]; v[3] = rotl(v[3], 16); v[3] ^= v[2];
	v[0] += v[3]; v[3] = rotl(v[3], 21); v[3] ^= v[0];
	v[2] += v[1]; v[1] = rotl(v[1], 17); v[1] ^= v[2]; v[2] = rotl(v[2], 32);
}

static uint64_t siphash_2_4(const uint64_t key[2], uint64_t m0, uint64_t m1_tail)
{
	uint64_t v[4] = { key[0] ^ 0x736f6d6570736575ull, key[1] ^ 0x646f72616e646f6dull,
			  key[0] ^ 0x6c7967656e657261ull, key[1] ^ 0x7465646279746573ull };
	uint64_t words[2] = { m0, m1_tail };

	for (int w = 0; w < 2; w++) {
		v[3] ^= words[w];
		sip_round(v);
		sip_round(v);
		v[0] ^= words[w];
	}
	v[2] ^= 0xff;
	for (int r = 0; r < 4; r++)
		sip_round(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t tcp_keyed_hash(const uint64_t key[2], uint64_t m0, uint64_t m1)
{
	return siphash_2_4(key, m0, m1);
}

static void tcp_isn_key_ensure(struct tcp_ctx *ctx)
{
	if (!ctx->isn_key[0] && !ctx->isn_key[1]) {
		if (getrandom(ctx->isn_key, sizeof(ctx->isn_key), GRND_NONBLOCK) != sizeof(ctx->isn_key)) {
			ctx->isn_key[0] = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)ctx;
			ctx->isn_key[1] = 0xbf58476d1ce4e5b9ull ^ ctx->now_ms;
		}
	}
}

/* SYN cookie layout (our own): bits 31..27 a 64-second period counter,
 * 26..24 an index into tcp_cookie_mss, 23..0 a keyed hash of the tuple, the
 * peer's ISN, the period and the index. A cookie is good for the period it
 * was made in and the next (64 to 128 s). The hash domain (13 in the top
 * byte) keeps cookies apart from ISNs made with the same key. */
static const uint16_t tcp_cookie_mss[8] = { 216, 536, 1200, 1360, 1440, 1460, 3760, 8960 };
#define TCP_COOKIE_PERIOD_MS 64000u

static uint32_t tcp_cookie_hash(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport,
				uint32_t peer_isn, uint32_t period, uint32_t mss_index)
{
	tcp_isn_key_ensure(ctx);
	uint64_t m0 = (uint64_t)lip << 32 | rip;
	uint64_t m1 = ((uint64_t)lport << 16 | rport) | (uint64_t)peer_isn << 32;
	uint64_t k[2] = { ctx->isn_key[0] ^ (13ull << 56 | (uint64_t)period << 8 | mss_index), ctx->isn_key[1] };
	return (uint32_t)siphash_2_4(k, m0, m1) & 0xffffffu;
}

uint32_t tcp_syncookie_make(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport,
			    uint32_t peer_isn, uint32_t peer_mss)
{
	uint32_t period = (uint32_t)(ctx->now_ms / TCP_COOKIE_PERIOD_MS) & 31u;
	uint32_t idx = 0;
	for (uint32_t i = 0; i < 8; i++)
		if (tcp_cookie_mss[i] <= peer_mss)
			idx = i;
	return period << 27 | idx << 24 | tcp_cookie_hash(ctx, lip, lport, rip, rport, peer_isn, period, idx);
}

bool tcp_syncookie_check(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport,
			 uint32_t peer_isn, uint32_t cookie, uint32_t *mss)
{
	uint32_t now = (uint32_t)(ctx->now_ms / TCP_COOKIE_PERIOD_MS) & 31u;
	uint32_t period = cookie >> 27, idx = (cookie >> 24) & 7u;
	if (((now - period) & 31u) > 1)
		return false;
	if ((cookie & 0xffffffu) != tcp_cookie_hash(ctx, lip, lport, rip, rport, peer_isn, period, idx))
		return false;
	*mss = tcp_cookie_mss[idx];
	return true;
}

uint32_t tcp_isn(struct tcp_ctx *ctx, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport)
{
	tcp_isn_key_ensure(ctx);
	uint64_t m0 = (uint64_t)lip << 32 | rip;
	uint64_t m1 = ((uint64_t)lport << 16 | rport) | (12ull << 56);
	uint32_t f = (uint32_t)siphash_2_4(ctx->isn_key, m0, m1);
	/* M: a fine monotonic clock (64 ns ticks, as Linux). Not the stack's
	 * millisecond clock: a connection that reuses a port within the same
	 * millisecond (the kernel picks our ports and may hand the same one back
	 * at once) would get the same ISN, and a peer still in TIME_WAIT would
	 * answer its SYN with an ACK instead of accepting it (1 s RTO stall). The
	 * stack's clock still counts, so a test clock moving faster than real
	 * time keeps ISNs increasing. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t ticks = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) >> 6;
	return (uint32_t)(ticks + ctx->now_ms * 15625u) + f;
}
