/* vmad's policy file (vmad_policy.h, docs/vmad.md). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmad/vmad_policy.h"

#define VMAD_POLICY_MAX_FILE (64 * 1024)

void vmad_policy_default(struct vmad_policy *p)
{
	memset(p, 0, sizeof(*p));
	p->nrules = 1;
	p->rules[0].id = VMAD_POLICY_ANY_ID;
}

static bool vmad_policy_number(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	if (!isdigit((unsigned char)s[0]))
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v >= VMAD_POLICY_ANY_ID)
		return false;
	*out = (unsigned)v;
	return true;
}

static bool vmad_policy_resolve(bool is_group, const char *name, unsigned *id)
{
	if (!is_group && strcmp(name, "*") == 0) {
		*id = VMAD_POLICY_ANY_ID;
		return true;
	}
	if (vmad_policy_number(name, id))
		return true;
	if (is_group) {
		struct group *g = getgrnam(name);
		if (g)
			*id = (unsigned)g->gr_gid;
		return g != NULL;
	}
	struct passwd *pw = getpwnam(name);
	if (pw)
		*id = (unsigned)pw->pw_uid;
	return pw != NULL;
}

static int vmad_policy_ifaces(struct vmad_policy_rule *r, char *list)
{
	if (strcmp(list, "*") == 0)
		return 0;
	for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		if (!name[0] || strlen(name) >= sizeof(r->ifaces[0]) || r->nifaces == VMAD_POLICY_MAX_IFACES)
			return -EINVAL;
		snprintf(r->ifaces[r->nifaces++], sizeof(r->ifaces[0]), "%s", name);
	}
	return r->nifaces ? 0 : -EINVAL;
}

/* One line, comments and blanks already gone; words split in place. */
static int vmad_policy_line(struct vmad_policy *p, char *line, char *err, size_t err_len, unsigned lineno)
{
	char *words[6];
	unsigned n = 0;

	for (char *save = NULL, *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		if (n == sizeof(words) / sizeof(words[0])) {
			snprintf(err, err_len, "line %u: too many words", lineno);
			return -EINVAL;
		}
		words[n++] = w;
	}
	if (n == 0)
		return 0;
	if (strcmp(words[0], "share-uids") == 0) {
		if (n != 2 || (strcmp(words[1], "yes") != 0 && strcmp(words[1], "no") != 0)) {
			snprintf(err, err_len, "line %u: expected 'share-uids yes' or 'share-uids no'", lineno);
			return -EINVAL;
		}
		p->share_uids = strcmp(words[1], "yes") == 0;
		return 0;
	}
	if (strcmp(words[0], "allow") != 0 || n != 5 || strcmp(words[3], "on") != 0 ||
	    (strcmp(words[1], "user") != 0 && strcmp(words[1], "group") != 0)) {
		snprintf(err, err_len, "line %u: expected 'allow user|group NAME on IFNAME[,IFNAME...]|*'", lineno);
		return -EINVAL;
	}
	if (p->nrules == VMAD_POLICY_MAX_RULES) {
		snprintf(err, err_len, "line %u: more than %d rules", lineno, VMAD_POLICY_MAX_RULES);
		return -EINVAL;
	}
	struct vmad_policy_rule *r = &p->rules[p->nrules];
	memset(r, 0, sizeof(*r));
	r->is_group = strcmp(words[1], "group") == 0;
	if (!vmad_policy_resolve(r->is_group, words[2], &r->id)) {
		snprintf(err, err_len, "line %u: no such %s '%s'", lineno, words[1], words[2]);
		return -EINVAL;
	}
	if (vmad_policy_ifaces(r, words[4]) != 0) {
		snprintf(err, err_len, "line %u: bad interface list '%s' (names of at most 15 characters, at most %d, "
				       "or *)", lineno, words[4], VMAD_POLICY_MAX_IFACES);
		return -EINVAL;
	}
	p->nrules++;
	return 0;
}

int vmad_policy_parse(struct vmad_policy *p, const char *text, char *err, size_t err_len)
{
	char *copy = strdup(text);
	unsigned lineno = 0;
	int rc = 0;

	if (!copy) {
		vmad_policy_default(p);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	memset(p, 0, sizeof(*p));
	p->from_file = true;
	for (char *line = copy, *next; line && !rc; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		rc = vmad_policy_line(p, line, err, err_len, lineno);
	}
	free(copy);
	if (rc)
		vmad_policy_default(p);
	return rc;
}

int vmad_policy_load(struct vmad_policy *p, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "re");
	char *text;
	size_t len;

	if (!f) {
		int e = errno;
		vmad_policy_default(p);
		snprintf(err, err_len, "%s: %s", path, strerror(e));
		return -e;
	}
	text = calloc(1, VMAD_POLICY_MAX_FILE + 1);
	if (!text) {
		fclose(f);
		vmad_policy_default(p);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	len = fread(text, 1, VMAD_POLICY_MAX_FILE + 1, f);
	fclose(f);
	if (len > VMAD_POLICY_MAX_FILE) {
		free(text);
		vmad_policy_default(p);
		snprintf(err, err_len, "%s: larger than %d bytes", path, VMAD_POLICY_MAX_FILE);
		return -EFBIG;
	}
	char line_err[160] = "";
	int rc = vmad_policy_parse(p, text, line_err, sizeof(line_err));
	free(text);
	if (rc)
		snprintf(err, err_len, "%s: %s", path, line_err);
	return rc;
}

static bool vmad_policy_rule_iface(const struct vmad_policy_rule *r, const char *ifname)
{
	if (r->nifaces == 0)
		return true;
	for (unsigned i = 0; i < r->nifaces; i++)
		if (strcmp(r->ifaces[i], ifname) == 0)
			return true;
	return false;
}

bool vmad_policy_allows(const struct vmad_policy *p, uid_t uid, const gid_t *gids, size_t ngids, const char *ifname)
{
	if (uid == 0)
		return true;
	for (unsigned i = 0; i < p->nrules; i++) {
		const struct vmad_policy_rule *r = &p->rules[i];
		bool who = false;
		if (!r->is_group) {
			who = r->id == VMAD_POLICY_ANY_ID || r->id == (unsigned)uid;
		} else {
			for (size_t g = 0; g < ngids && !who; g++)
				who = (unsigned)gids[g] == r->id;
		}
		if (who && vmad_policy_rule_iface(r, ifname))
			return true;
	}
	return false;
}
