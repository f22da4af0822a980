/* vmad, the broker: owns the steering program and maps of every interface
 * it serves, one ring domain (shared UMEM) per (interface, queue), every
 * member's XSK, and the flow table; libvma processes join over the unix
 * socket of vmad_proto.h. docs/vmad.md and docs/process_model.md. */
#ifndef VMA_VMAD_VMAD_SERVER_H
#define VMA_VMAD_VMAD_SERVER_H

#include <stdbool.h>

struct vmad_server_config {
	/* Abstract name (default VMAD_ABSTRACT_NAME), or a path when it
	 * starts with '/'. */
	const char *socket_name;
	const char *policy_path;    /* NULL: the default policy */
	const char *log_file;       /* NULL: stderr (or nothing when daemonised) */
	bool auto_mode;             /* started by libvma: exit when idle */
	bool daemonize;             /* return once the socket is bound */
	unsigned linger_ms;         /* keep an idle interface (and an --auto vmad) this long */
	int log_level;              /* vlog level */
};

/* Runs vmad until SIGTERM / SIGINT (or, --auto, until idle). Returns the
 * exit status. */
int vmad_server_run(const struct vmad_server_config *cfg);

#endif
