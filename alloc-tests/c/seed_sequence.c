/* The call sequence of the HcclCommSymWinGet / HcclCommSymWinRegister documents (shared/seeds/),
 * as one rank of a job started by symheap-run: rank 0 makes the root info and publishes it in
 * the file SYMHEAP_ROOT_INFO names, every rank joins, registers a symmetric window, finds it
 * again, runs an AllReduce directly on it, checks the sum and tears everything down. Exits 0
 * on success; any failed call prints itself and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <acl/acl.h>
#include <hccl/hccl.h>

static int rank_id = -1;

#define ACLCHECK(call)                                                                     \
    do {                                                                                   \
        aclError e_ = (call);                                                              \
        if (e_ != ACL_SUCCESS) {                                                           \
            fprintf(stderr, "rank %d: %s failed: %d\n", rank_id, #call, e_);               \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define HCCLCHECK(call)                                                                    \
    do {                                                                                   \
        HcclResult e_ = (call);                                                            \
        if (e_ != HCCL_SUCCESS) {                                                          \
            fprintf(stderr, "rank %d: %s failed: %d (%s)\n", rank_id, #call, e_,           \
                    HcclGetErrorString(e_));                                               \
            exit(1);                                                                       \
        }                                                                                  \
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

/* Rank 0: write the root info beside `path`, then link it into place (readers never see half
 * a file). The others: wait for the whole file. */
static void share_root_info(HcclRootInfo *root, const char *path)
{
    if (rank_id == 0) {
        HCCLCHECK(HcclGetRootInfo(root));
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (f == NULL || fwrite(root, sizeof *root, 1, f) != 1 || fclose(f) != 0 ||
            link(tmp, path) != 0) {
            perror("publishing the root info");
            exit(1);
        }
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
    fprintf(stderr, "rank %d: no root info at %s\n", rank_id, path);
    exit(1);
}

int main(void)
{
    rank_id = atoi(env("SYMHEAP_RANK"));
    uint32_t rankSize = (uint32_t)atoi(env("SYMHEAP_WORLD_SIZE"));
    uint32_t rankId = (uint32_t)rank_id;
    ACLCHECK(aclInit(NULL));
    ACLCHECK(aclrtSetDevice(rank_id));

    HcclCommConfig config;
    HcclCommConfigInit(&config);
    config.hcclSymWinMaxMemSizePerRank = 10;

    int32_t deviceId;
    ACLCHECK(aclrtGetDevice(&deviceId));
    HcclRootInfo rootInfo;
    share_root_info(&rootInfo, env("SYMHEAP_ROOT_INFO"));

    HcclComm hcclComm;
    HCCLCHECK(HcclCommInitRootInfoConfig(rankSize, &rootInfo, rankId, &config, &hcclComm));
    uint32_t size = 0, id = 99;
    HCCLCHECK(HcclGetRankSize(hcclComm, &size));
    HCCLCHECK(HcclGetRankId(hcclComm, &id));
    if (size != rankSize || id != rankId) {
        fprintf(stderr, "rank %d: the communicator says rank %u of %u\n", rank_id, id, size);
        return 1;
    }

    aclrtStream stream;
    ACLCHECK(aclrtCreateStream(&stream));

    aclrtPhysicalMemProp prop;
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.id = (uint32_t)deviceId;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    prop.reserve = 0;

    size_t granularity;
    ACLCHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                                              &granularity));
    size_t want = 2 * 1024 * 1024;
    size_t allocSize = (want + granularity - 1) / granularity * granularity;

    void *virPtr;
    ACLCHECK(aclrtReserveMemAddress(&virPtr, allocSize, 0, NULL, 1));
    aclrtDrvMemHandle memHandle;
    ACLCHECK(aclrtMallocPhysical(&memHandle, allocSize, &prop, 0));
    ACLCHECK(aclrtMapMem(virPtr, allocSize, 0, memHandle, 0));

    HcclCommSymWindow symWin;
    HCCLCHECK(HcclCommSymWinRegister(hcclComm, virPtr, allocSize, &symWin, 1));
    HcclCommSymWindow tempWin;
    size_t offset = 1;
    HCCLCHECK(HcclCommSymWinGet(hcclComm, virPtr, allocSize, &tempWin, &offset));
    if (tempWin != symWin || offset != 0) {
        fprintf(stderr, "rank %d: HcclCommSymWinGet found another window\n", rank_id);
        return 1;
    }

    /* An AllReduce on the window itself: rank r contributes r + i to element i. */
    enum { COUNT = 1024 };
    static float host[COUNT];
    for (int i = 0; i < COUNT; i++) {
        host[i] = (float)(rank_id + i);
    }
    ACLCHECK(aclrtMemcpy(virPtr, allocSize, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE));
    void *out = (char *)virPtr + allocSize / 2;
    HCCLCHECK(HcclAllReduce(virPtr, out, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, hcclComm,
                            stream));
    ACLCHECK(aclrtSynchronizeStream(stream));
    ACLCHECK(aclrtMemcpy(host, sizeof host, out, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST));
    float ranks = (float)rankSize;
    for (int i = 0; i < COUNT; i++) {
        float expected = ranks * (float)i + ranks * (ranks - 1) / 2;
        if (host[i] != expected) {
            fprintf(stderr, "rank %d: element %d is %f, not %f\n", rank_id, i, host[i],
                    expected);
            return 1;
        }
    }

    HCCLCHECK(HcclCommSymWinDeregister(symWin));
    ACLCHECK(aclrtUnmapMem(virPtr));
    ACLCHECK(aclrtFreePhysical(memHandle));
    ACLCHECK(aclrtReleaseMemAddress(virPtr));
    ACLCHECK(aclrtDestroyStream(stream));
    HCCLCHECK(HcclCommDestroy(hcclComm));
    ACLCHECK(aclrtResetDevice(deviceId));
    ACLCHECK(aclFinalize());
    printf("rank %d of %u: window %p at offset %zu, AllReduce of %d floats correct\n", rank_id,
           rankSize, symWin, offset, COUNT);
    return 0;
}
