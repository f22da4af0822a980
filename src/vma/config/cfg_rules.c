/* STUB until the libvma.conf parser lands. */
#include "config/cfg_rules.h"

int cfg_rules_load_file(const char *path, const char *program_name, const char *app_id)
{ (void)path; (void)program_name; (void)app_id; return 0; }
int cfg_rules_add_first(const char *line) { (void)line; return -1; }
cfg_transport_t cfg_rules_match(cfg_role_t role, const struct sockaddr_in *local,
				const struct sockaddr_in *remote)
{ (void)role; (void)local; (void)remote; return CFG_TRANSPORT_VMA; }
void cfg_rules_clear(void) {}
const char *cfg_role_name(cfg_role_t role) { (void)role; return "?"; }
