/* libvma.conf parser and first-match rule lookup (grammar: docs/libvma.conf.md).
 *
 * Rules live in one array in priority order, guarded by a rwlock: lookups
 * happen when a socket listens, binds, connects or first sends, never per
 * packet, so a shared read lock is cheap enough and keeps add_first (which
 * may run in any application thread) simple and safe. A load parses into a
 * private array first and swaps it in under the write lock. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/stat.h>

#include "config/cfg_rules.h"
#include "log/vlog.h"
#include "os/os.h"

#define CFG_PORT_MAX 65535u
/* How much of an add_conf_rule() line a warning quotes (that line is the
 * application's own text; a file's lines are never quoted). */
#define CFG_SHOWN_MAX 160
/* A file with this many bad lines is not a libvma.conf: reading stops. */
#define CFG_BAD_LINES_MAX 5
/* Nor is a file bigger than this (libvma.conf files are a few KiB). */
#define CFG_FILE_MAX (1024 * 1024)

/* One side of a rule: an IPv4 network and a port range, in host order. */
struct cfg_endpoint_match {
	uint32_t net;  /* already masked */
	uint32_t mask; /* 0 = any address */
	uint16_t port_min;
	uint16_t port_max;
};

struct cfg_rule {
	cfg_role_t role;
	cfg_transport_t transport;
	/* local for tcp_server/udp_receiver, remote for the other roles */
	struct cfg_endpoint_match first;
	/* local side of tcp_client/udp_connect; '*:*' when not written */
	struct cfg_endpoint_match second;
};

struct cfg_rule_set {
	struct cfg_rule *rules;
	size_t count;
	size_t capacity;
};

static pthread_rwlock_t cfg_rules_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct cfg_rule_set cfg_rules_active;

static const char *const cfg_role_names[CFG_ROLE_COUNT] = {
	[CFG_ROLE_TCP_SERVER] = "tcp_server",
	[CFG_ROLE_TCP_CLIENT] = "tcp_client",
	[CFG_ROLE_UDP_SENDER] = "udp_sender",
	[CFG_ROLE_UDP_RECEIVER] = "udp_receiver",
	[CFG_ROLE_UDP_CONNECT] = "udp_connect",
};

const char *cfg_role_name(cfg_role_t role)
{
	return (unsigned)role < CFG_ROLE_COUNT ? cfg_role_names[role] : "?";
}

const char *cfg_transport_name(cfg_transport_t transport)
{
	switch (transport) {
	case CFG_TRANSPORT_VMA: return "vma";
	case CFG_TRANSPORT_OS: return "os";
	}
	return "?";
}

static bool cfg_role_has_two_sides(cfg_role_t role)
{
	return role == CFG_ROLE_TCP_CLIENT || role == CFG_ROLE_UDP_CONNECT;
}

/* ---- parsing ---------------------------------------------------------- */

/* Why a statement was rejected, filled by the parsers, printed by callers.
 * The reason names the field, never its text: the file may not be a
 * libvma.conf at all (VMA_CONFIG_FILE=/etc/shadow), and its content must
 * not reach the log. */
struct cfg_error {
	char text[160];
};

#define CFG_FAIL(err, ...) (snprintf((err)->text, sizeof((err)->text), __VA_ARGS__), -1)

/* Decimal digits only (no sign, no spaces), at least one, value <= max. */
static bool cfg_parse_uint(const char *s, size_t len, unsigned max, unsigned *out)
{
	unsigned value = 0;
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		value = value * 10 + (unsigned)(s[i] - '0');
		if (value > max)
			return false;
	}
	*out = value;
	return true;
}

/* Exactly four dot-separated decimal octets, each 0..255. */
static bool cfg_parse_ipv4(const char *s, size_t len, uint32_t *out)
{
	uint32_t addr = 0;
	const char *end = s + len;
	for (int octet = 0; octet < 4; octet++) {
		const char *dot = memchr(s, '.', (size_t)(end - s));
		const char *stop = octet < 3 ? dot : end;
		unsigned value;
		if (!stop || (octet == 3 && dot))
			return false;
		if (stop - s > 3 || !cfg_parse_uint(s, (size_t)(stop - s), 255, &value))
			return false;
		addr = addr << 8 | value;
		s = stop + 1;
	}
	*out = addr;
	return true;
}

/* "*" or "a.b.c.d" or "a.b.c.d/prefix". */
static int cfg_parse_address(const char *s, size_t len, struct cfg_endpoint_match *m,
			     struct cfg_error *err)
{
	if (len == 1 && s[0] == '*') {
		m->net = 0;
		m->mask = 0;
		return 0;
	}
	const char *slash = memchr(s, '/', len);
	size_t addr_len = slash ? (size_t)(slash - s) : len;
	uint32_t addr;
	unsigned prefix = 32;
	if (!cfg_parse_ipv4(s, addr_len, &addr))
		return CFG_FAIL(err, "bad IPv4 address");
	if (slash) {
		size_t prefix_len = len - addr_len - 1;
		if (prefix_len > 2 || !cfg_parse_uint(slash + 1, prefix_len, 32, &prefix))
			return CFG_FAIL(err, "bad prefix length (0..32)");
	}
	m->mask = prefix ? UINT32_MAX << (32 - prefix) : 0;
	m->net = addr & m->mask;
	return 0;
}

/* "*" or "N" or "N-M" with N <= M <= 65535. */
static int cfg_parse_ports(const char *s, size_t len, struct cfg_endpoint_match *m,
			   struct cfg_error *err)
{
	unsigned lo, hi;
	if (len == 1 && s[0] == '*') {
		m->port_min = 0;
		m->port_max = CFG_PORT_MAX;
		return 0;
	}
	const char *dash = memchr(s, '-', len);
	size_t lo_len = dash ? (size_t)(dash - s) : len;
	if (!cfg_parse_uint(s, lo_len, CFG_PORT_MAX, &lo))
		return CFG_FAIL(err, "bad port range (*, N or N-M within 0..65535)");
	hi = lo;
	if (dash && (!cfg_parse_uint(dash + 1, len - lo_len - 1, CFG_PORT_MAX, &hi) || hi < lo))
		return CFG_FAIL(err, "bad port range (*, N or N-M within 0..65535)");
	m->port_min = (uint16_t)lo;
	m->port_max = (uint16_t)hi;
	return 0;
}

static void cfg_endpoint_any(struct cfg_endpoint_match *m)
{
	m->net = 0;
	m->mask = 0;
	m->port_min = 0;
	m->port_max = CFG_PORT_MAX;
}

/* "addr:ports" or, for two-sided roles, "addr:ports[:addr:ports]". */
static int cfg_parse_endpoints(const char *spec, struct cfg_rule *rule, struct cfg_error *err)
{
	const char *field[5];
	size_t field_len[5];
	size_t fields = 0;
	const char *p = spec;
	for (;;) {
		const char *colon = strchr(p, ':');
		if (fields == 4)
			return CFG_FAIL(err, "too many ':' fields in the address spec");
		field[fields] = p;
		field_len[fields] = colon ? (size_t)(colon - p) : strlen(p);
		fields++;
		if (!colon)
			break;
		p = colon + 1;
	}
	bool two_sides = cfg_role_has_two_sides(rule->role);
	if (fields == 1)
		return CFG_FAIL(err, "missing port in the address spec");
	if (fields == 3 && two_sides)
		return CFG_FAIL(err, "missing local port in the address spec");
	if (fields > 2 && !two_sides)
		return CFG_FAIL(err, "too many ':' fields in the address spec (%s takes address:ports)",
				cfg_role_name(rule->role));
	if (cfg_parse_address(field[0], field_len[0], &rule->first, err) ||
	    cfg_parse_ports(field[1], field_len[1], &rule->first, err))
		return -1;
	cfg_endpoint_any(&rule->second);
	if (fields == 4 &&
	    (cfg_parse_address(field[2], field_len[2], &rule->second, err) ||
	     cfg_parse_ports(field[3], field_len[3], &rule->second, err)))
		return -1;
	return 0;
}

/* Splits line in place at blanks; keeps at most max words, the last one
 * holding whatever follows (so callers can quote trailing junk). */
static size_t cfg_split_words(char *line, char **words, size_t max)
{
	size_t n = 0;
	char *p = line;
	while (n < max) {
		p += strspn(p, " \t\r\v\f");
		if (!*p)
			break;
		words[n++] = p;
		if (n == max)
			break;
		p += strcspn(p, " \t\r\v\f");
		if (*p)
			*p++ = '\0';
	}
	return n;
}

enum cfg_statement_kind {
	CFG_STATEMENT_UNKNOWN,
	CFG_STATEMENT_RULE,
	CFG_STATEMENT_APPLICATION,
};

struct cfg_statement {
	enum cfg_statement_kind kind;
	struct cfg_rule rule;        /* kind RULE */
	const char *program_glob;    /* kind APPLICATION, points into the line */
	const char *app_id;          /* kind APPLICATION, points into the line */
};

static int cfg_parse_use(char **words, size_t n, struct cfg_rule *rule, struct cfg_error *err)
{
	if (n < 4)
		return CFG_FAIL(err, "missing fields (expected 'use <vma|os> <role> <address spec>')");
	if (n > 4)
		return CFG_FAIL(err, "unexpected text after the rule");
	if (!strcmp(words[1], "vma"))
		rule->transport = CFG_TRANSPORT_VMA;
	else if (!strcmp(words[1], "os"))
		rule->transport = CFG_TRANSPORT_OS;
	else
		return CFG_FAIL(err, "bad transport (expected vma or os)");
	int role = 0;
	while (role < CFG_ROLE_COUNT && strcmp(words[2], cfg_role_names[role]))
		role++;
	if (role == CFG_ROLE_COUNT)
		return CFG_FAIL(err, "bad role (expected tcp_server, tcp_client, udp_sender, "
				"udp_receiver or udp_connect)");
	rule->role = (cfg_role_t)role;
	return cfg_parse_endpoints(words[3], rule, err);
}

/* Parses one statement already stripped of comment and outer blanks. */
static int cfg_parse_statement(char *text, struct cfg_statement *st, struct cfg_error *err)
{
	char *words[5];
	size_t n = cfg_split_words(text, words, 5);
	st->kind = CFG_STATEMENT_UNKNOWN;
	if (!strcmp(words[0], "use")) {
		st->kind = CFG_STATEMENT_RULE;
		return cfg_parse_use(words, n, &st->rule, err);
	}
	if (!strcmp(words[0], "application-id")) {
		st->kind = CFG_STATEMENT_APPLICATION;
		if (n < 3)
			return CFG_FAIL(err, "missing fields (expected 'application-id "
					"<program-name|*> <user-defined-id|*>')");
		if (n > 3)
			return CFG_FAIL(err, "unexpected text after the application-id");
		st->program_glob = words[1];
		st->app_id = words[2];
		return 0;
	}
	return CFG_FAIL(err, "unknown statement (expected use or application-id)");
}

/* Cuts the comment and the outer blanks; returns the statement ("" if none). */
static char *cfg_strip(char *line)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	line += strspn(line, " \t\r\v\f");
	size_t len = strlen(line);
	while (len && strchr(" \t\r\v\f", line[len - 1]))
		line[--len] = '\0';
	return line;
}

/* Keeps a short copy of a statement for messages (the parsers split theirs). */
static void cfg_shown(char *out, size_t size, const char *text)
{
	size_t len = strlen(text);
	if (len < size)
		memcpy(out, text, len + 1);
	else
		snprintf(out, size, "%.*s...", (int)(size - 4), text);
}

/* ---- rule sets -------------------------------------------------------- */

static int cfg_rule_set_reserve(struct cfg_rule_set *set, size_t wanted)
{
	if (wanted <= set->capacity)
		return 0;
	size_t capacity = set->capacity ? set->capacity * 2 : 16;
	while (capacity < wanted)
		capacity *= 2;
	struct cfg_rule *rules = realloc(set->rules, capacity * sizeof(*rules));
	if (!rules)
		return -1;
	set->rules = rules;
	set->capacity = capacity;
	return 0;
}

static void cfg_rule_set_free(struct cfg_rule_set *set)
{
	free(set->rules);
	*set = (struct cfg_rule_set){ 0 };
}

/* Swaps set in as the active rules; set receives the old ones to free. */
static void cfg_rule_set_publish(struct cfg_rule_set *set)
{
	pthread_rwlock_wrlock(&cfg_rules_lock);
	struct cfg_rule_set old = cfg_rules_active;
	cfg_rules_active = *set;
	*set = old;
	pthread_rwlock_unlock(&cfg_rules_lock);
}

/* ---- loading ---------------------------------------------------------- */

struct cfg_reader {
	FILE *file;       /* read from here when set ... */
	const char *text; /* ... else from this string */
	size_t left;      /* bytes a file may still give (CFG_FILE_MAX in all) */
	bool too_big;     /* the file went past CFG_FILE_MAX */
};

static int cfg_reader_getc(struct cfg_reader *r)
{
	if (r->file) {
		if (!r->left) {
			/* A file that grew after fstat, or a /proc file: stop. */
			r->too_big = getc_unlocked(r->file) != EOF;
			return EOF;
		}
		r->left--;
		return getc_unlocked(r->file);
	}
	if (!*r->text)
		return EOF;
	return (unsigned char)*r->text++;
}

struct cfg_line {
	char text[CFG_RULES_LINE_MAX + 1];
	bool too_long; /* text holds the first CFG_RULES_LINE_MAX characters */
	bool has_nul;
};

/* Reads one line without its newline, bounded whatever the input. Returns
 * false at the end of input. */
static bool cfg_read_line(struct cfg_reader *r, struct cfg_line *line)
{
	size_t n = 0;
	int c;
	bool any = false;
	line->too_long = false;
	line->has_nul = false;
	while ((c = cfg_reader_getc(r)) != EOF) {
		any = true;
		if (c == '\n')
			break;
		if (c == '\0')
			line->has_nul = true;
		if (n < CFG_RULES_LINE_MAX)
			line->text[n++] = (char)c;
		else
			line->too_long = true;
	}
	line->text[n] = '\0';
	return any;
}

struct cfg_loader {
	const char *source;
	unsigned line_no;
	const char *program; /* basename */
	const char *app_id;
	bool block_applies;
	bool stopped;        /* CFG_BAD_LINES_MAX reached: nothing of the file is used */
	int bad_lines;
	struct cfg_rule_set set;
};

static bool cfg_application_applies(const struct cfg_loader *ld, const char *glob, const char *id)
{
	if (fnmatch(glob, ld->program, 0) != 0)
		return false;
	if (!strcmp(id, "*"))
		return true;
	/* The default id stands for "no id chosen": only '*' blocks apply. */
	return strcmp(ld->app_id, CFG_RULES_DEFAULT_APP_ID) && !strcmp(id, ld->app_id);
}

/* One warning per bad line: file, line number and reason, never the line's
 * text. The CFG_BAD_LINES_MAX-th bad line ends the reading. */
static void cfg_loader_bad_line(struct cfg_loader *ld, const char *why, const char *consequence)
{
	ld->bad_lines++;
	vlog_warn("%s:%u: %s (line skipped%s)", ld->source, ld->line_no, why, consequence);
	if (ld->bad_lines < CFG_BAD_LINES_MAX)
		return;
	ld->stopped = true;
	vlog_warn("%s: %d bad lines, reading stopped: this does not look like a libvma.conf, so "
		  "none of its rules are used (every socket is offloaded); fix the file or point "
		  "VMA_CONFIG_FILE at the right one", ld->source, ld->bad_lines);
}

/* "use os tcp_server 10.0.0.0/8:80-81[:...]" rebuilt from the parsed rule,
 * for debug messages (the line's own text is never shown). */
static void cfg_rule_text(char *out, size_t size, const struct cfg_rule *rule)
{
	const struct cfg_endpoint_match *side[2] = { &rule->first, &rule->second };
	int sides = cfg_role_has_two_sides(rule->role) ? 2 : 1;
	int n = snprintf(out, size, "use %s %s ", cfg_transport_name(rule->transport),
			 cfg_role_name(rule->role));
	for (int i = 0; i < sides && n >= 0 && (size_t)n < size; i++) {
		const struct cfg_endpoint_match *m = side[i];
		int prefix = m->mask ? 32 - __builtin_ctz(m->mask) : 0;
		n += snprintf(out + n, size - (size_t)n, "%s%u.%u.%u.%u/%d:%u-%u", i ? ":" : "",
			      m->net >> 24, m->net >> 16 & 255, m->net >> 8 & 255, m->net & 255,
			      prefix, m->port_min, m->port_max);
	}
}

static void cfg_loader_line(struct cfg_loader *ld, struct cfg_line *line)
{
	if (line->too_long || line->has_nul) {
		char why[64];
		if (line->too_long)
			snprintf(why, sizeof(why), "line longer than %d characters", CFG_RULES_LINE_MAX);
		else
			snprintf(why, sizeof(why), "NUL byte in the line");
		cfg_loader_bad_line(ld, why, "");
		return;
	}
	char *text = cfg_strip(line->text);
	if (!*text)
		return;
	struct cfg_statement st;
	struct cfg_error err;
	if (cfg_parse_statement(text, &st, &err)) {
		if (st.kind == CFG_STATEMENT_APPLICATION) {
			/* The rules below were meant for some program we cannot
			 * name: applying them to every program would be wrong. */
			ld->block_applies = false;
			cfg_loader_bad_line(ld, err.text, "; the rules up to the next application-id "
					    "apply to no program");
			return;
		}
		cfg_loader_bad_line(ld, err.text, "");
		return;
	}
	if (st.kind == CFG_STATEMENT_APPLICATION) {
		ld->block_applies = cfg_application_applies(ld, st.program_glob, st.app_id);
		vlog_debug("%s:%u: application-id block %s", ld->source, ld->line_no,
			   ld->block_applies ? "applies" : "does not apply");
		return;
	}
	if (!ld->block_applies)
		return;
	char shown[CFG_SHOWN_MAX];
	cfg_rule_text(shown, sizeof(shown), &st.rule);
	if (cfg_rule_set_reserve(&ld->set, ld->set.count + 1)) {
		vlog_warn("%s:%u: out of memory, rule '%s' dropped", ld->source, ld->line_no, shown);
		return;
	}
	ld->set.rules[ld->set.count++] = st.rule;
	vlog_debug("%s:%u: rule '%s'", ld->source, ld->line_no, shown);
}

static void cfg_loader_init(struct cfg_loader *ld, const char *source, const char *program,
			    const char *app_id)
{
	const char *slash = program ? strrchr(program, '/') : NULL;
	*ld = (struct cfg_loader){
		.source = source,
		.program = slash ? slash + 1 : program ? program : "",
		.app_id = app_id ? app_id : CFG_RULES_DEFAULT_APP_ID,
		.block_applies = true,
	};
}

static int cfg_loader_run(struct cfg_loader *ld, struct cfg_reader *reader)
{
	struct cfg_line *line = malloc(sizeof(*line));
	if (!line)
		return -1;
	while (!ld->stopped && cfg_read_line(reader, line)) {
		ld->line_no++;
		cfg_loader_line(ld, line);
	}
	free(line);
	return 0;
}

static void cfg_loader_finish(struct cfg_loader *ld)
{
	if (ld->stopped) {
		/* Whatever was parsed before the reading stopped came from a
		 * file we do not believe is a libvma.conf: none of it is used. */
		cfg_rule_set_free(&ld->set);
	}
	vlog_debug("%s: %zu rules apply to '%s' (application id %s), %d bad lines", ld->source,
		   ld->set.count, ld->program, ld->app_id, ld->bad_lines);
	cfg_rule_set_publish(&ld->set);
	cfg_rule_set_free(&ld->set);
}

int cfg_rules_load_string(const char *text, const char *source_name,
			  const char *program_name, const char *app_id)
{
	struct cfg_loader ld;
	struct cfg_reader reader = { .file = NULL, .text = text ? text : "" };
	cfg_loader_init(&ld, source_name ? source_name : "libvma.conf", program_name, app_id);
	if (cfg_loader_run(&ld, &reader)) {
		vlog_warn("%s: out of memory, no rules loaded", ld.source);
		cfg_rule_set_free(&ld.set);
	}
	cfg_loader_finish(&ld);
	return ld.bad_lines;
}

/* Opens path for reading, refusing what cannot be a libvma.conf: a FIFO or
 * a device (reading one could block the application's start for ever or
 * never end), a directory, a file over CFG_FILE_MAX. Returns NULL with
 * *error set (0 = refused with *why set). */
static FILE *cfg_rules_open(const char *path, int *error, const char **why)
{
	*why = NULL;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		*error = errno;
		return NULL;
	}
	struct stat st;
	*error = 0;
	if (fstat(fd, &st) != 0)
		*error = errno;
	else if (S_ISDIR(st.st_mode))
		*error = EISDIR;
	else if (!S_ISREG(st.st_mode))
		*why = "not a regular file";
	else if (st.st_size > CFG_FILE_MAX)
		*why = "bigger than 1 MiB";
	FILE *file = *error || *why ? NULL : fdopen(fd, "r");
	if (!file) {
		if (!*error && !*why)
			*error = errno;
		os_close_nocancel(fd);
	}
	return file;
}

int cfg_rules_load_file(const char *path, const char *program_name, const char *app_id)
{
	struct cfg_loader ld;
	cfg_loader_init(&ld, path ? path : "(null)", program_name, app_id);
	int error = ENOENT;
	const char *refused = NULL;
	FILE *file = path ? cfg_rules_open(path, &error, &refused) : NULL;
	if (!file) {
		cfg_loader_finish(&ld);
		if (refused) {
			vlog_warn("VMA_CONFIG_FILE: %s is %s, not a libvma.conf: not read (no libvma.conf "
				  "rules, every socket offloaded)", ld.source, refused);
			return -1;
		}
		if (error == ENOENT) {
			vlog_debug("%s not found: no libvma.conf rules, every socket offloaded",
				   ld.source);
			return 0;
		}
		vlog_warn("cannot %s %s: %s (no libvma.conf rules, every socket offloaded)",
			  error == EISDIR ? "read" : "open", ld.source, strerror(error));
		return -1;
	}
	struct cfg_reader reader = { .file = file, .text = NULL, .left = CFG_FILE_MAX };
	int failed = cfg_loader_run(&ld, &reader);
	error = ferror(file) ? errno : failed ? ENOMEM : 0;
	fclose(file);
	if (error || reader.too_big) {
		cfg_rule_set_free(&ld.set);
		cfg_loader_finish(&ld);
		if (reader.too_big)
			vlog_warn("VMA_CONFIG_FILE: %s is bigger than 1 MiB, not a libvma.conf: not used "
				  "(no libvma.conf rules, every socket offloaded)", ld.source);
		else
			vlog_warn("cannot read %s: %s (no libvma.conf rules, every socket offloaded)",
				  ld.source, strerror(error));
		return -1;
	}
	cfg_loader_finish(&ld);
	return ld.bad_lines;
}

/* Parses an add_conf_rule line into st; on failure err says why. */
static int cfg_parse_added_rule(const char *line, char *copy, char *shown,
				struct cfg_statement *st, struct cfg_error *err)
{
	if (!line)
		return CFG_FAIL(err, "no line given");
	size_t len = strnlen(line, CFG_RULES_LINE_MAX + 1);
	if (len > CFG_RULES_LINE_MAX)
		return CFG_FAIL(err, "line longer than %d characters", CFG_RULES_LINE_MAX);
	memcpy(copy, line, len);
	copy[len] = '\0';
	char *text = cfg_strip(copy);
	cfg_shown(shown, CFG_SHOWN_MAX, text);
	if (!*text)
		return CFG_FAIL(err, "empty rule");
	if (cfg_parse_statement(text, st, err))
		return -1;
	if (st->kind != CFG_STATEMENT_RULE)
		return CFG_FAIL(err, "only 'use' rules can be added at run time");
	return 0;
}

int cfg_rules_add_first(const char *line)
{
	char copy[CFG_RULES_LINE_MAX + 1];
	char shown[CFG_SHOWN_MAX] = "";
	struct cfg_statement st;
	struct cfg_error err;
	if (cfg_parse_added_rule(line, copy, shown, &st, &err)) {
		vlog_warn("add_conf_rule: %s in '%s' (rule not added)", err.text, shown);
		errno = EINVAL;
		return -1;
	}
	pthread_rwlock_wrlock(&cfg_rules_lock);
	struct cfg_rule_set *set = &cfg_rules_active;
	int rc = cfg_rule_set_reserve(set, set->count + 1);
	if (!rc) {
		memmove(set->rules + 1, set->rules, set->count * sizeof(*set->rules));
		set->rules[0] = st.rule;
		set->count++;
	}
	pthread_rwlock_unlock(&cfg_rules_lock);
	if (rc) {
		errno = ENOMEM;
		return -1;
	}
	vlog_debug("add_conf_rule: rule '%s' put first", shown);
	return 0;
}

/* ---- lookup ----------------------------------------------------------- */

static bool cfg_endpoint_matches(const struct cfg_endpoint_match *m, const struct sockaddr_in *sa)
{
	if (!sa)
		return m->mask == 0 && m->port_min == 0 && m->port_max == CFG_PORT_MAX;
	uint32_t addr = ntohl(sa->sin_addr.s_addr);
	uint16_t port = ntohs(sa->sin_port);
	return (addr & m->mask) == m->net && port >= m->port_min && port <= m->port_max;
}

static bool cfg_rule_matches(const struct cfg_rule *rule, const struct sockaddr_in *local,
			     const struct sockaddr_in *remote)
{
	switch (rule->role) {
	case CFG_ROLE_TCP_SERVER:
	case CFG_ROLE_UDP_RECEIVER:
		return cfg_endpoint_matches(&rule->first, local);
	case CFG_ROLE_UDP_SENDER:
		return cfg_endpoint_matches(&rule->first, remote);
	case CFG_ROLE_TCP_CLIENT:
	case CFG_ROLE_UDP_CONNECT:
		return cfg_endpoint_matches(&rule->first, remote) &&
		       cfg_endpoint_matches(&rule->second, local);
	case CFG_ROLE_COUNT:
		break;
	}
	return false;
}

cfg_transport_t cfg_rules_match(cfg_role_t role, const struct sockaddr_in *local,
				const struct sockaddr_in *remote)
{
	cfg_transport_t result = CFG_TRANSPORT_VMA;
	pthread_rwlock_rdlock(&cfg_rules_lock);
	for (size_t i = 0; i < cfg_rules_active.count; i++) {
		const struct cfg_rule *rule = &cfg_rules_active.rules[i];
		if (rule->role == role && cfg_rule_matches(rule, local, remote)) {
			result = rule->transport;
			break;
		}
	}
	pthread_rwlock_unlock(&cfg_rules_lock);
	return result;
}

size_t cfg_rules_count(void)
{
	pthread_rwlock_rdlock(&cfg_rules_lock);
	size_t count = cfg_rules_active.count;
	pthread_rwlock_unlock(&cfg_rules_lock);
	return count;
}

void cfg_rules_clear(void)
{
	struct cfg_rule_set empty = { 0 };
	cfg_rule_set_publish(&empty);
	cfg_rule_set_free(&empty);
}
