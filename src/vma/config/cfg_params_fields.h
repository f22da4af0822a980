/* STUB until the parameter table lands: struct cfg_params. */
#ifndef VMA_CONFIG_CFG_PARAMS_FIELDS_H
#define VMA_CONFIG_CFG_PARAMS_FIELDS_H
struct cfg_params {
	int tracelevel;
	int log_details;
	int log_colors;
	char log_file[4096];
	char config_file[4096];
	char application_id[256];
	int handle_sigintr;
	int close_on_dup2;
};
#endif
