/* libvma.conf parser and first-match lookup: every grammar form, every error
 * (with the exact warning the user sees), block selection and add_first. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
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

#define VMA CFG_TRANSPORT_VMA
#define OS CFG_TRANSPORT_OS

static char captured[16384];
static int saved_stderr = -1;
static int capture_fd = -1;
static char conf_path[64];

/* The logger writes with write(2) on fd 2: point fd 2 at a temp file. */
static void capture_begin(void)
{
	char path[] = "/tmp/test_cfg_rules_log_XXXXXX";
	capture_fd = mkstemp(path);
	ck_assert_int_ge(capture_fd, 0);
	unlink(path);
	saved_stderr = dup(2);
	ck_assert_int_ge(saved_stderr, 0);
	ck_assert_int_eq(dup2(capture_fd, 2), 2);
}

static const char *capture_end(void)
{
	ck_assert_int_eq(dup2(saved_stderr, 2), 2);
	close(saved_stderr);
	ssize_t n = pread(capture_fd, captured, sizeof(captured) - 1, 0);
	ck_assert_int_ge(n, 0);
	captured[n] = '\0';
	close(capture_fd);
	return captured;
}

static int count_of(const char *haystack, const char *needle)
{
	int n = 0;
	for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void write_conf(const char *text)
{
	strcpy(conf_path, "/tmp/test_cfg_rules_XXXXXX");
	int fd = mkstemp(conf_path);
	ck_assert_int_ge(fd, 0);
	size_t len = strlen(text);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
}

/* Loads text as a file for program "prog" with the default application id;
 * returns the loader's result, the log lands in captured. */
static int load_as(const char *text, const char *program, const char *app_id)
{
	write_conf(text);
	capture_begin();
	int rc = cfg_rules_load_file(conf_path, program, app_id);
	capture_end();
	unlink(conf_path);
	return rc;
}

static int load(const char *text)
{
	return load_as(text, "prog", NULL);
}

static struct sockaddr_in sa(const char *ip, unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	ck_assert_int_eq(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	return a;
}

/* Shorthands for one-sided roles. */
static cfg_transport_t local_match(cfg_role_t role, const char *ip, unsigned port)
{
	struct sockaddr_in l = sa(ip, port);
	return cfg_rules_match(role, &l, NULL);
}

static cfg_transport_t remote_match(cfg_role_t role, const char *ip, unsigned port)
{
	struct sockaddr_in r = sa(ip, port);
	return cfg_rules_match(role, NULL, &r);
}

static cfg_transport_t both_match(cfg_role_t role, const char *rip, unsigned rport,
				  const char *lip, unsigned lport)
{
	struct sockaddr_in r = sa(rip, rport), l = sa(lip, lport);
	return cfg_rules_match(role, &l, &r);
}

static void setup(void)
{
	vlog_set_level(VLOG_INFO);
	cfg_rules_clear();
}

static void teardown(void)
{
	cfg_rules_clear();
}

START_TEST(test_names)
{
	ck_assert_str_eq(cfg_role_name(CFG_ROLE_TCP_SERVER), "tcp_server");
	ck_assert_str_eq(cfg_role_name(CFG_ROLE_TCP_CLIENT), "tcp_client");
	ck_assert_str_eq(cfg_role_name(CFG_ROLE_UDP_SENDER), "udp_sender");
	ck_assert_str_eq(cfg_role_name(CFG_ROLE_UDP_RECEIVER), "udp_receiver");
	ck_assert_str_eq(cfg_role_name(CFG_ROLE_UDP_CONNECT), "udp_connect");
	ck_assert_str_eq(cfg_role_name(CFG_ROLE_COUNT), "?");
	ck_assert_str_eq(cfg_transport_name(VMA), "vma");
	ck_assert_str_eq(cfg_transport_name(OS), "os");
}
END_TEST

START_TEST(test_no_rules_offload_everything)
{
	ck_assert_uint_eq(cfg_rules_count(), 0);
	for (int role = 0; role < CFG_ROLE_COUNT; role++)
		ck_assert_int_eq(both_match(role, "1.2.3.4", 53, "5.6.7.8", 53), VMA);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_TCP_SERVER, NULL, NULL), VMA);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_COUNT, NULL, NULL), VMA);
}
END_TEST

START_TEST(test_tcp_server_exact)
{
	ck_assert_int_eq(load("use os tcp_server 10.1.2.3:5001\n"), 0);
	ck_assert_str_eq(captured, "");
	ck_assert_uint_eq(cfg_rules_count(), 1);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "10.1.2.3", 5001), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "10.1.2.4", 5001), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "10.1.2.3", 5002), VMA);
	/* the remote side means nothing to a server rule */
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_SERVER, "9.9.9.9", 1, "10.1.2.3", 5001), OS);
	/* other roles are not touched */
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "10.1.2.3", 5001), VMA);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "10.1.2.3", 5001, "10.1.2.3", 5001), VMA);
}
END_TEST

START_TEST(test_prefixes)
{
	ck_assert_int_eq(load("use os udp_receiver 192.168.1.0/24:*\n"
			      "use os udp_receiver 10.0.0.7/32:*\n"
			      "use os udp_receiver 172.16.77.77/12:*\n"
			      "use os udp_sender 0.0.0.0/0:9\n"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "192.168.1.0", 1), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "192.168.1.255", 1), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "192.168.2.1", 1), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "10.0.0.7", 1), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "10.0.0.6", 1), VMA);
	/* host bits beyond the prefix are ignored: 172.16.0.0/12 */
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "172.31.255.1", 1), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "172.32.0.1", 1), VMA);
	/* /0 is any address */
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "255.255.255.255", 9), OS);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "1.1.1.1", 9), OS);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "1.1.1.1", 10), VMA);
}
END_TEST

START_TEST(test_port_ranges)
{
	ck_assert_int_eq(load("use os udp_receiver *:5000-5010\n"
			      "use os udp_receiver *:0\n"
			      "use os udp_receiver *:65535-65535\n"
			      "use os udp_sender *:0-65535\n"
			      "use os tcp_server *:*\n"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 4999), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 5000), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 5005), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 5010), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 5011), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 0), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 65535), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 65534), VMA);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "1.2.3.4", 0), OS);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "1.2.3.4", 65535), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "0.0.0.0", 0), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "255.255.255.255", 65535), OS);
}
END_TEST

START_TEST(test_any_address_and_port_zero_in_query)
{
	ck_assert_int_eq(load("use os tcp_server 1.2.3.4:*\n"
			      "use os udp_receiver *:80\n"
			      "use os udp_sender *:*\n"), 0);
	/* INADDR_ANY only matches a rule that allows it */
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "0.0.0.0", 80), VMA);
	/* port 0 is a value like any other: a specific port does not match it */
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.1.1.1", 0), VMA);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "0.0.0.0", 0), OS);
}
END_TEST

START_TEST(test_udp_sender_and_receiver_sides)
{
	ck_assert_int_eq(load("use os udp_sender 10.0.0.1:7\n"
			      "use os udp_receiver 10.0.0.2:8\n"), 0);
	/* sender looks at the remote side only, receiver at the local side only */
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_SENDER, "10.0.0.1", 7, "10.0.0.2", 8), OS);
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_SENDER, "10.0.0.2", 8, "10.0.0.1", 7), VMA);
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_RECEIVER, "10.0.0.1", 7, "10.0.0.2", 8), OS);
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_RECEIVER, "10.0.0.2", 8, "10.0.0.1", 7), VMA);
}
END_TEST

START_TEST(test_two_sided_roles)
{
	ck_assert_int_eq(load("use os tcp_client 192.168.1.0/24:80-81:10.0.0.1:*\n"
			      "use os udp_connect *:53\n"
			      "use os udp_connect 1.1.1.1:*:*:*\n"), 0);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "192.168.1.9", 80, "10.0.0.1", 40000), OS);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "192.168.1.9", 81, "10.0.0.1", 1), OS);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "192.168.1.9", 82, "10.0.0.1", 1), VMA);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "192.168.2.9", 80, "10.0.0.1", 1), VMA);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "192.168.1.9", 80, "10.0.0.2", 1), VMA);
	/* a client not bound yet: the local side '*' part still matches only '*' */
	struct sockaddr_in r = sa("192.168.1.9", 80);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_TCP_CLIENT, NULL, &r), VMA);
	/* udp_connect without local part: local is '*:*', NULL local matches */
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_CONNECT, "8.8.8.8", 53, "10.0.0.1", 5353), OS);
	r = sa("8.8.4.4", 53);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_UDP_CONNECT, NULL, &r), OS);
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_CONNECT, "8.8.8.8", 54, "10.0.0.1", 53), VMA);
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_CONNECT, "1.1.1.1", 54, "10.0.0.1", 53), OS);
	/* the remote side is required for two-sided roles */
	struct sockaddr_in l = sa("10.0.0.1", 5353);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_UDP_CONNECT, &l, NULL), VMA);
}
END_TEST

START_TEST(test_null_side_matches_only_any)
{
	ck_assert_int_eq(load("use os tcp_server *:5001\n"), 0);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_TCP_SERVER, NULL, NULL), VMA);
	ck_assert_int_eq(load("use os tcp_server *:*\n"), 0);
	ck_assert_int_eq(cfg_rules_match(CFG_ROLE_TCP_SERVER, NULL, NULL), OS);
}
END_TEST

START_TEST(test_comments_blank_lines_whitespace)
{
	ck_assert_int_eq(load("# a comment line\n"
			      "\n"
			      "   \t  \n"
			      "   # indented comment\n"
			      "\t  use os tcp_server *:1   \n"
			      "use\tos\t\ttcp_server   *:2# comment glued to the rule\n"
			      "use os tcp_server *:3 # comment after a blank\n"
			      "use os tcp_server *:4\r\n"
			      "#use os tcp_server *:5\n"
			      "use os tcp_server *:6"), 0);
	ck_assert_str_eq(captured, "");
	ck_assert_uint_eq(cfg_rules_count(), 5);
	for (unsigned port = 1; port <= 6; port++)
		ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", port),
				 port == 5 ? VMA : OS);
}
END_TEST

START_TEST(test_empty_file)
{
	ck_assert_int_eq(load("use os tcp_server *:*\n"), 0);
	ck_assert_int_eq(load(""), 0);
	ck_assert_uint_eq(cfg_rules_count(), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 1), VMA);
}
END_TEST

/* Each bad statement, and the reason the warning must give. */
static const struct {
	const char *line;
	const char *reason;
} bad_lines[] = {
	{ "use vmx tcp_server *:80", "bad transport (expected vma or os)" },
	{ "use OS tcp_server *:80", "bad transport (expected vma or os)" },
	{ "use os tcp_srv *:80", "bad role (expected tcp_server" },
	{ "use os TCP_SERVER *:80", "bad role (expected tcp_server" },
	{ "USE os tcp_server *:80", "unknown statement (expected use or application-id)" },
	{ "offload everything", "unknown statement (expected use or application-id)" },
	{ "use os tcp_server 1.2.3.256:80", "bad IPv4 address" },
	{ "use os tcp_server 1.2.3:80", "bad IPv4 address" },
	{ "use os tcp_server 1.2.3.4.5:80", "bad IPv4 address" },
	{ "use os tcp_server 1.2..4:80", "bad IPv4 address" },
	{ "use os tcp_server 1.2.3.0004:80", "bad IPv4 address" },
	{ "use os tcp_server -1.2.3.4:80", "bad IPv4 address" },
	{ "use os tcp_server */8:80", "bad IPv4 address" },
	{ "use os tcp_server :80", "bad IPv4 address" },
	{ "use os tcp_server 1.2.3.4/33:80", "bad prefix length (0..32)" },
	{ "use os tcp_server 1.2.3.4/:80", "bad prefix length (0..32)" },
	{ "use os tcp_server 1.2.3.4/ 8:80", "unexpected text after the rule" },
	{ "use os tcp_server 1.2.3.4/100:80", "bad prefix length (0..32)" },
	{ "use os tcp_server *:70000", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:65536", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:6000-5000", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:5000-", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:-5", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:1-2-3", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:http", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os tcp_server *:", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os udp_connect *:53:*:99999", "bad port range (*, N or N-M within 0..65535)" },
	{ "use os udp_connect *:53:300.1.1.1:1", "bad IPv4 address" },
	{ "use os tcp_server", "missing fields (expected 'use <vma|os> <role> <address spec>')" },
	{ "use os", "missing fields" },
	{ "use", "missing fields" },
	{ "use os tcp_server *", "missing port in the address spec" },
	{ "use os tcp_client 1.2.3.4:80:5.6.7.8", "missing local port in the address spec" },
	{ "use os tcp_server *:80:1.2.3.4:90", "too many ':' fields in the address spec" },
	{ "use os udp_sender *:80:*", "too many ':' fields in the address spec" },
	{ "use os tcp_client *:1:*:2:3", "too many ':' fields in the address spec" },
	{ "use os tcp_server *:80 junk", "unexpected text after the rule" },
	{ "use os tcp_server *:80 a b c", "unexpected text after the rule" },
};

START_TEST(test_bad_line_warned_and_skipped)
{
	char text[512], expected[512];
	snprintf(text, sizeof(text),
		 "use os udp_receiver *:1111\n  %s   # why not\nuse os udp_receiver *:2222\n",
		 bad_lines[_i].line);
	ck_assert_int_eq(load(text), 1);
	snprintf(expected, sizeof(expected), "%s:2: %s", conf_path, bad_lines[_i].reason);
	ck_assert_msg(strstr(captured, expected), "want '%s' in '%s'", expected, captured);
	ck_assert_msg(strstr(captured, "(line skipped)\n"), "no '(line skipped)' in '%s'", captured);
	/* The line itself is never quoted (the file may be anything). */
	snprintf(expected, sizeof(expected), "%s", bad_lines[_i].line);
	ck_assert_msg(strlen(expected) < 8 || !strstr(captured, expected), "'%s' quoted in '%s'",
		      expected, captured);
	ck_assert_ptr_null(strstr(captured, "why not"));
	ck_assert_int_eq(count_of(captured, "(line skipped"), 1);
	ck_assert_uint_eq(cfg_rules_count(), 2);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 1111), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 2222), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 80), VMA);
}
END_TEST

START_TEST(test_warning_exact_text)
{
	ck_assert_int_eq(load("\n\n\n\n\n\n\n\n\n\n\nuse vma tcp_server *:70000 # typo\n"), 1);
	char expected[256];
	snprintf(expected, sizeof(expected),
		 "%s:12: bad port range (*, N or N-M within 0..65535) (line skipped)\n",
		 conf_path);
	ck_assert_msg(strstr(captured, expected), "want '%s' in '%s'", expected, captured);
	ck_assert_int_eq(count_of(captured, "(line skipped)"), 1);
}
END_TEST

START_TEST(test_several_bad_lines_counted)
{
	ck_assert_int_eq(load("use os tcp_server *:99999\nuse os tcp_server *:1\n"
			      "use os bogus *:1\nuse os udp_receiver 1.2.3.4/40:1\n"), 3);
	ck_assert_int_eq(count_of(captured, "(line skipped"), 3);
	ck_assert_ptr_nonnull(strstr(captured, ":1: bad port range"));
	ck_assert_ptr_nonnull(strstr(captured, ":3: bad role"));
	ck_assert_ptr_nonnull(strstr(captured, ":4: bad prefix length"));
	ck_assert_uint_eq(cfg_rules_count(), 1);
}
END_TEST

static char *long_line(size_t len, unsigned port)
{
	char *text = malloc(len + 64);
	ck_assert_ptr_nonnull(text);
	int head = snprintf(text, len + 64, "use os tcp_server *:%u", port);
	memset(text + head, ' ', len - (size_t)head);
	strcpy(text + len, "\nuse os tcp_server *:2\n");
	return text;
}

START_TEST(test_line_too_long)
{
	char *text = long_line(CFG_RULES_LINE_MAX + 1, 1);
	ck_assert_int_eq(load(text), 1);
	free(text);
	ck_assert_ptr_nonnull(strstr(captured, ":1: line longer than 1024 characters (line skipped)"));
	ck_assert_ptr_null(strstr(captured, "tcp_server"));
	ck_assert_int_eq(count_of(captured, "(line skipped)"), 1);
	/* the rest of the long line is not read as a line of its own */
	ck_assert_ptr_null(strstr(captured, ":2:"));
	ck_assert_uint_eq(cfg_rules_count(), 1);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 1), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 2), OS);

	text = long_line(CFG_RULES_LINE_MAX, 1);
	ck_assert_int_eq(load(text), 0);
	free(text);
	ck_assert_uint_eq(cfg_rules_count(), 2);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 1), OS);
}
END_TEST

START_TEST(test_nul_byte_in_line)
{
	static const char text[] = "use os tcp_server *:1\0junk\nuse os tcp_server *:2\n";
	write_conf("");
	FILE *f = fopen(conf_path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, sizeof(text) - 1, f), sizeof(text) - 1);
	fclose(f);
	capture_begin();
	int rc = cfg_rules_load_file(conf_path, "prog", NULL);
	capture_end();
	unlink(conf_path);
	ck_assert_int_eq(rc, 1);
	ck_assert_ptr_nonnull(strstr(captured, ":1: NUL byte in the line (line skipped)"));
	ck_assert_ptr_null(strstr(captured, "tcp_server"));
	ck_assert_uint_eq(cfg_rules_count(), 1);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 2), OS);
}
END_TEST

START_TEST(test_first_match_wins)
{
	ck_assert_int_eq(load("use vma tcp_server *:5001\nuse os tcp_server *:*\n"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5001), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5002), OS);
	ck_assert_int_eq(load("use os tcp_server *:*\nuse vma tcp_server *:5001\n"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5001), OS);
	/* a later load replaces the earlier rules */
	ck_assert_int_eq(load("use os udp_sender *:1\n"), 0);
	ck_assert_uint_eq(cfg_rules_count(), 1);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5002), VMA);
}
END_TEST

START_TEST(test_add_first)
{
	ck_assert_int_eq(load("use vma tcp_server *:*\n"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5001), VMA);
	ck_assert_int_eq(cfg_rules_add_first("use os tcp_server *:5001"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5001), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5002), VMA);
	ck_assert_int_eq(cfg_rules_add_first("  use vma tcp_server 1.1.1.1:5001  # comment\n"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.1.1.1", 5001), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 5001), OS);
	ck_assert_uint_eq(cfg_rules_count(), 3);
}
END_TEST

START_TEST(test_add_first_rejects)
{
	static const struct {
		const char *line;
		const char *warning;
	} cases[] = {
		{ "use vma tcp_server *:70000",
		  "add_conf_rule: bad port range (*, N or N-M within 0..65535) in "
		  "'use vma tcp_server *:70000' (rule not added)" },
		{ "application-id * *", "add_conf_rule: only 'use' rules can be added at run time" },
		{ "", "add_conf_rule: empty rule" },
		{ "   # only a comment", "add_conf_rule: empty rule" },
		{ NULL, "add_conf_rule: no line given" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		capture_begin();
		errno = 0;
		int rc = cfg_rules_add_first(cases[i].line);
		int error = errno;
		capture_end();
		ck_assert_int_eq(rc, -1);
		ck_assert_int_eq(error, EINVAL);
		ck_assert_msg(strstr(captured, cases[i].warning), "want '%s' in '%s'",
			      cases[i].warning, captured);
		ck_assert_uint_eq(cfg_rules_count(), 0);
	}
	char *text = long_line(CFG_RULES_LINE_MAX + 1, 1);
	text[CFG_RULES_LINE_MAX + 1] = '\0';
	capture_begin();
	ck_assert_int_eq(cfg_rules_add_first(text), -1);
	capture_end();
	free(text);
	ck_assert_ptr_nonnull(strstr(captured, "add_conf_rule: line longer than 1024 characters"));
}
END_TEST

START_TEST(test_add_first_many_then_clear)
{
	char line[64];
	for (unsigned port = 1; port <= 300; port++) {
		snprintf(line, sizeof(line), "use %s udp_receiver *:%u", port % 2 ? "os" : "vma",
			 port);
		ck_assert_int_eq(cfg_rules_add_first(line), 0);
	}
	ck_assert_uint_eq(cfg_rules_count(), 300);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 299), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 300), VMA);
	ck_assert_int_eq(cfg_rules_add_first("use os udp_receiver *:*"), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 300), OS);
	cfg_rules_clear();
	ck_assert_uint_eq(cfg_rules_count(), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 299), VMA);
}
END_TEST

static const char blocks_conf[] =
	"use os udp_receiver *:1          # before any application-id: everyone\n"
	"application-id tcp_lat *\n"
	"use os udp_receiver *:2\n"
	"application-id t?p_lat B1\n"
	"use os udp_receiver *:3\n"
	"application-id other *\n"
	"use os udp_receiver *:4\n"
	"application-id db2* *\n"
	"use os udp_receiver *:5\n"
	"application-id * B1\n"
	"use os udp_receiver *:6\n"
	"application-id * VMA_DEFAULT_APPLICATION_ID\n"
	"use os udp_receiver *:7\n";

/* Which of ports 1..7 the blocks send to the OS, as a bit mask of ports. */
static unsigned os_ports(const char *program, const char *app_id)
{
	ck_assert_int_eq(load_as(blocks_conf, program, app_id), 0);
	unsigned mask = 0;
	for (unsigned port = 1; port <= 7; port++)
		if (local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", port) == OS)
			mask |= 1u << port;
	return mask;
}

#define PORTS(...) ports_mask((unsigned[]){ __VA_ARGS__, 0 })
static unsigned ports_mask(const unsigned *ports)
{
	unsigned mask = 0;
	for (; *ports; ports++)
		mask |= 1u << *ports;
	return mask;
}

START_TEST(test_application_id_selection)
{
	ck_assert_uint_eq(os_ports("tcp_lat", NULL), PORTS(1, 2));
	ck_assert_uint_eq(os_ports("tcp_lat", "VMA_DEFAULT_APPLICATION_ID"), PORTS(1, 2));
	ck_assert_uint_eq(os_ports("/usr/bin/tcp_lat", "B1"), PORTS(1, 2, 3, 6));
	ck_assert_uint_eq(os_ports("tip_lat", "B1"), PORTS(1, 3, 6));
	ck_assert_uint_eq(os_ports("tcp_lat", "B2"), PORTS(1, 2));
	ck_assert_uint_eq(os_ports("tcp_lat", "b1"), PORTS(1, 2));
	ck_assert_uint_eq(os_ports("db2sysc", "B2"), PORTS(1, 5));
	ck_assert_uint_eq(os_ports("db2", NULL), PORTS(1, 5));
	ck_assert_uint_eq(os_ports("xdb2", NULL), PORTS(1));
	ck_assert_uint_eq(os_ports("tcp_lat2", NULL), PORTS(1));
	ck_assert_uint_eq(os_ports("other", "B1"), PORTS(1, 4, 6));
	ck_assert_uint_eq(os_ports(NULL, NULL), PORTS(1));
}
END_TEST

START_TEST(test_matching_blocks_in_file_order)
{
	ck_assert_int_eq(load("application-id * *\n"
			      "use vma udp_receiver *:9\n"
			      "application-id prog *\n"
			      "use os udp_receiver *:*\n"
			      "application-id p* *\n"
			      "use vma udp_receiver *:10\n"), 0);
	ck_assert_uint_eq(cfg_rules_count(), 3);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 9), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 10), OS);
}
END_TEST

START_TEST(test_bad_application_id_disables_its_block)
{
	ck_assert_int_eq(load("application-id prog\n"
			      "use os udp_receiver *:2\n"
			      "use os udp_receiver *:bad\n"
			      "application-id * *\n"
			      "use os udp_receiver *:3\n"
			      "application-id prog * junk\n"
			      "use os udp_receiver *:4\n"), 3);
	ck_assert_ptr_nonnull(strstr(captured, ":1: missing fields (expected 'application-id "
				     "<program-name|*> <user-defined-id|*>') (line skipped; the rules "
				     "up to the next application-id apply to no program)"));
	ck_assert_int_eq(count_of(captured, "apply to no program"), 2);
	ck_assert_ptr_nonnull(strstr(captured, ":6: unexpected text after the application-id "
				     "(line skipped;"));
	ck_assert_ptr_null(strstr(captured, "junk"));
	/* lines in a block that does not apply are still checked */
	ck_assert_ptr_nonnull(strstr(captured, ":3: bad port range"));
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 2), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 3), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 4), VMA);
}
END_TEST

START_TEST(test_missing_file)
{
	ck_assert_int_eq(load("use os tcp_server *:*\n"), 0);
	ck_assert_uint_eq(cfg_rules_count(), 1);
	capture_begin();
	int rc = cfg_rules_load_file("/tmp/test_cfg_rules_no_such_dir/libvma.conf", "prog", NULL);
	capture_end();
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(captured, "");
	ck_assert_uint_eq(cfg_rules_count(), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 1), VMA);

	vlog_set_level(VLOG_DEBUG);
	capture_begin();
	rc = cfg_rules_load_file("/tmp/test_cfg_rules_no_such_dir/libvma.conf", "prog", NULL);
	capture_end();
	ck_assert_int_eq(rc, 0);
	ck_assert_ptr_nonnull(strstr(captured, "/tmp/test_cfg_rules_no_such_dir/libvma.conf "
				     "not found"));
	ck_assert_ptr_null(strstr(captured, "WARN"));
}
END_TEST

START_TEST(test_unreadable_file)
{
	ck_assert_int_eq(load("use os tcp_server *:*\n"), 0);
	capture_begin();
	int rc = cfg_rules_load_file("/tmp", "prog", NULL);
	capture_end();
	ck_assert_int_eq(rc, -1);
	ck_assert_ptr_nonnull(strstr(captured, "cannot read /tmp: Is a directory"));
	ck_assert_uint_eq(cfg_rules_count(), 0);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 1), VMA);
}
END_TEST

START_TEST(test_load_string)
{
	capture_begin();
	int rc = cfg_rules_load_string("use os tcp_server *:7\nuse os tcp_server *:x\n",
				       "inline.conf", "prog", NULL);
	capture_end();
	ck_assert_int_eq(rc, 1);
	ck_assert_ptr_nonnull(strstr(captured, "inline.conf:2: bad port range (*, N or N-M within "
				     "0..65535) (line skipped)"));
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 7), OS);
}
END_TEST

/* A file that is not a libvma.conf (VMA_CONFIG_FILE=/etc/shadow in a
 * program that can read it): warnings give the file, the line number and the
 * reason, never a byte of the content, at any log level; after 5 bad lines
 * the reading stops with one warning and none of the file's rules are used. */
static const char secret_conf[] =
	"use os tcp_server *:7\n"
	"root:$6$S3CRETsalt$S3CREThashAAAA:19000:0:99999:7:::\n"
	"daemon:*:19000:0:99999:7:::\n"
	"\n"
	"alice:$y$j9T$S3CRETalice$S3CRETalicehash:19001:0:99999:7:::\n"
	"bob S3CRETbob use os\n"
	"use os tcp_server S3CRETaddr:1\n"
	"use os tcp_server *:8\n"
	"carol:$6$S3CRETcarol:19002:0:99999:7:::\n";

START_TEST(test_secret_file_never_echoed)
{
	for (int level = VLOG_INFO; level <= VLOG_ALL; level += VLOG_ALL - VLOG_INFO) {
		vlog_set_level(level);
		ck_assert_int_eq(load(secret_conf), 5);
		ck_assert_msg(!strstr(captured, "S3CRET"), "content echoed: %s", captured);
		ck_assert_ptr_null(strstr(captured, "root"));
		ck_assert_ptr_null(strstr(captured, "alice"));
		ck_assert_ptr_null(strstr(captured, "$6$"));
		char expected[256];
		for (int line = 2; line <= 7; line++) {
			snprintf(expected, sizeof(expected), "%s:%d: ", conf_path, line);
			ck_assert_msg(!!strstr(captured, expected) == (line != 4), "line %d in '%s'",
				      line, captured);
		}
		snprintf(expected, sizeof(expected), "%s:2: unknown statement (expected use or "
			 "application-id) (line skipped)\n", conf_path);
		ck_assert_msg(strstr(captured, expected), "want '%s' in '%s'", expected, captured);
		/* Stopped at line 7: line 8 (valid) and 9 are never read. */
		ck_assert_ptr_null(strstr(captured, ":9:"));
		ck_assert_int_eq(count_of(captured, "reading stopped"), 1);
		snprintf(expected, sizeof(expected), "%s: 5 bad lines, reading stopped", conf_path);
		ck_assert_msg(strstr(captured, expected), "want '%s' in '%s'", expected, captured);
		/* Line 1's rule was parsed, then dropped with the rest. */
		ck_assert_uint_eq(cfg_rules_count(), 0);
		ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 7), VMA);
	}
	vlog_set_level(VLOG_INFO);
}
END_TEST

START_TEST(test_four_bad_lines_keep_the_rest)
{
	ck_assert_int_eq(load("x\ny\nuse os tcp_server *:7\nz\nw\nuse os tcp_server *:8\n"), 4);
	ck_assert_int_eq(count_of(captured, "(line skipped)"), 4);
	ck_assert_ptr_null(strstr(captured, "reading stopped"));
	ck_assert_uint_eq(cfg_rules_count(), 2);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "1.2.3.4", 8), OS);
	/* load_string stops the same way */
	capture_begin();
	ck_assert_int_eq(cfg_rules_load_string("use os tcp_server *:7\na\nb\nc\nd\ne\nf\n", "s.conf",
					       "prog", NULL), 5);
	capture_end();
	ck_assert_int_eq(count_of(captured, "reading stopped"), 1);
	ck_assert_uint_eq(cfg_rules_count(), 0);
}
END_TEST

/* Not regular files: never read (a FIFO would block the start for ever,
 * /dev/zero would never end). Check's timeout catches a hang. */
START_TEST(test_special_files_refused)
{
	char fifo[] = "/tmp/test_cfg_rules_fifo_XXXXXX";
	int fd = mkstemp(fifo);
	ck_assert_int_ge(fd, 0);
	close(fd);
	unlink(fifo);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	const char *paths[] = { fifo, "/dev/zero", "/dev/null" };
	for (size_t i = 0; i < 3; i++) {
		ck_assert_int_eq(load("use os tcp_server *:*\n"), 0);
		capture_begin();
		int rc = cfg_rules_load_file(paths[i], "prog", NULL);
		capture_end();
		ck_assert_int_eq(rc, -1);
		char expected[128];
		snprintf(expected, sizeof(expected), "VMA_CONFIG_FILE: %s is not a regular file",
			 paths[i]);
		ck_assert_msg(strstr(captured, expected), "want '%s' in '%s'", expected, captured);
		ck_assert_int_eq(count_of(captured, "WARN"), 1);
		ck_assert_uint_eq(cfg_rules_count(), 0);
	}
	unlink(fifo);
}
END_TEST

START_TEST(test_huge_file_refused)
{
	write_conf("use os tcp_server *:*\n");
	ck_assert_int_eq(truncate(conf_path, 2 * 1024 * 1024), 0);
	capture_begin();
	int rc = cfg_rules_load_file(conf_path, "prog", NULL);
	capture_end();
	unlink(conf_path);
	ck_assert_int_eq(rc, -1);
	ck_assert_ptr_nonnull(strstr(captured, "is bigger than 1 MiB"));
	ck_assert_uint_eq(cfg_rules_count(), 0);
}
END_TEST

/* The libvma.conf we install: loads clean, DNS over UDP stays with the OS. */
START_TEST(test_default_conf)
{
	char path[4096];
	const char *srcdir = getenv("srcdir");
	if (srcdir) {
		snprintf(path, sizeof(path), "%s/libvma.conf", srcdir);
	} else {
		/* __FILE__ is .../tests/unit/test_cfg_rules.c */
		snprintf(path, sizeof(path), "%s", __FILE__);
		char *cut = strstr(path, "tests/unit/test_cfg_rules.c");
		ck_assert_ptr_nonnull(cut);
		strcpy(cut, "libvma.conf");
	}
	ck_assert_int_eq(access(path, R_OK), 0);
	capture_begin();
	int rc = cfg_rules_load_file(path, "any_program", NULL);
	capture_end();
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(captured, "");
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "10.0.0.1", 53), OS);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "10.0.0.1", 53), OS);
	ck_assert_int_eq(both_match(CFG_ROLE_UDP_CONNECT, "10.0.0.1", 53, "10.0.0.2", 40000), OS);
	ck_assert_int_eq(local_match(CFG_ROLE_UDP_RECEIVER, "10.0.0.1", 54), VMA);
	ck_assert_int_eq(remote_match(CFG_ROLE_UDP_SENDER, "10.0.0.1", 5353), VMA);
	ck_assert_int_eq(local_match(CFG_ROLE_TCP_SERVER, "10.0.0.1", 53), VMA);
	ck_assert_int_eq(both_match(CFG_ROLE_TCP_CLIENT, "10.0.0.1", 53, "10.0.0.2", 1), VMA);
}
END_TEST

static volatile int readers_stop;

static void *reader_thread(void *arg)
{
	long wrong = 0;
	(void)arg;
	while (!readers_stop) {
		/* port 1 is OS in every rule set the writer publishes */
		if (local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 1) != OS)
			wrong++;
		local_match(CFG_ROLE_UDP_RECEIVER, "1.2.3.4", 2);
	}
	return (void *)(intptr_t)wrong;
}

START_TEST(test_concurrent_match_while_changing)
{
	pthread_t readers[2];
	ck_assert_int_eq(load("use os udp_receiver *:1\n"), 0);
	readers_stop = 0;
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&readers[i], NULL, reader_thread, NULL), 0);
	for (int round = 0; round < 20; round++) {
		ck_assert_int_eq(cfg_rules_load_string("use os udp_receiver *:1\n", "t", "p", NULL), 0);
		for (int k = 0; k < 50; k++)
			ck_assert_int_eq(cfg_rules_add_first(k % 2 ? "use vma udp_receiver *:2"
							     : "use os udp_receiver *:2"), 0);
	}
	readers_stop = 1;
	for (int i = 0; i < 2; i++) {
		void *wrong;
		ck_assert_int_eq(pthread_join(readers[i], &wrong), 0);
		ck_assert_ptr_null(wrong);
	}
	ck_assert_uint_eq(cfg_rules_count(), 51);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cfg_rules");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_no_rules_offload_everything);
	tcase_add_test(tc, test_tcp_server_exact);
	tcase_add_test(tc, test_prefixes);
	tcase_add_test(tc, test_port_ranges);
	tcase_add_test(tc, test_any_address_and_port_zero_in_query);
	tcase_add_test(tc, test_udp_sender_and_receiver_sides);
	tcase_add_test(tc, test_two_sided_roles);
	tcase_add_test(tc, test_null_side_matches_only_any);
	tcase_add_test(tc, test_comments_blank_lines_whitespace);
	tcase_add_test(tc, test_empty_file);
	tcase_add_loop_test(tc, test_bad_line_warned_and_skipped, 0,
			    (int)(sizeof(bad_lines) / sizeof(bad_lines[0])));
	tcase_add_test(tc, test_warning_exact_text);
	tcase_add_test(tc, test_several_bad_lines_counted);
	tcase_add_test(tc, test_line_too_long);
	tcase_add_test(tc, test_nul_byte_in_line);
	tcase_add_test(tc, test_first_match_wins);
	tcase_add_test(tc, test_add_first);
	tcase_add_test(tc, test_add_first_rejects);
	tcase_add_test(tc, test_add_first_many_then_clear);
	tcase_add_test(tc, test_application_id_selection);
	tcase_add_test(tc, test_matching_blocks_in_file_order);
	tcase_add_test(tc, test_bad_application_id_disables_its_block);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_unreadable_file);
	tcase_add_test(tc, test_load_string);
	tcase_add_test(tc, test_secret_file_never_echoed);
	tcase_add_test(tc, test_four_bad_lines_keep_the_rest);
	tcase_add_test(tc, test_special_files_refused);
	tcase_add_test(tc, test_huge_file_refused);
	tcase_add_test(tc, test_default_conf);
	tcase_add_test(tc, test_concurrent_match_while_changing);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
