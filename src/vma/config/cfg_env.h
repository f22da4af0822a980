/* Where the library reads its VMA_* parameters from, and whether it may.
 *
 * A program whose exec raised its privileges (set-user-ID, set-group-ID,
 * file capabilities: the kernel sets AT_SECURE) runs on behalf of a user who
 * does not hold them, and that user wrote its environment. VMA_* variables
 * name files (VMA_LOG_FILE, VMA_STATS_FILE, VMA_CONFIG_FILE, the statistics
 * directory) that such a program would open with its privileges, so there
 * they are ignored: the defaults apply, and one warning says so. */
#ifndef VMA_CONFIG_CFG_ENV_H
#define VMA_CONFIG_CFG_ENV_H

#include <stdbool.h>

/* True when this process was started with raised privileges (AT_SECURE). */
bool cfg_env_is_secure(void);

/* getenv for the parameter table: secure_getenv, i.e. NULL for every name
 * when cfg_env_is_secure(). */
const char *cfg_env_get(const char *name);

/* The number of VMA_* variables in envp that a process with secure set
 * ignores (0 when secure is false). */
int cfg_env_ignored_count(bool secure, char *const *envp);

/* Warns once, through the logger, when VMA_* variables were ignored
 * (config_file: the libvma.conf read instead). Returns how many were. */
int cfg_env_warn_ignored(const char *config_file);

#endif
