/* STUB */
#include "sock/sock_fd_table.h"
