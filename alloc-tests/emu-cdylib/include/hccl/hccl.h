/* Declarations written the way CANN's hccl/hccl.h declares them (prototypes as in the public
 * header torch_npu vendors under third_party/hccl/inc/hccl/hccl.h). Only what
 * hccl_surface.cpp uses. */
#ifndef HCCL_H_
#define HCCL_H_

#include <stdbool.h>
#include <string.h>

#include <acl/acl.h>
#include <hccl/hccl_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills `config` with the defaults of version 11, as CANN's inline HcclCommConfigInit does. */
static inline void HcclCommConfigInit(HcclCommConfig *config)
{
    CommConfigInfo *info = (CommConfigInfo *)config;
    memset(config, 0, sizeof(*config));
    info->size = sizeof(HcclCommConfig);
    info->magicWord = HCCL_COMM_CONFIG_MAGIC_WORD;
    info->version = HCCL_COMM_CONFIG_VERSION;
    info->reserved = 0;
    config->hcclBufferSize = HCCL_COMM_DEFAULT_BUFFSIZE;
    config->hcclDeterministic = HCCL_COMM_DEFAULT_DETERMINISTIC;
    config->hcclRdmaTrafficClass = 0xffffffff;
    config->hcclRdmaServiceLevel = 0xffffffff;
    config->hcclQos = 0xffffffff;
    config->hcclChannelSqDepth = 0xffffffff;
    config->hcclExecTimeOut = -1;
    config->hcclSymWinMaxMemSizePerRank = 16;
}

extern HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo,
                                             uint32_t rank, const HcclCommConfig *config,
                                             HcclComm *comm);

extern HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
extern HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                       HcclComm *comm);
extern HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms);
extern HcclResult HcclCommDestroy(HcclComm comm);
extern HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
extern HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
extern HcclResult HcclGetCommName(HcclComm comm, char *commName);
extern HcclResult HcclCreateSubCommConfig(HcclComm *comm, uint32_t rankNum, uint32_t *rankIds,
                                          uint64_t subCommId, uint32_t subCommRankId,
                                          HcclCommConfig *config, HcclComm *subComm);
extern const char *HcclGetErrorString(HcclResult code);

extern HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                                HcclReduceOp op, HcclComm comm, aclrtStream stream);
extern HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount,
                                HcclDataType dataType, HcclComm comm, aclrtStream stream);
extern HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
                                HcclComm comm, aclrtStream stream);
extern HcclResult HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf,
                                 const void *recvCounts, const void *recvDispls,
                                 HcclDataType dataType, HcclComm comm, aclrtStream stream);
extern HcclResult HcclReduceScatterV(void *sendBuf, const void *sendCounts, const void *sendDispls,
                                     void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                                     HcclReduceOp op, HcclComm comm, aclrtStream stream);
extern HcclResult HcclAlltoAllV(const void *sendBuf, const void *sendCounts, const void *sdispls,
                                HcclDataType sendType, const void *recvBuf, const void *recvCounts,
                                const void *rdispls, HcclDataType recvType, HcclComm comm,
                                aclrtStream stream);
/* sendCountMatrix: rankSize x rankSize uint64_t, row = sender, column = receiver; every rank's
 * blocks are packed in rank order in sendBuf and recvBuf. */
extern HcclResult HcclAlltoAllVC(const void *sendBuf, const void *sendCountMatrix,
                                 HcclDataType sendType, const void *recvBuf, HcclDataType recvType,
                                 HcclComm comm, aclrtStream stream);
extern HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                             HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream);
extern HcclResult HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
                              HcclDataType dataType, uint32_t root, HcclComm comm,
                              aclrtStream stream);
extern HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                           HcclComm comm, aclrtStream stream);
extern HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                           HcclComm comm, aclrtStream stream);
extern HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum, HcclComm comm,
                                    aclrtStream stream);

extern HcclResult HcclCommSetMemoryRange(HcclComm comm, void *baseVirPtr, size_t size,
                                         size_t alignment, uint64_t flags);
extern HcclResult HcclCommUnsetMemoryRange(HcclComm comm, void *baseVirPtr);
extern HcclResult HcclCommActivateCommMemory(HcclComm comm, void *virPtr, size_t size,
                                             size_t offset, aclrtDrvMemHandle handle,
                                             uint64_t flags);
extern HcclResult HcclCommDeactivateCommMemory(HcclComm comm, void *virPtr);

/* The symmetric-window API (CANN 9.x, libhcomm), as hicann/hcomm's
 * docs/zh/api_ref/comm_mgr_c/HcclCommSymWinRegister.md declare it; the torch_npu copy of hccl.h
 * predates it. */
extern HcclResult HcclCommSymWinRegister(HcclComm comm, void *addr, uint64_t size,
                                         HcclCommSymWindow *winHandle, uint32_t flag);
extern HcclResult HcclCommSymWinDeregister(HcclCommSymWindow winHandle);
extern HcclResult HcclCommSymWinGet(HcclComm comm, void *ptr, size_t size,
                                    HcclCommSymWindow *winHandle, size_t *offset);

/* Grouped calls, communicators by name and the process-wide configuration, declared as
 * hicann/hcomm's include/hccl/hccl_comm.h declares them (CANN's hccl.h includes hccl_comm.h).
 * HcclSymWinGetPeerPointer is in hccl/hccl_sym_win.h. */
extern HcclResult HcclGroupStart();
extern HcclResult HcclGroupEnd();
extern HcclResult HcclGroupStatusGet(bool *isGroupEnabled);
extern HcclResult HcclCommGetHandleWithName(const char *commName, HcclComm *comm);
extern HcclResult HcclSetConfig(HcclConfig config, HcclConfigValue configValue);
extern HcclResult HcclGetConfig(HcclConfig config, HcclConfigValue *configValue);

/* Rank tables, as hicann/hcomm's include/hccl/hccl_comm.h declares them: clusterInfo is the
 * path of a rank-table JSON file (at most 4096 bytes with its NUL), rank this rank's rank_id in
 * it (docs/zh/api_ref/comm_mgr_c/HcclCommInitClusterInfo.md). */
extern HcclResult HcclCommInitClusterInfo(const char *clusterInfo, uint32_t rank, HcclComm *comm);
extern HcclResult HcclCommInitClusterInfoConfig(const char *clusterInfo, uint32_t rank,
                                                HcclCommConfig *config, HcclComm *comm);

/* exported all along, and declared as hicann/hccl's include/hccl.h and
 * hicann/hcomm's include/hccl/hccl_comm.h declare them. */
extern HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
                                    HcclDataType dataType, HcclReduceOp op, HcclComm comm,
                                    aclrtStream stream);
extern HcclResult HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType sendType,
                               const void *recvBuf, uint64_t recvCount, HcclDataType recvType,
                               HcclComm comm, aclrtStream stream);
extern HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);
extern HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError);
/* A number above every HcclCommConfigCapability value the library supports (see
 * hccl_types.h). */
extern uint32_t HcclGetCommConfigCapability();

#ifdef __cplusplus
}
#endif

#endif
