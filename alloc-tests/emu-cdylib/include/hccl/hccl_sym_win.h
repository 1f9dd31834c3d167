/* Declarations written the way hicann/hcomm's include/hccl/hccl_sym_win.h declares them (its
 * <securec.h> and <arpa/inet.h> left out: nothing here needs them). */
#ifndef HCCL_SYM_WIN_H
#define HCCL_SYM_WIN_H

#include <stddef.h>
#include <stdint.h>

#include <acl/acl_rt.h>
#include <hccl/hccl_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The address of rank peerRank's byte `offset` of a registered
 * window. Device-side only in CANN (AI CPU kernels, AI CPU expansion); on the emulator it
 * answers inside a host function queued on a stream (aclrtLaunchHostFunc), its device code. */
extern HcclResult HcclSymWinGetPeerPointer(HcclCommSymWindow winHandle, size_t offset,
                                           uint32_t peerRank, void **ptr);

#ifdef __cplusplus
}
#endif

#endif
