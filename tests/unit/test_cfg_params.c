/* The VMA_* parameter table: defaults, parsing and validation, VMA_SPEC
 * profiles, derived defaults, table consistency and the banner. Every test
 * uses an injected environment; the logger's output (fd 2) is captured. */
#include "config.h"

#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/cfg_params.h"
#include "log/vlog.h"

/* ---- injected environment ---- */

#define ENV_MAX 16
static const char *env_names[ENV_MAX];
static const char *env_values[ENV_MAX];
static int env_count;

static void env_clear(void) { env_count = 0; }

static void env_set(const char *name, const char *value)
{
	ck_assert_int_lt(env_count, ENV_MAX);
	env_names[env_count] = name;
	env_values[env_count++] = value;
}

static const char *fake_getenv(const char *name)
{
	for (int i = env_count - 1; i >= 0; i--)
		if (!strcmp(env_names[i], name))
			return env_values[i];
	return NULL;
}

/* ---- capture of the logger's output (it writes fd 2 with write(2)) ---- */

static char captured[1 << 16];
static int capture_fd = -1, saved_stderr = -1;

static void capture_begin(void)
{
	char path[] = "/tmp/test_cfg_params.XXXXXX";
	fflush(stderr);
	capture_fd = mkstemp(path);
	ck_assert_int_ge(capture_fd, 0);
	unlink(path);
	saved_stderr = dup(2);
	ck_assert_int_ge(saved_stderr, 0);
	ck_assert_int_eq(dup2(capture_fd, 2), 2);
}

static const char *capture_end(void)
{
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	lseek(capture_fd, 0, SEEK_SET);
	ssize_t n = read(capture_fd, captured, sizeof(captured) - 1);
	captured[n > 0 ? n : 0] = '\0';
	close(capture_fd);
	return captured;
}

static int count_of(const char *haystack, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(haystack, needle); p; p = strstr(p + strlen(needle), needle))
		n++;
	return n;
}

/* Loads with the fake environment into a zeroed struct (so two loads can
 * be compared byte for byte), capturing warnings. */
static int load(struct cfg_params *p)
{
	memset(p, 0, sizeof(*p));
	vlog_set_level(VLOG_INFO);
	capture_begin();
	int rejected = cfg_params_load(p, fake_getenv);
	capture_end();
	return rejected;
}

static void setup(void) { env_clear(); }

/* ---- defaults ---- */

START_TEST(test_defaults_match_documentation)
{
	struct cfg_params p;
	ck_assert_int_eq(load(&p), 0);
	ck_assert_str_eq(captured, "");
	ck_assert_int_eq(p.spec, CFG_SPEC_NONE);
	ck_assert_int_eq(p.tracelevel, VLOG_INFO);
	ck_assert_int_eq(p.log_details, 0);
	ck_assert_int_eq(p.log_colors, 1);
	ck_assert_str_eq(p.log_file, "");
	ck_assert_str_eq(p.config_file, VMA_SYSCONFDIR "/libvma.conf");
	ck_assert_str_eq(p.application_id, "VMA_DEFAULT_APPLICATION_ID");
	ck_assert_str_eq(p.stats_shmem_dir, "/tmp/");
	ck_assert_int_eq(p.stats_fd_num, 100);
	ck_assert_int_eq(p.handle_sigintr, 0);
	ck_assert_int_eq(p.handle_sigsegv, 0);
	ck_assert_int_eq(p.close_on_dup2, 1);
	ck_assert_int_eq(p.fork, 1);            /* 001 wins over 002's 0 */
	ck_assert_int_eq(p.thread_mode, 1);
	ck_assert_int_eq(p.rx_poll, 100000);
	ck_assert_int_eq(p.select_poll, 100000);
	ck_assert_int_eq(p.offloaded_sockets, 1);
	ck_assert_int_eq(p.mtu, 0);
	ck_assert_int_eq(p.mss, 0);
	ck_assert_int_eq(p.tx_wre, 3000);
	ck_assert_int_eq(p.rx_bytes_min, 65536);  /* 001 wins over 002's 2000000 */
	ck_assert_int_eq(p.cq_poll_batch_max, 16);
	ck_assert_int_eq(p.progress_engine_wce_max, 2048);
	ck_assert_int_eq(p.rx_udp_poll_os_ratio, 10);
	ck_assert_int_eq(p.exception_handling, -1);
	ck_assert_int_eq(p.tcp_nodelay, 0);
	ck_assert_int_eq(p.select_poll_os_ratio, 10);
	ck_assert_int_eq(p.select_skip_os, 4);
	ck_assert_int_eq(p.mem_alloc_type, 1);
	ck_assert_str_eq(p.internal_thread_affinity, "-1");
	ck_assert_str_eq(p.vmad_notify_dir, "/tmp/vma");
}
END_TEST

START_TEST(test_null_getenv_gives_defaults)
{
	struct cfg_params p;
	memset(&p, 0x5a, sizeof(p));
	ck_assert_int_eq(cfg_params_load(&p, NULL), 0);
	ck_assert_int_eq(p.rx_poll, 100000);
	ck_assert_str_eq(p.application_id, "VMA_DEFAULT_APPLICATION_ID");
}
END_TEST

/* ---- valid values ---- */

START_TEST(test_valid_values_parse)
{
	struct cfg_params p;
	env_set("VMA_RX_POLL", "-1");
	env_set("VMA_SELECT_POLL", "+250");
	env_set("VMA_MTU", "9000");
	env_set("VMA_LOG_COLORS", "0");
	env_set("VMA_HANDLE_SIGINTR", "1");
	env_set("VMA_FORK", "false");
	env_set("VMA_LOG_FILE", "/tmp/vma.%d.log");
	env_set("VMA_STATS_SHMEM_DIR", "");          /* empty is meaningful: no stats file */
	env_set("VMA_RING_ALLOCATION_LOGIC_RX", "20");
	env_set("VMA_THREAD_MODE", "0");
	env_set("VMA_EXCEPTION_HANDLING", "3");
	env_set("VMA_STATS_FD_NUM", "1024");          /* the top of the range */
	env_set("VMA_INTERNAL_THREAD_AFFINITY", "0x5");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_str_eq(captured, "");
	ck_assert_int_eq(p.rx_poll, -1);
	ck_assert_int_eq(p.select_poll, 250);
	ck_assert_int_eq(p.mtu, 9000);
	ck_assert_int_eq(p.log_colors, 0);
	ck_assert_int_eq(p.handle_sigintr, 1);
	ck_assert_int_eq(p.fork, 0);
	ck_assert_str_eq(p.log_file, "/tmp/vma.%d.log");
	ck_assert_str_eq(p.stats_shmem_dir, "");
	ck_assert_int_eq(p.ring_allocation_logic_rx, 20);
	ck_assert_int_eq(p.thread_mode, 0);
	ck_assert_int_eq(p.exception_handling, 3);
	ck_assert_int_eq(p.stats_fd_num, 1024);
	ck_assert_str_eq(p.internal_thread_affinity, "0x5");
}
END_TEST

START_TEST(test_tracelevel_names_and_numbers)
{
	static const struct { const char *text; int level; } cases[] = {
		{ "debug", VLOG_DEBUG }, { "DEBUG", VLOG_DEBUG }, { "warn", VLOG_WARNING },
		{ "none", VLOG_NONE }, { "5", VLOG_DEBUG }, { "-1", VLOG_NONE }, { "info", VLOG_INFO },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cfg_params p;
		env_clear();
		env_set("VMA_TRACELEVEL", cases[i].text);
		ck_assert_int_eq(load(&p), 0);
		ck_assert_msg(p.tracelevel == cases[i].level, "VMA_TRACELEVEL=%s gave %d",
			      cases[i].text, p.tracelevel);
	}
}
END_TEST

/* A choice is given by its number or its label, in any case. */
START_TEST(test_choice_by_label)
{
	static const struct { const char *text; int value; } cases[] = {
		{ "verbs", 2 }, { "XDP", 1 }, { "Auto", 0 }, { "2", 2 }, { "0", 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cfg_params p;
		env_clear();
		env_set("VMA_RING_BACKEND", cases[i].text);
		ck_assert_int_eq(load(&p), 0);
		ck_assert_msg(p.ring_backend == cases[i].value, "VMA_RING_BACKEND=%s gave %d", cases[i].text,
			      p.ring_backend);
	}
	struct cfg_params p;
	env_clear();
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.ring_backend, 1);   /* xdp by default */
}
END_TEST

/* ---- bad values: default kept, one warning, counted ---- */

static const struct bad_case {
	const char *name;
	const char *value;
	const char *reason;
} bad_cases[] = {
	{ "VMA_RX_POLL", "banana", "is not a valid integer" },
	{ "VMA_RX_POLL", "12abc", "is not a valid integer" },
	{ "VMA_RX_POLL", "", "is not a valid integer" },
	{ "VMA_RX_POLL", " 5", "is not a valid integer" },
	{ "VMA_RX_POLL", "0x10", "is not a valid integer" },
	{ "VMA_RX_POLL", "-2", "is out of range" },
	{ "VMA_RX_POLL", "100000001", "is out of range" },
	{ "VMA_RX_POLL", "99999999999999999999999", "is out of range" },
	{ "VMA_STATS_FD_NUM", "1025", "is out of range" },
	{ "VMA_TX_WRE_BATCHING", "0", "is out of range" },
	{ "VMA_LOG_COLORS", "2", "is not 0 or 1" },
	{ "VMA_LOG_COLORS", "", "is not 0 or 1" },
	{ "VMA_RING_ALLOCATION_LOGIC_TX", "5", "is not one of the documented values" },
	{ "VMA_THREAD_MODE", "4", "is out of range" },
	{ "VMA_TRACELEVEL", "loud", "is not a log level" },
	{ "VMA_TRACELEVEL", "9", "is not a log level" },
	{ "VMA_SPEC", "fast", "is not a known profile" },
	{ "VMA_RING_BACKEND", "rdma", "is not one of the documented values" },
	{ "VMA_RING_BACKEND", "3", "is out of range" },
};

START_TEST(test_bad_value_keeps_default)
{
	const struct bad_case *c = &bad_cases[_i];
	const struct cfg_param_row *row = cfg_param_find(c->name);
	struct cfg_params p, defaults;
	char expected[256], def_text[64];

	ck_assert_ptr_nonnull(row);
	ck_assert_int_eq(load(&defaults), 0);
	env_set(c->name, c->value);
	ck_assert_msg(load(&p) == 1, "%s='%s' not rejected", c->name, c->value);
	ck_assert_msg(!memcmp(&p, &defaults, sizeof(p)), "%s='%s' changed the configuration",
		      c->name, c->value);
	ck_assert_int_eq(count_of(captured, "using the default"), 1);
	snprintf(expected, sizeof(expected), "%s='%s' %s", c->name, c->value, c->reason);
	ck_assert_msg(strstr(captured, expected), "got \"%s\", wanted \"%s\"", captured, expected);
	snprintf(expected, sizeof(expected), "using the default %s",
		 cfg_param_default_text(row, def_text, sizeof(def_text)));
	ck_assert_msg(strstr(captured, expected), "got \"%s\", wanted \"%s\"", captured, expected);
}
END_TEST

START_TEST(test_bad_value_message_exact)
{
	struct cfg_params p;
	env_set("VMA_RX_POLL", "banana");
	ck_assert_int_eq(load(&p), 1);
	ck_assert_ptr_nonnull(strstr(captured,
		"VMA_RX_POLL='banana' is not a valid integer; using the default 100000"));
}
END_TEST

START_TEST(test_too_long_string_keeps_default)
{
	struct cfg_params p;
	static char long_id[CFG_NAME_SIZE + 10];
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	env_set("VMA_APPLICATION_ID", long_id);
	ck_assert_int_eq(load(&p), 1);
	ck_assert_str_eq(p.application_id, "VMA_DEFAULT_APPLICATION_ID");
	ck_assert_int_eq(count_of(captured, "VMA_APPLICATION_ID"), 1);
	ck_assert_ptr_nonnull(strstr(captured, "is too long (at most 255); using the default"));

	/* The longest value that fits is accepted whole. */
	long_id[CFG_NAME_SIZE - 1] = '\0';
	env_clear();
	env_set("VMA_APPLICATION_ID", long_id);
	ck_assert_int_eq(load(&p), 0);
	ck_assert_uint_eq(strlen(p.application_id), CFG_NAME_SIZE - 1);
}
END_TEST

START_TEST(test_several_bad_values_counted)
{
	struct cfg_params p;
	env_set("VMA_RX_POLL", "banana");
	env_set("VMA_MTU", "-5");
	env_set("VMA_TX_BUFS", "1000");   /* fine */
	env_set("VMA_BF", "maybe");
	ck_assert_int_eq(load(&p), 3);
	ck_assert_int_eq(p.tx_bufs, 1000);
	ck_assert_int_eq(count_of(captured, "using the default"), 3);
}
END_TEST

/* ---- VMA_SPEC ---- */

START_TEST(test_spec_latency_applies)
{
	struct cfg_params p;
	env_set("VMA_SPEC", "latency");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.spec, CFG_SPEC_LATENCY);
	ck_assert_int_eq(p.rx_poll, -1);
	ck_assert_int_eq(p.select_poll, -1);
	ck_assert_int_eq(p.tx_wre, 256);
	ck_assert_int_eq(p.tx_wre_batching, 4);
	ck_assert_int_eq(p.rx_wre, 256);
	ck_assert_int_eq(p.ring_dev_mem_tx, 16384);
	ck_assert_int_eq(p.thread_mode, 0);
	ck_assert_int_eq(p.mem_alloc_type, 2);
	ck_assert_int_eq(p.select_poll_os_force, 1);
	ck_assert_int_eq(p.select_poll_os_ratio, 1);
	ck_assert_int_eq(p.select_skip_os, 1);
	ck_assert_int_eq(p.cq_moderation_enable, 0);
	ck_assert_int_eq(p.tcp_nodelay, 1);
	ck_assert_str_eq(p.internal_thread_affinity, "0");
	ck_assert_int_eq(p.rx_bufs, 200000);   /* not part of the profile */
}
END_TEST

START_TEST(test_spec_explicit_variable_wins)
{
	struct cfg_params p;
	env_set("VMA_SPEC", "latency");
	env_set("VMA_RX_POLL", "500");
	env_set("VMA_THREAD_MODE", "2");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.rx_poll, 500);
	ck_assert_int_eq(p.thread_mode, 2);
	ck_assert_int_eq(p.tx_wre, 256);       /* rest of the profile still applies */
}
END_TEST

START_TEST(test_spec_bad_variable_keeps_profile_value)
{
	struct cfg_params p;
	env_set("VMA_SPEC", "latency");
	env_set("VMA_RX_POLL", "banana");
	ck_assert_int_eq(load(&p), 1);
	ck_assert_int_eq(p.rx_poll, -1);
	ck_assert_ptr_nonnull(strstr(captured, "VMA_RX_POLL='banana' is not a valid integer; using the VMA_SPEC value -1"));
}
END_TEST

START_TEST(test_spec_numeric_alias_equals_name)
{
	static const char *pairs[][2] = { { "latency", "15" }, { "ultra-latency", "10" },
					  { "LATENCY", "latency" } };
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		struct cfg_params by_name, by_alias;
		env_clear();
		env_set("VMA_SPEC", pairs[i][0]);
		ck_assert_int_eq(load(&by_name), 0);
		env_clear();
		env_set("VMA_SPEC", pairs[i][1]);
		ck_assert_int_eq(load(&by_alias), 0);
		ck_assert_int_ne(by_name.spec, CFG_SPEC_NONE);
		ck_assert_msg(!memcmp(&by_name, &by_alias, sizeof(by_name)), "%s != %s",
			      pairs[i][0], pairs[i][1]);
	}
}
END_TEST

START_TEST(test_spec_ultra_and_multi_ring)
{
	struct cfg_params p;
	env_set("VMA_SPEC", "ultra-latency");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.spec, CFG_SPEC_ULTRA_LATENCY);
	ck_assert_int_eq(p.rx_bufs, 1024);
	ck_assert_int_eq(p.progress_engine_interval, 0);
	ck_assert_int_eq(p.select_poll_os_ratio, 0);

	env_clear();
	env_set("VMA_SPEC", "multi_ring_latency");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.spec, CFG_SPEC_MULTI_RING_LATENCY);
	ck_assert_int_eq(p.ring_allocation_logic_tx, 20);
	ck_assert_int_eq(p.ring_allocation_logic_rx, 20);
	ck_assert_int_eq(p.rx_poll_on_tx_tcp, 1);
	ck_assert_int_eq(p.trigger_dummy_send_getsockname, 1);
	ck_assert_int_eq(p.tx_wre, 3000);
}
END_TEST

/* ---- values that depend on other values ---- */

START_TEST(test_log_details_follows_debug_level)
{
	struct cfg_params p;
	env_set("VMA_TRACELEVEL", "debug");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.log_details, 2);

	env_set("VMA_LOG_DETAILS", "0");   /* explicit wins */
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.log_details, 0);

	env_clear();
	env_set("VMA_TRACELEVEL", "details");   /* below debug */
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.log_details, 0);

	env_clear();
	env_set("VMA_TRACELEVEL", "fine");
	env_set("VMA_LOG_DETAILS", "7");   /* rejected: treated as not set */
	ck_assert_int_eq(load(&p), 1);
	ck_assert_int_eq(p.log_details, 2);
}
END_TEST

START_TEST(test_select_poll_os_force_sets_ratios)
{
	struct cfg_params p;
	env_set("VMA_SELECT_POLL_OS_FORCE", "1");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.select_poll_os_ratio, 1);
	ck_assert_int_eq(p.select_skip_os, 1);

	env_set("VMA_SELECT_SKIP_OS", "3");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.select_poll_os_ratio, 1);
	ck_assert_int_eq(p.select_skip_os, 3);
}
END_TEST

START_TEST(test_tcp_timer_not_below_thread_timer)
{
	struct cfg_params p;
	env_set("VMA_TIMER_RESOLUTION_MSEC", "50");
	env_set("VMA_TCP_TIMER_RESOLUTION_MSEC", "20");
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(p.tcp_timer_resolution_msec, 50);
	ck_assert_ptr_nonnull(strstr(captured, "VMA_TCP_TIMER_RESOLUTION_MSEC=20"));
}
END_TEST

/* ---- the table itself ---- */

START_TEST(test_table_is_consistent)
{
	int n = cfg_params_count();
	ck_assert_int_eq(n, 100);
	ck_assert_ptr_null(cfg_param_at(n));
	ck_assert_ptr_null(cfg_param_at(-1));
	for (int i = 0; i < n; i++) {
		const struct cfg_param_row *row = cfg_param_at(i);
		char field[128];
		ck_assert_msg(!strncmp(row->name, "VMA_", 4), "%s lacks VMA_", row->name);
		size_t len = strlen(row->name + 4);
		ck_assert_uint_lt(len, sizeof(field));
		for (size_t k = 0; k <= len; k++)
			field[k] = (char)tolower((unsigned char)row->name[4 + k]);
		ck_assert_msg(!strcmp(field, row->field), "%s has field %s", row->name, row->field);
		ck_assert_msg(cfg_param_find(row->name) == row, "%s is not unique", row->name);
		ck_assert_msg(row->title && row->title[0], "%s has no title", row->name);
		ck_assert_msg(strlen(row->description) > 30, "%s has no description", row->name);
		/* A parameter that does nothing here says why; one in effect
		 * has nothing to excuse. */
		if (row->effect == CFG_EFFECT_NONE)
			ck_assert_msg(row->effect_why && strlen(row->effect_why) > 20, "%s: no reason", row->name);
		else
			ck_assert_msg(!row->effect_why, "%s: a reason but no CFG_NO_EFFECT", row->name);
		if (row->kind == CFG_KIND_STRING) {
			ck_assert_msg(strlen(row->default_str) < row->size, "%s default too long", row->name);
			continue;
		}
		ck_assert_uint_eq(row->size, sizeof(int));
		ck_assert_msg(row->min <= row->default_int && row->default_int <= row->max,
			      "%s default %d outside [%d, %d]", row->name, row->default_int,
			      row->min, row->max);
		if (row->kind == CFG_KIND_ENUM || row->kind == CFG_KIND_NAMED) {
			ck_assert_msg(cfg_param_label(row, row->default_int) != NULL,
				      "%s default has no label", row->name);
			for (const struct cfg_label *l = row->labels; l->text; l++)
				ck_assert_msg(l->value >= row->min && l->value <= row->max,
					      "%s label %d outside range", row->name, l->value);
		}
	}
	ck_assert_ptr_null(cfg_param_find("VMA_NO_SUCH_THING"));
}
END_TEST

START_TEST(test_every_profile_setting_is_valid)
{
	for (int i = 0; i < cfg_spec_count(); i++) {
		const struct cfg_spec *spec = cfg_spec_at(i);
		ck_assert_ptr_eq(cfg_spec_find(spec->names[0]), spec);
		ck_assert_ptr_eq(cfg_spec_by_id(spec->id), spec);
		for (const struct cfg_spec_setting *s = spec->settings; s->name; s++) {
			struct cfg_params scratch;
			const struct cfg_param_row *row = cfg_param_find(s->name);
			const char *why = NULL;
			ck_assert_msg(row != NULL, "%s sets unknown %s", spec->names[0], s->name);
			ck_assert_msg(cfg_param_parse(&scratch, row, s->value, &why) == 0,
				      "%s: %s=%s %s", spec->names[0], s->name, s->value, why);
		}
	}
}
END_TEST

START_TEST(test_value_text)
{
	struct cfg_params p;
	char buf[128];
	ck_assert_int_eq(load(&p), 0);
	p.ring_allocation_logic_tx = 20;
	p.tracelevel = VLOG_DEBUG;
	p.tx_mc_loopback = 0;
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_RING_ALLOCATION_LOGIC_TX"), buf, sizeof(buf)),
			 "20 (Ring per thread)");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_TRACELEVEL"), buf, sizeof(buf)), "DEBUG");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_TX_MC_LOOPBACK"), buf, sizeof(buf)), "Disabled");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_CLOSE_ON_DUP2"), buf, sizeof(buf)), "Enabled");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_THREAD_MODE"), buf, sizeof(buf)), "Multi spin lock");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_MTU"), buf, sizeof(buf)), "0 (follow actual MTU)");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_RX_POLL"), buf, sizeof(buf)), "100000");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_SPEC"), buf, sizeof(buf)), "None");
	ck_assert_str_eq(cfg_param_value_text(&p, cfg_param_find("VMA_CONFIG_FILE"), buf, sizeof(buf)),
			 VMA_SYSCONFDIR "/libvma.conf");
}
END_TEST

/* ---- banner ---- */

static void expect_line(const char *title, const char *value, const char *name)
{
	char line[256];
	snprintf(line, sizeof(line), "%-30s %-26s [%s]", title, value, name);
	ck_assert_msg(strstr(captured, line), "banner lacks \"%s\":\n%s", line, captured);
}

START_TEST(test_banner_shows_changes_and_trace_level)
{
	struct cfg_params p;
	env_set("VMA_RX_POLL", "-1");
	env_set("VMA_RING_ALLOCATION_LOGIC_TX", "10");
	env_set("VMA_TX_MC_LOOPBACK", "0");
	env_set("VMA_THREAD_MODE", "0");
	env_set("VMA_SPEC", "multi_ring_latency");
	ck_assert_int_eq(load(&p), 0);

	capture_begin();
	cfg_params_print_banner(&p);
	capture_end();

	ck_assert_ptr_nonnull(strstr(captured, "VMA_VERSION: " PACKAGE_VERSION));
	ck_assert_ptr_nonnull(strstr(captured, "Cmd Line: "));
	ck_assert_ptr_nonnull(strstr(captured, "test_cfg_params"));
	char pid[32];
	snprintf(pid, sizeof(pid), "Pid: %5d", (int)getpid());
	ck_assert_ptr_nonnull(strstr(captured, pid));
	ck_assert_int_eq(count_of(captured, "---------------------------------------------------------------------------"), 3);

	expect_line("VMA Spec", "Multi Ring Latency", "VMA_SPEC");
	expect_line("Log Level", "INFO", "VMA_TRACELEVEL");          /* default, always shown */
	expect_line("Log File", "", "VMA_LOG_FILE");                  /* default, always shown */
	expect_line("Rx Poll Loops", "-1", "VMA_RX_POLL");
	expect_line("Ring allocation logic TX", "10 (Ring per socket)", "VMA_RING_ALLOCATION_LOGIC_TX");
	expect_line("Ring allocation logic RX", "20 (Ring per thread)", "VMA_RING_ALLOCATION_LOGIC_RX");
	expect_line("Tx MC Loopback", "Disabled", "VMA_TX_MC_LOOPBACK");
	expect_line("Thread mode", "Single", "VMA_THREAD_MODE");
	expect_line("Polling Rx on Tx TCP", "Enabled", "VMA_RX_POLL_ON_TX_TCP");

	/* In effect: nothing after the name. */
	ck_assert_ptr_nonnull(strstr(captured, "[VMA_RX_POLL]\n"));

	/* Unchanged parameters stay out. */
	ck_assert_ptr_null(strstr(captured, "[VMA_RX_BUFS]"));
	ck_assert_ptr_null(strstr(captured, "[VMA_LOG_COLORS]"));
	ck_assert_ptr_null(strstr(captured, "[VMA_CONFIG_FILE]"));
}
END_TEST

/* A changed value that does nothing here says so in the banner. */
START_TEST(test_banner_flags_parameters_without_effect)
{
	struct cfg_params p;
	env_set("VMA_BF", "0");                   /* verbs backend only */
	env_set("VMA_IPOIB", "0");                /* a verbs feature nothing implements */
	env_set("VMA_IPERF", "0");                /* no effect here */
	env_set("VMA_CQ_MODERATION_COUNT", "48"); /* verbs only, but the default: not shown */
	ck_assert_int_eq(load(&p), 0);
	ck_assert_int_eq(cfg_param_find("VMA_BF")->effect, CFG_EFFECT_VERBS_USED);
	ck_assert_int_eq(cfg_param_find("VMA_IPOIB")->effect, CFG_EFFECT_VERBS_ONLY);
	ck_assert_int_eq(cfg_param_find("VMA_IPERF")->effect, CFG_EFFECT_NONE);

	capture_begin();
	cfg_params_print_banner(&p);
	capture_end();
	expect_line("BF (Blue Flame)", "Disabled", "VMA_BF");
	ck_assert_ptr_nonnull(strstr(captured, "[VMA_BF] (verbs backend only)\n"));
	ck_assert_ptr_nonnull(strstr(captured, "[VMA_IPOIB] (no effect here)\n"));
	ck_assert_ptr_nonnull(strstr(captured, "[VMA_IPERF] (no effect here)\n"));
	ck_assert_ptr_null(strstr(captured, "[VMA_CQ_MODERATION_COUNT]"));
	/* Always-shown rows at their defaults carry no mark. */
	ck_assert_ptr_nonnull(strstr(captured, "[VMA_TRACELEVEL]\n"));
}
END_TEST

START_TEST(test_banner_quiet_below_info)
{
	struct cfg_params p;
	ck_assert_int_eq(load(&p), 0);
	vlog_set_level(VLOG_WARNING);
	capture_begin();
	cfg_params_print_banner(&p);
	capture_end();
	ck_assert_str_eq(captured, "");
}
END_TEST

START_TEST(test_markdown_mentions_every_row)
{
	char *doc = NULL;
	size_t size = 0;
	FILE *out = open_memstream(&doc, &size);
	ck_assert_ptr_nonnull(out);
	cfg_params_write_markdown(out);
	fclose(out);
	for (int i = 0; i < cfg_params_count(); i++) {
		char heading[128];
		snprintf(heading, sizeof(heading), "### %s\n", cfg_param_at(i)->name);
		ck_assert_msg(strstr(doc, heading), "no section for %s", cfg_param_at(i)->name);
	}
	ck_assert_ptr_nonnull(strstr(doc, "`VMA_SPEC=15`"));
	/* Each section says how the parameter acts here, and the table too. */
	ck_assert_ptr_nonnull(strstr(doc, "### VMA_BF\n"));
	ck_assert_ptr_nonnull(strstr(strstr(doc, "### VMA_BF\n"),
				     "- Here: in effect on the verbs backend (VMA_RING_BACKEND=verbs); no effect on xdp\n"));
	ck_assert_ptr_nonnull(strstr(strstr(doc, "### VMA_IPOIB\n"),
				     "- Here: no effect (a verbs NIC feature neither backend implements)\n"));
	ck_assert_ptr_nonnull(strstr(strstr(doc, "### VMA_IPERF\n"), "- Here: no effect: the multi-threaded iperf"));
	ck_assert_ptr_nonnull(strstr(strstr(doc, "### VMA_RX_POLL\n"), "- Here: in effect\n"));
	ck_assert_ptr_nonnull(strstr(doc, "| [`VMA_BF`](#vma_bf) | boolean | Enabled | 0 or 1 | verbs only |"));
	ck_assert_ptr_nonnull(strstr(doc, "| [`VMA_IPOIB`](#vma_ipoib) | boolean | Enabled | 0 or 1 | no effect |"));
	ck_assert_ptr_nonnull(strstr(doc, "| [`VMA_RX_POLL`](#vma_rx_poll) | integer | 100000 | -1 to 100000000 | yes |"));
	ck_assert_ptr_nonnull(strstr(doc, "| `VMA_RX_POLL` | -1 | 100000 |"));
	free(doc);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cfg_params");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_defaults_match_documentation);
	tcase_add_test(tc, test_null_getenv_gives_defaults);
	tcase_add_test(tc, test_valid_values_parse);
	tcase_add_test(tc, test_tracelevel_names_and_numbers);
	tcase_add_test(tc, test_choice_by_label);
	tcase_add_loop_test(tc, test_bad_value_keeps_default, 0,
			    (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
	tcase_add_test(tc, test_bad_value_message_exact);
	tcase_add_test(tc, test_too_long_string_keeps_default);
	tcase_add_test(tc, test_several_bad_values_counted);
	tcase_add_test(tc, test_spec_latency_applies);
	tcase_add_test(tc, test_spec_explicit_variable_wins);
	tcase_add_test(tc, test_spec_bad_variable_keeps_profile_value);
	tcase_add_test(tc, test_spec_numeric_alias_equals_name);
	tcase_add_test(tc, test_spec_ultra_and_multi_ring);
	tcase_add_test(tc, test_log_details_follows_debug_level);
	tcase_add_test(tc, test_select_poll_os_force_sets_ratios);
	tcase_add_test(tc, test_tcp_timer_not_below_thread_timer);
	tcase_add_test(tc, test_table_is_consistent);
	tcase_add_test(tc, test_every_profile_setting_is_valid);
	tcase_add_test(tc, test_value_text);
	tcase_add_test(tc, test_banner_shows_changes_and_trace_level);
	tcase_add_test(tc, test_banner_flags_parameters_without_effect);
	tcase_add_test(tc, test_banner_quiet_below_info);
	tcase_add_test(tc, test_markdown_mentions_every_row);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
