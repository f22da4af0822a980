/* Harness 2: TCP option parsing (tcp_opts_parse, src/vma/stack/tcp_opt.c),
 * the bytes of the input as the option area of one header. tcp_input hands
 * it at most 40 bytes; longer inputs are parsed too (the function takes any
 * length). Beyond ASan/UBSan, the result must keep the invariants the rest
 * of the engine relies on. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack/tcp_priv.h"

void fuzz_log_init(void);

static void fail(const char *what)
{
	fprintf(stderr, "fuzz: tcp_opts_parse: %s\n", what);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tcp_opts o, again;
	uint32_t len = size > 4096 ? 4096 : (uint32_t)size;

	/* An exact-size copy: any read past len is an ASan report. */
	uint8_t *p = malloc(len ? len : 1);
	if (!p)
		return 0;
	memcpy(p, data, len);
	bool ok = tcp_opts_parse(p, len, &o);
	if (o.nsack > TCP_SACK_MAX_BLOCKS)
		fail("more SACK blocks than the array holds");
	if (o.has_ws && o.ws > TCP_MAX_WSCALE)
		fail("window scale above 14");
	if (!o.has_ws && o.ws)
		fail("ws set without has_ws");
	if (!o.has_mss && o.mss)
		fail("mss set without has_mss");
	if (!o.has_ts && (o.ts_val || o.ts_ecr))
		fail("timestamps set without has_ts");
	/* Deterministic, and nothing depends on what was in *o before. */
	memset(&again, 0xa5, sizeof(again));
	bool ok2 = tcp_opts_parse(p, len, &again);
	if (ok != ok2 || memcmp(&o, &again, sizeof(o)) != 0)
		fail("two parses of the same bytes differ");
	/* Every option lies inside the area: a parse of the first n bytes
	 * never finds an option the full parse did not (prefix property
	 * aside from the one cut short). */
	if (len > 0 && ok) {
		struct tcp_opts pre;
		tcp_opts_parse(p, len - 1, &pre);
		if (pre.nsack > o.nsack)
			fail("a shorter area yields more SACK blocks");
	}
	free(p);
	return 0;
}
