/* vmad: the privileged broker of libvma's rings and flows (docs/vmad.md,
 * docs/vmad.8). The work is in src/vma/vmad/vmad_server.c; this is the
 * command line. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/vlog.h"
#include "vmad/vmad_server.h"

#define VMAD_DEFAULT_LINGER_MS 2000

static void vmad_usage(FILE *out)
{
	fprintf(out,
		"Usage: vmad [OPTIONS]\n"
		"Owns the XDP steering program, the shared UMEM and the AF_XDP sockets of the\n"
		"interfaces libvma accelerates in this network namespace, and hands them to\n"
		"libvma processes (also unprivileged ones) over a unix socket.\n\n"
		"  -s, --socket NAME   abstract socket name, or a path starting with '/'\n"
		"                      (default: abstract \"vma-vmad\", the one libvma looks for)\n"
		"  -p, --policy FILE   who may use which interface (default: everyone, every\n"
		"                      interface; flows are always checked against the caller)\n"
		"  -l, --linger MS     keep an idle interface's program this long (default %d)\n"
		"  -d, --daemon        fork; return once the socket is bound\n"
		"  -a, --auto          started by libvma: exit when idle for --linger\n"
		"      --log FILE      log to FILE (default stderr; nothing when --daemon)\n"
		"  -v, --verbose       more log lines (repeat for debug)\n"
		"  -h, --help\n",
		VMAD_DEFAULT_LINGER_MS);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "policy", required_argument, NULL, 'p' },
		{ "linger", required_argument, NULL, 'l' },
		{ "daemon", no_argument, NULL, 'd' },
		{ "auto", no_argument, NULL, 'a' },
		{ "log", required_argument, NULL, 'L' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct vmad_server_config cfg = {
		.linger_ms = VMAD_DEFAULT_LINGER_MS,
		.log_level = VLOG_WARNING,
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "s:p:l:dahv", options, NULL)) != -1) {
		switch (opt) {
		case 's':
			cfg.socket_name = optarg;
			break;
		case 'p':
			cfg.policy_path = optarg;
			break;
		case 'l': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || end == optarg || v > 3600000) {
				fprintf(stderr, "vmad: --linger '%s': expected milliseconds (0..3600000)\n", optarg);
				return 2;
			}
			cfg.linger_ms = (unsigned)v;
			break;
		}
		case 'd':
			cfg.daemonize = true;
			break;
		case 'a':
			cfg.auto_mode = true;
			break;
		case 'L':
			cfg.log_file = optarg;
			break;
		case 'v':
			cfg.log_level = cfg.log_level < VLOG_INFO ? VLOG_INFO : VLOG_DEBUG;
			break;
		case 'h':
			vmad_usage(stdout);
			return 0;
		default:
			vmad_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "vmad: unexpected argument '%s'\n", argv[optind]);
		vmad_usage(stderr);
		return 2;
	}
	return vmad_server_run(&cfg);
}
