/* STUB until the interposition layer lands. */
#ifndef VMA_REDIRECT_REDIRECT_H
#define VMA_REDIRECT_REDIRECT_H
void redirect_resolve_originals(void);
#endif
