/* The private directories of one `llmbus serve` run: what they hold is secret (the NATS
 * passwords, the hash key) or private (the embedded nats-server's JetStream store holds the
 * prompts of requests not yet finished), so they are created 0700 under $TMPDIR (or /tmp),
 * removed when serve stops, and — since a serve that is SIGKILLed cannot remove anything — each
 * carries an owner stamp that lets the next serve remove the directories of runs whose process
 * is gone (run_dir_sweep_stale).
 *
 * Owner stamp: the file RUN_DIR_OWNER_FILE in the directory, "<pid> <start time>\n", the start
 * time being field 22 of /proc/<pid>/stat (clock ticks since boot), so a pid the kernel reused
 * for another process does not keep a dead run's directory alive.
 */
#ifndef LLB_CMD_RUN_DIR_H
#define LLB_CMD_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/status.h"

#define RUN_DIR_OWNER_FILE ".owner"

/* Creates $TMPDIR/llmbus-<kind>-XXXXXX (mkdtemp: mode 0700, a new name) with this process's
 * owner stamp, and writes its path into path[cap]. kind: a short constant ("serve",
 * "nats-auth"). Errors: IO naming the directory (mkdtemp, the stamp), INVALID_ARGUMENT when the
 * path does not fit. On error nothing is left behind. */
llb_status run_dir_create(const char *kind, char *path, size_t cap);

/* Makes `path` a private directory for state that outlives the run (serve --state-dir): creates
 * it with mode 0700, or takes an existing directory of this user and removes any group/other
 * permission from it (logged, event=state_dir_mode_fixed). Errors: IO naming the path when it
 * cannot be created, is a symbolic link or not a directory, belongs to another user, or its
 * mode cannot be changed. */
llb_status run_dir_prepare_private(const char *path);

/* Removes the directory at `path` and everything in it without following a symbolic link
 * (files are unlinked relative to their directory's descriptor); best effort, quiet. NULL or
 * "" ok. */
void run_dir_remove(const char *path);

/* Field 22 of /proc/<pid>/stat (the start time in clock ticks since boot): with the pid, what
 * tells a live owner from a reused pid; 0 when unreadable. The command name (field 2) may hold
 * spaces and ')', so fields are counted after its last ')'. */
unsigned long long run_dir_proc_start_time(pid_t pid);

/* Whether the process of an owner stamp (pid, start time) still runs. */
bool run_dir_owner_alive(pid_t pid, unsigned long long start_time);

/* Removes every $TMPDIR/llmbus-<kind>-* directory that belongs to this user, carries an owner
 * stamp, and whose owner no longer runs. A directory without a stamp, of another user, or a
 * symbolic link is left alone. Returns how many were removed; each is logged
 * (event=stale_run_dir_removed). */
int run_dir_sweep_stale(const char *kind);

/* run_dir_sweep_stale for every kind serve creates ("serve": the embedded server's ports file,
 * log and JetStream store; "nats-auth": the NATS credentials; "hash-key": the hash key), as
 * `llmbus serve` and `llmbus run` do first. Returns how many were removed. */
int run_dir_sweep_all_stale(void);

#endif
