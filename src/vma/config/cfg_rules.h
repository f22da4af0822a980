/* libvma.conf: which sockets are offloaded (use vma) and which stay with the
 * kernel (use os), chosen per role by the first rule that matches. */
#ifndef VMA_CONFIG_CFG_RULES_H
#define VMA_CONFIG_CFG_RULES_H

#include <netinet/in.h>
#include <stdbool.h>

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

/* Loads the rules that apply to this process from path: the blocks whose
 * application-id matches program_name (glob) and app_id (or '*'). A missing
 * file is not an error (everything offloaded). A bad line is reported with
 * file name, line number and text, then skipped. Replaces rules loaded
 * before. Returns the number of bad lines, or -1 when the file exists but
 * cannot be read. */
int cfg_rules_load_file(const char *path, const char *program_name, const char *app_id);

/* Parses one rule line ("use os tcp_server *:5001") and puts it first, ahead
 * of every loaded rule (the Extra API's add_conf_rule). Returns 0 or -1. */
int cfg_rules_add_first(const char *line);

/* First-match lookup. local/remote may be NULL when the role has no such
 * side yet (then only '*' matches that side). No rule matching = vma. */
cfg_transport_t cfg_rules_match(cfg_role_t role, const struct sockaddr_in *local,
				const struct sockaddr_in *remote);

/* Drops every rule. */
void cfg_rules_clear(void);

const char *cfg_role_name(cfg_role_t role);

#endif
