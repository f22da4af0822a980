/* Harness 4: the libvma.conf parser (src/vma/config/cfg_rules.c).
 *
 * Input: sel(1), then the file's text. The text is loaded with
 * cfg_rules_load_string when it has no NUL byte, and with
 * cfg_rules_load_file (from a temporary file: NUL bytes included) when it
 * has one or sel & 0x10 asks for both (files cost syscalls): both must agree on
 * bad lines, rules and every answer of cfg_rules_match for a set of
 * sockets (fixed ones plus addresses taken from the text's last bytes).
 * Then the text's first line goes through cfg_rules_add_first. sel picks
 * the program name and VMA_APPLICATION_ID the blocks are matched against.
 * Warnings are formatted in full (fuzz_log.c) and dropped. */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/cfg_rules.h"

void fuzz_log_init(void);

static char path[64];

static void remove_file(void)
{
	unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_init();
	/* tmpfs when there is one: the file is rewritten for every input. */
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(path, sizeof(path), "%s/fuzz_cfg_rules.%d.conf", dir, (int)getpid());
	atexit(remove_file);
	return 0;
}

#define NQ 8
struct answers {
	int bad;
	size_t count;
	cfg_transport_t t[NQ][CFG_ROLE_COUNT];
};

static void ask(struct answers *a, const uint8_t *data, size_t size)
{
	struct sockaddr_in q[NQ];
	static const uint32_t ips[NQ] = { 0, 0x7f000001u, 0x0a000001u, 0xc0a80105u, 0xe0010203u,
					  0xffffffffu, 0, 0 };
	static const uint16_t ports[NQ] = { 0, 53, 5001, 80, 65535, 1, 0, 0 };
	memset(q, 0, sizeof(q));
	for (int i = 0; i < NQ; i++) {
		q[i].sin_family = AF_INET;
		q[i].sin_addr.s_addr = htonl(ips[i]);
		q[i].sin_port = htons(ports[i]);
	}
	/* The last two from the end of the text. */
	if (size >= 12) {
		memcpy(&q[6].sin_addr.s_addr, data + size - 12, 4);
		memcpy(&q[6].sin_port, data + size - 8, 2);
		memcpy(&q[7].sin_addr.s_addr, data + size - 6, 4);
		memcpy(&q[7].sin_port, data + size - 2, 2);
	}
	a->count = cfg_rules_count();
	for (int i = 0; i < NQ; i++)
		for (int r = 0; r < CFG_ROLE_COUNT; r++)
			a->t[i][r] = cfg_rules_match((cfg_role_t)r, &q[i],
						     (i & 1) ? NULL : &q[(i + 3) % NQ]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const programs[4] = { "tcp_lat", "/usr/bin/redis-server", "", "a*b" };
	static const char *const ids[4] = { NULL, "B1", "*", "VMA_DEFAULT_APPLICATION_ID" };
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	data++;
	size--;
	const char *prog = programs[sel & 3], *id = ids[(sel >> 2) & 3];

	struct answers from_file, from_string;
	memset(&from_file, 0, sizeof(from_file));
	memset(&from_string, 0, sizeof(from_string));
	bool has_nul = memchr(data, 0, size) != NULL, via_file = has_nul || (sel & 0x10);
	if (via_file) {
		FILE *f = fopen(path, "w");
		if (!f)
			abort();
		fwrite(data, 1, size, f);
		fclose(f);
		from_file.bad = cfg_rules_load_file(path, prog, id);
		ask(&from_file, data, size);
	}

	if (!has_nul) {
		char *text = malloc(size + 1);
		memcpy(text, data, size);
		text[size] = '\0';
		from_string.bad = cfg_rules_load_string(text, path, prog, id);
		ask(&from_string, data, size);
		if (via_file && memcmp(&from_file, &from_string, sizeof(from_file)) != 0) {
			fprintf(stderr, "fuzz: cfg_rules: file and string loads differ (bad %d/%d, "
				"rules %zu/%zu)\n", from_file.bad, from_string.bad, from_file.count,
				from_string.count);
			abort();
		}
		/* The first line as an add_conf_rule() call. */
		char *nl = strchr(text, '\n');
		if (nl)
			*nl = '\0';
		size_t before = cfg_rules_count();
		int rc = cfg_rules_add_first(text);
		if ((rc == 0) != (cfg_rules_count() == before + 1)) {
			fprintf(stderr, "fuzz: cfg_rules_add_first returned %d, rules %zu -> %zu\n", rc,
				before, cfg_rules_count());
			abort();
		}
		struct answers after;
		ask(&after, data, size);
		free(text);
	}
	cfg_rules_clear();
	return 0;
}
