/* The rank-graph queries of CANN's hccl/hccl_rank_graph.h (hicann/hcomm include/hccl) that the
 * emulator implements: which topology layers a communicator has (0: the rank's server, 1: its
 * SuperPoD when there are several servers, 2: every rank when there are several SuperPoDs, as
 * HCCL builds them for an Atlas A3) and which ranks each holds. The lists returned belong to
 * the communicator. The link, endpoint and topology-instance queries are not declared here:
 * the emulator does not implement them. */
#ifndef HCCL_RANK_GRAPH_H
#define HCCL_RANK_GRAPH_H

#include <stdint.h>

#include <hccl/hccl_types.h>

#ifdef __cplusplus
extern "C" {
#endif

extern HcclResult HcclRankGraphGetLayers(HcclComm comm, uint32_t **netLayers, uint32_t *netLayerNum);

extern HcclResult HcclRankGraphGetRanksByLayer(HcclComm comm, uint32_t netLayer, uint32_t **ranks, uint32_t *rankNum);

extern HcclResult HcclRankGraphGetRankSizeByLayer(HcclComm comm, uint32_t netLayer, uint32_t *rankNum);

extern HcclResult
HcclRankGraphGetInstSizeListByLayer(HcclComm comm, uint32_t netLayer, uint32_t **instSizeList, uint32_t *listSize);

#ifdef __cplusplus
}
#endif

#endif
