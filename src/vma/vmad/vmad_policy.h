/* vmad's policy: which users and groups may join which interfaces, and
 * whether processes of different users may share a queue's UMEM (they can
 * then read each other's frames). docs/vmad.md describes the file:
 *
 *   # comment
 *   allow user NAME|UID|* on IFNAME[,IFNAME...]|*
 *   allow group NAME|GID on IFNAME[,IFNAME...]|*
 *   share-uids yes|no
 *
 * Root is always allowed. With no file at all, every user may use every
 * interface (flows are still checked against what the caller owns) and
 * share-uids is no. */
#ifndef VMA_VMAD_VMAD_POLICY_H
#define VMA_VMAD_VMAD_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define VMAD_POLICY_MAX_RULES 64
#define VMAD_POLICY_MAX_IFACES 8
#define VMAD_POLICY_ANY_ID ((unsigned)-1)

struct vmad_policy_rule {
	bool is_group;
	unsigned id;                /* uid or gid; VMAD_POLICY_ANY_ID = any user */
	unsigned nifaces;           /* 0 = every interface */
	char ifaces[VMAD_POLICY_MAX_IFACES][16];
};

struct vmad_policy {
	bool from_file;             /* false: the built-in default (allow all) */
	bool share_uids;
	unsigned nrules;
	struct vmad_policy_rule rules[VMAD_POLICY_MAX_RULES];
};

/* The default: everyone on every interface, no UMEM shared across uids. */
void vmad_policy_default(struct vmad_policy *p);
/* Parses text (the file's contents). 0, or -EINVAL with err naming the
 * line and what is wrong; p is then the default. Names are resolved with
 * getpwnam / getgrnam; numbers are taken as ids. */
int vmad_policy_parse(struct vmad_policy *p, const char *text, char *err, size_t err_len);
/* Reads and parses path. -errno / -EINVAL with err set. */
int vmad_policy_load(struct vmad_policy *p, const char *path, char *err, size_t err_len);
/* Whether a caller with uid and groups (its primary gid among them) may use
 * ifname. */
bool vmad_policy_allows(const struct vmad_policy *p, uid_t uid, const gid_t *gids, size_t ngids, const char *ifname);

#endif
