/* fd -> socket object. STUB until the interposition layer lands. */
#ifndef VMA_SOCK_SOCK_FD_TABLE_H
#define VMA_SOCK_SOCK_FD_TABLE_H
struct sock_obj;
#endif
