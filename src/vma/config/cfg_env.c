/* See cfg_env.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "config/cfg_env.h"
#include "log/vlog.h"

extern char **environ;

bool cfg_env_is_secure(void)
{
	return getauxval(AT_SECURE) != 0;
}

const char *cfg_env_get(const char *name)
{
	return secure_getenv(name);
}

int cfg_env_ignored_count(bool secure, char *const *envp)
{
	int count = 0;
	for (size_t i = 0; secure && envp && envp[i]; i++)
		if (!strncmp(envp[i], "VMA_", 4) && strchr(envp[i], '='))
			count++;
	return count;
}

int cfg_env_warn_ignored(const char *config_file)
{
	int count = cfg_env_ignored_count(cfg_env_is_secure(), environ);
	if (count)
		vlog_warn("this program runs with raised privileges (set-user-ID, set-group-ID or file "
			  "capabilities): its %d VMA_* environment variable%s ignored and the defaults "
			  "apply, with the rules of %s", count, count == 1 ? " is" : "s are",
			  config_file && config_file[0] ? config_file : "no libvma.conf");
	return count;
}
