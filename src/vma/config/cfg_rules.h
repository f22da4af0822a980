/* libvma.conf: which sockets are offloaded (use vma) and which stay with the
 * kernel (use os), chosen per role by the first rule that matches.
 * The grammar, and the choices we made where the manual is silent, are in
 * docs/libvma.conf.md. */
#ifndef VMA_CONFIG_CFG_RULES_H
#define VMA_CONFIG_CFG_RULES_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum cfg_role {
	CFG_ROLE_TCP_SERVER,   /* listen sockets: local addr:port */
	CFG_ROLE_TCP_CLIENT,   /* connected TCP: remote then local */
	CFG_ROLE_UDP_SENDER,   /* TX flows: remote addr:port */
	CFG_ROLE_UDP_RECEIVER, /* RX flows: local addr:port */
	CFG_ROLE_UDP_CONNECT,  /* connected UDP: remote then local */
	CFG_ROLE_COUNT
} cfg_role_t;

typedef enum cfg_transport {
	CFG_TRANSPORT_VMA,
	CFG_TRANSPORT_OS,
} cfg_transport_t;

/* The VMA_APPLICATION_ID value that selects only the blocks whose id is '*'. */
#define CFG_RULES_DEFAULT_APP_ID "VMA_DEFAULT_APPLICATION_ID"

/* Longest statement accepted, newline excluded; longer lines are reported
 * and skipped whole. */
#define CFG_RULES_LINE_MAX 1024

/* Loads the rules that apply to this process from path: the statements
 * before the first application-id, plus the blocks whose application-id
 * matches program_name (glob; a path is reduced to its basename) and app_id
 * (or '*'), all in file order. app_id NULL means CFG_RULES_DEFAULT_APP_ID.
 * A missing file is not an error (debug message, everything offloaded). A bad
 * line is reported with file name, line number and reason (never its text:
 * the file may not be a libvma.conf at all), then skipped; at the 5th bad
 * line the reading stops with one more warning and none of the file's rules
 * are used. Replaces every rule held before (add_first ones included).
 * Returns the number of bad lines, or -1 when the file exists but cannot be
 * read or is refused (not a regular file, over 1 MiB: one warning, no
 * rules). */
int cfg_rules_load_file(const char *path, const char *program_name, const char *app_id);

/* Same as cfg_rules_load_file on text held in memory; source_name stands for
 * the file name in warnings. Never fails: returns the number of bad lines. */
int cfg_rules_load_string(const char *text, const char *source_name,
			  const char *program_name, const char *app_id);

/* Parses one rule line ("use os tcp_server *:5001", a trailing # comment
 * allowed) and puts it first, ahead of every loaded rule (the Extra API's
 * add_conf_rule). Returns 0, or -1 with errno EINVAL (bad line, warned
 * about) or ENOMEM. Safe while other threads match. */
int cfg_rules_add_first(const char *line);

/* First-match lookup; reads only sin_addr and sin_port (network byte order).
 * tcp_server and udp_receiver look at local, udp_sender at remote,
 * tcp_client and udp_connect at both. A side may be NULL when the socket has
 * no such address yet: only a rule side of '*:*' matches it. Port 0 and
 * INADDR_ANY are compared like any other value. No rule matching = vma.
 * Thread-safe against concurrent lookups, loads and add_first. */
cfg_transport_t cfg_rules_match(cfg_role_t role, const struct sockaddr_in *local,
				const struct sockaddr_in *remote);

/* Number of rules held (every role). */
size_t cfg_rules_count(void);

/* Drops every rule and frees their memory. */
void cfg_rules_clear(void);

/* "tcp_server" ... as written in libvma.conf; "?" for an unknown value. */
const char *cfg_role_name(cfg_role_t role);
/* "vma" or "os"; "?" for an unknown value. */
const char *cfg_transport_name(cfg_transport_t transport);

#endif
