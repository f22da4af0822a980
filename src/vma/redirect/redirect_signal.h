/* sigaction and signal (redirect_signal.c): libvma keeps its own handler in
 * front of the application's, for the cleanup of VMA_HANDLE_SIGINTR and the
 * per-thread counts of os/os_signal.h. */
#ifndef VMA_REDIRECT_REDIRECT_SIGNAL_H
#define VMA_REDIRECT_REDIRECT_SIGNAL_H

#include "os/os_signal.h"

/* Installs libvma's handler for the signals whose default action ends the
 * process (library init). */
void redirect_signal_init(void);

#endif
