/* A C program written for CANN that reads HCCL's rank graph (hccl/hccl_rank_graph.h) and
 * registers a symmetric window, as one rank of a job of 2 nodes x 2 NPUs in 2 SuperPoDs
 * (symheap-run --nnodes 2 --nproc-per-node 2, with SYMHEAP_EMU_NODES_PER_SUPERPOD=1): every
 * rank is on device = its local rank (LOCAL_RANK), the communicator has the layers 0 (node), 1 (SuperPoD) and 2 (across SuperPoDs),
 * HcclCommSymWinRegister answers HCCL_E_NOT_SUPPORT as CANN does across SuperPoDs, and an
 * AllReduce still sums. Exits non-zero at the first difference. */
#define _POSIX_C_SOURCE 200809L
#include <acl/acl.h>
#include <hccl/hccl.h>
#include <hccl/hccl_rank_graph.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "rank %d: %s:%d: %s failed\n", g_rank, __FILE__, __LINE__, #cond); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define EXPECT(call, want)                                                                    \
    do {                                                                                      \
        int got_ = (int)(call);                                                               \
        if (got_ != (int)(want)) {                                                            \
            fprintf(stderr, "rank %d: %s:%d: %s = %d, expected %d\n", g_rank, __FILE__,       \
                    __LINE__, #call, got_, (int)(want));                                      \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static const char *env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL) {
        fprintf(stderr, "%s is not set: run under symheap-run\n", name);
        exit(1);
    }
    return v;
}

/* Rank 0 writes the root info beside `path` and links it into place; the others wait. */
static void share_root_info(HcclRootInfo *root, const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (g_rank == 0) {
        EXPECT(HcclGetRootInfo(root), HCCL_SUCCESS);
        FILE *f = fopen(tmp, "wb");
        CHECK(f != NULL && fwrite(root, sizeof *root, 1, f) == 1 && fclose(f) == 0);
        CHECK(link(tmp, path) == 0);
        unlink(tmp);
        return;
    }
    for (int tries = 0; tries < 60000; tries++) {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size == (off_t)sizeof *root) {
            FILE *f = fopen(path, "rb");
            if (f != NULL && fread(root, sizeof *root, 1, f) == 1) {
                fclose(f);
                return;
            }
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    fprintf(stderr, "rank %d: no root info at %s\n", g_rank, path);
    exit(1);
}

int main(void)
{
    g_rank = atoi(env("SYMHEAP_RANK"));
    uint32_t n = (uint32_t)atoi(env("SYMHEAP_WORLD_SIZE"));
    CHECK(n == 4);
    uint32_t node = (uint32_t)atoi(env("SYMHEAP_EMU_NODE"));
    uint32_t local = (uint32_t)atoi(env("LOCAL_RANK"));
    CHECK(node == (uint32_t)g_rank / 2 && local == (uint32_t)g_rank % 2);

    EXPECT(aclInit(NULL), ACL_SUCCESS);
    uint32_t count = 0;
    EXPECT(aclrtGetDeviceCount(&count), ACL_SUCCESS);
    CHECK(count >= 2);
    EXPECT(aclrtSetDevice((int32_t)local), ACL_SUCCESS);
    int32_t device = -1;
    EXPECT(aclrtGetDevice(&device), ACL_SUCCESS);
    CHECK(device == (int32_t)local);
    aclrtStream stream = NULL;
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);

    HcclRootInfo root;
    share_root_info(&root, env("SYMHEAP_ROOT_INFO"));
    HcclComm comm = NULL;
    EXPECT(HcclCommInitRootInfo(n, &root, (uint32_t)g_rank, &comm), HCCL_SUCCESS);

    uint32_t *layers = NULL, layer_count = 0;
    EXPECT(HcclRankGraphGetLayers(comm, &layers, &layer_count), HCCL_SUCCESS);
    CHECK(layer_count == 3 && layers[0] == 0 && layers[1] == 1 && layers[2] == 2);
    uint32_t *ranks = NULL, rank_count = 0, size = 0;
    EXPECT(HcclRankGraphGetRanksByLayer(comm, 0, &ranks, &rank_count), HCCL_SUCCESS);
    CHECK(rank_count == 2 && ranks[0] == 2 * node && ranks[1] == 2 * node + 1);
    EXPECT(HcclRankGraphGetRankSizeByLayer(comm, 2, &size), HCCL_SUCCESS);
    CHECK(size == 4);
    uint32_t *sizes = NULL, instances = 0;
    EXPECT(HcclRankGraphGetInstSizeListByLayer(comm, 1, &sizes, &instances), HCCL_SUCCESS);
    CHECK(instances == 2 && sizes[0] == 2 && sizes[1] == 2);
    EXPECT(HcclRankGraphGetRankSizeByLayer(comm, 3, &size), HCCL_E_PARA);
    EXPECT(HcclRankGraphGetLayers(comm, NULL, &layer_count), HCCL_E_PTR);

    /* A window across SuperPoDs: CANN refuses it. */
    size_t granularity = 0;
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = local;
    EXPECT(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
                                            &granularity),
           ACL_SUCCESS);
    void *va = NULL;
    aclrtDrvMemHandle phys = NULL;
    EXPECT(aclrtReserveMemAddress(&va, granularity, 0, NULL, 1), ACL_SUCCESS);
    EXPECT(aclrtMallocPhysical(&phys, granularity, &prop, 0), ACL_SUCCESS);
    EXPECT(aclrtMapMem(va, granularity, 0, phys, 0), ACL_SUCCESS);
    HcclCommSymWindow win = NULL;
    EXPECT(HcclCommSymWinRegister(comm, va, granularity, &win, 1), HCCL_E_NOT_SUPPORT);
    CHECK(win == NULL);

    /* The AllReduce stages, and sums. */
    float host[4] = {0}, want = 1 + 2 + 3 + 4;
    for (int i = 0; i < 4; i++) {
        host[i] = (float)g_rank + 1;
    }
    EXPECT(aclrtMemcpy(va, granularity, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_SUCCESS);
    void *out = (char *)va + 1024;
    EXPECT(HcclAllReduce(va, out, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream),
           HCCL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpy(host, sizeof host, out, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    for (int i = 0; i < 4; i++) {
        CHECK(host[i] == want);
    }

    EXPECT(HcclCommDestroy(comm), HCCL_SUCCESS);
    EXPECT(aclrtUnmapMem(va), ACL_SUCCESS);
    EXPECT(aclrtFreePhysical(phys), ACL_SUCCESS);
    EXPECT(aclrtReleaseMemAddress(va), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    EXPECT(aclrtResetDevice((int32_t)local), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    return 0;
}
