/* Process-wide start and stop of libvma. */
#ifndef VMA_VMA_MAIN_H
#define VMA_VMA_MAIN_H
/* Lazy, once, thread-safe: loads parameters, logger, libvma.conf and prints
 * the banner. Any interposed call may trigger it; calls made while it runs
 * (from the same thread) pass straight to libc. */
void vma_init_once(void);
#endif
