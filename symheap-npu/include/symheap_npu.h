/* symheap-npu: torch_npu's pluggable allocator as a C library (libsymheap_npu.so).
 *
 * Device memory comes from symmetric segments (reserve + physical memory + map, a multiple of
 * the device granularity) carved by symheap's deterministic heap into 512-byte-aligned blocks.
 * After symheap_npu_attach(comm), every segment is a symmetric window of comm: an HCCL
 * collective on any pointer handed out finds it with HcclCommSymWinGet, at the same offset on
 * every rank that made the same calls. See the crate docs (symheap-npu/src/lib.rs) for the
 * environment variables (SYMHEAP_NPU_SEGMENT_BYTES, SYMHEAP_NPU_LIMIT_BYTES). */
#ifndef SYMHEAP_NPU_H
#define SYMHEAP_NPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hccl/hccl.h> /* HcclComm, HcclResult; acl/acl.h for aclrtStream */

#ifdef __cplusplus
extern "C" {
#endif

/* torch_npu's alloc: size bytes on device for work on stream. NULL for size 0 or on failure
 * (symheap_npu_last_error says why). A new segment is registered in every attached
 * communicator: a collective step every rank reaches at the same call. */
void *symheap_npu_malloc(ssize_t size, int device, aclrtStream stream);
/* torch_npu's free: back to the heap at once; a later user on another stream waits (on the
 * device) for the work stream had queued. size and device are unused. */
void symheap_npu_free(void *ptr, size_t size, int device, aclrtStream stream);

/* The optional hooks. init: torch_npu passes the device count; loads CANN. reset
 * (empty_cache; the flag is check_error): releases idle segments registered nowhere.
 * set_memory_fraction: caps the segments at fraction of the device's memory. reset_peak:
 * the peak statistic starts over. */
void symheap_npu_init(int device_count);
void symheap_npu_reset(bool check_error);
void symheap_npu_set_memory_fraction(double fraction, int device);
void symheap_npu_reset_peak(int device);

/* Collective. Registers every segment (and every later one) as a window of comm, an
 * existing communicator that stays the caller's. Fails on every rank alike, with
 * HCCL_E_INTERNAL and "ranks [..] made different allocation calls from rank 0 (...)", when
 * the ranks' calls so far differ. Attaching the same communicator again does nothing. */
HcclResult symheap_npu_attach(HcclComm comm);
/* Collective. Deregisters every segment from comm and forgets it. */
HcclResult symheap_npu_detach(HcclComm comm);
/* Collective. Compares the ranks' calls on every attached communicator, as attach does. */
HcclResult symheap_npu_check(void);

typedef struct {
    uint64_t segments;             /* segments held */
    uint64_t reserved_bytes;       /* bytes of those segments */
    uint64_t allocated_bytes;      /* bytes handed out, each rounded up to 512 */
    uint64_t peak_allocated_bytes; /* since the start or symheap_npu_reset_peak */
    uint64_t live_allocations;     /* blocks handed out and not freed */
    uint64_t registrations;        /* windows registered, all communicators */
    uint64_t communicators;        /* communicators attached */
    uint64_t limit_bytes;          /* the most the segments may hold; UINT64_MAX: no limit */
} symheap_npu_stats_t;

/* 0, or -1 (out is NULL, or the library could not load CANN). */
int symheap_npu_stats(symheap_npu_stats_t *out);
/* The calling thread's last error, or NULL: valid until its next call into the library. */
const char *symheap_npu_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* SYMHEAP_NPU_H */
