#!/bin/bash
# mp_procs.sh on a testbed whose veths have 4 queues: the client's kernel
# spreads flows over the server's queues by hash, as RSS does on a
# multi-queue NIC. Every scenario must stay offloaded (kernel counters
# flat): each process, and each lane, has an XSK on every queue under one
# member slot (docs/ring.md, "Multi-queue interfaces").
# Usage: mp_queues.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
MP_QUEUES=4 MP_TB_PREFIX=${MP_TB_PREFIX:-mpq} exec bash "$(dirname "$0")/mp_procs.sh" "$@"
