/* SPDX-License-Identifier: GPL-2.0 */
/* User-space stacks of traced processes: their mappings, kept while they live, and ELF symbols. */
#ifndef FSTRACE_USTACK_H
#define FSTRACE_USTACK_H

#include <stdbool.h>
#include <linux/types.h>

#include "jbuf.h"

/* read the executable mappings of a process the first time it is seen (it must still be running) */
void ustack_note_process(__u32 tgid, const char *comm);
/* append the user frames of stack id (root first, ';'-separated) to out; false if none recorded */
bool ustack_fold(int stacks_fd, __s32 id, __u32 tgid, struct jbuf *out);

#endif
