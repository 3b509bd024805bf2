/* llmbus-kernel-bench --kernel TYPE --stream: how fast the forward's decode matmul streams a
 * weight from DRAM, beside a plain read of the same bytes by the same threads.
 *
 * A random ROWSxCOLS weight of TYPE (kernel_only.h's fill) packed by cpu_pack_weight into 2 MiB
 * pages (MADV_HUGEPAGE, as model/forward/forward_pack.c packs), copied until the copies
 * together hold at least 3x the L3 (sysfs) and at least 2 copies, so that every call reads a
 * copy that the earlier calls pushed out of the caches. Then `passes` rounds of three timed
 * events on a pool of `threads` threads (cpu_ctx_create's, the forward's): cpu_matmul of
 * `rows` activation rows (the decode path for 1-3 rows: chunks of ~128 KiB of weight), a read
 * of a copy in 128 KiB chunks claimed from the same pool (the matmul's walk without its
 * arithmetic), and a read of a copy in one contiguous slice per thread (one sequential stream
 * each); each event on the next copy in turn. Prints the fastest and the median of each as
 * GB/s of packed weight bytes, the matmul's over each read's (also the median of the rounds'
 * paired ratios, robust to load that comes and goes), the huge-page share of the copies
 * (/proc/self/smaps) and the load average.
 */
#ifndef LLB_CMD_KERNEL_STREAM_H
#define LLB_CMD_KERNEL_STREAM_H

#include "cmd/bench/kernel_only.h"

/* Runs the mode with o's type, shape, rows and passes on `threads` threads (1..256), printing to
 * stdout. Returns the process exit code: 0, 1 (no memory, a failed pack or matmul) or 2 (an
 * unknown type, a bad shape or an option out of range, with a message naming it). */
int kernel_stream_run(const struct kernel_only_options *o, int threads);

#endif
