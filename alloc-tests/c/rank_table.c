/* One rank of a job of 4 processes started by symheap-run that forms its communicator from a
 * rank table (HcclCommInitClusterInfo / HcclCommInitClusterInfoConfig), after checking that
 * every fault of the table or the call gets CANN's code. argv[1] is a directory that holds
 * rank_table.json (2 servers of 2 devices in 2 SuperPoDs: rank r on server r / 2, device r % 2)
 * and one faulty table per case below. Exits 0 on success; any difference prints itself and
 * exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <acl/acl.h>
#include <hccl/hccl.h>

static int rank_id = -1;
static const char *dir = NULL;

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
                    aclGetRecentErrMsg());                                                 \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* The path of `name` in the test's directory. */
static const char *table(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Checks that `got`, the code of the call `what`, is `want`. */
static void expect(HcclResult got, HcclResult want, const char *what)
{
    if (got != want) {
        fprintf(stderr, "rank %d: %s returned %d, CANN returns %d (%s)\n", rank_id, what, got,
                want, aclGetRecentErrMsg());
        exit(1);
    }
}

/* HcclCommInitClusterInfo of table `name` as `rank` must fail with `want`. */
static void refused(const char *name, uint32_t rank, HcclResult want)
{
    HcclComm comm = NULL;
    char what[256];
    snprintf(what, sizeof what, "HcclCommInitClusterInfo(%s, %u)", name, rank);
    expect(HcclCommInitClusterInfo(table(name), rank, &comm), want, what);
}

int main(int argc, char **argv)
{
    const char *rank_env = getenv("SYMHEAP_RANK");
    if (argc != 2 || rank_env == NULL) {
        fprintf(stderr, "usage: run as 4 ranks under symheap-run: rank_table DIR\n");
        return 1;
    }
    dir = argv[1];
    rank_id = atoi(rank_env);
    const uint32_t rank = (uint32_t)rank_id;
    const int32_t device = rank_id % 2;
    HcclComm comm = NULL;

    /* No device yet: HCCL_E_RUNTIME, whatever the table. */
    expect(HcclCommInitClusterInfo(table("rank_table.json"), rank, &comm), HCCL_E_RUNTIME,
           "HcclCommInitClusterInfo before aclrtSetDevice");
    /* The device the table does not give this rank. */
    ACLCHECK(aclrtSetDevice(1 - device));
    refused("rank_table.json", rank, HCCL_E_UNAVAIL);
    ACLCHECK(aclrtResetDevice(1 - device));
    ACLCHECK(aclrtSetDevice(device));

    expect(HcclCommInitClusterInfo(NULL, rank, &comm), HCCL_E_PTR, "a NULL clusterInfo");
    expect(HcclCommInitClusterInfo(table("rank_table.json"), rank, NULL), HCCL_E_PTR,
           "a NULL comm");
    expect(HcclCommInitClusterInfoConfig(table("rank_table.json"), rank, NULL, &comm),
           HCCL_E_PTR, "a NULL config");
    /* Files that cannot be loaded. */
    refused("missing.json", rank, HCCL_E_INTERNAL);
    refused("not_json.json", rank, HCCL_E_INTERNAL);
    refused("rank_table.txt", rank, HCCL_E_INTERNAL);
    refused("no_status.json", rank, HCCL_E_INTERNAL);
    /* Tables CANN's parser refuses. */
    refused("version_3.json", rank, HCCL_E_NOT_SUPPORT);
    refused("no_server_list.json", rank, HCCL_E_NOT_FOUND);
    refused("no_rank_id.json", rank, HCCL_E_NOT_FOUND);
    refused("server_count_3.json", rank, HCCL_E_PARA);
    refused("numeric_rank_id.json", rank, HCCL_E_PARA);
    refused("duplicate_server.json", rank, HCCL_E_PARA);
    refused("duplicate_device_ip.json", rank, HCCL_E_PARA);
    refused("device_16.json", rank, HCCL_E_PARA);
    refused("super_pod_unknown_server.json", rank, HCCL_E_NOT_FOUND);
    refused("super_device_id_twice.json", rank, HCCL_E_PARA);
    /* This rank's place: a rank beyond the table, and rank ids 0, 1, 3, 3 (rank 2's place holds
     * 3: HCCL_E_UNAVAIL; the other ranks pass their own checks, then the ids are not 0..4). */
    refused("rank_table.json", 4, HCCL_E_PARA);
    refused("rank_2_missing.json", rank, rank == 2 ? HCCL_E_UNAVAIL : HCCL_E_PARA);

    /* The communicator of all 4 ranks, half of them through the config call. */
    if (rank % 2 == 0) {
        HCCLCHECK(HcclCommInitClusterInfo(table("rank_table.json"), rank, &comm));
    } else {
        HcclCommConfig config;
        HcclCommConfigInit(&config);
        HCCLCHECK(HcclCommInitClusterInfoConfig(table("rank_table.json"), rank, &config, &comm));
    }
    /* One rank-table communicator per device. */
    HcclComm again = NULL;
    expect(HcclCommInitClusterInfo(table("rank_table.json"), rank, &again), HCCL_E_UNAVAIL,
           "a second HcclCommInitClusterInfo on the device");
    uint32_t size = 0, got = 0;
    HCCLCHECK(HcclGetRankSize(comm, &size));
    HCCLCHECK(HcclGetRankId(comm, &got));
    if (size != 4 || got != rank) {
        fprintf(stderr, "rank %d: rank %u of %u\n", rank_id, got, size);
        return 1;
    }
    const uint64_t count = 256;
    void *buf = NULL;
    aclrtStream stream = NULL;
    float host[256];
    for (uint64_t i = 0; i < count; i++) {
        host[i] = (float)(rank + 1) * (float)i;
    }
    ACLCHECK(aclrtMalloc(&buf, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST));
    ACLCHECK(aclrtMemcpy(buf, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE));
    ACLCHECK(aclrtCreateStream(&stream));
    HCCLCHECK(HcclAllReduce(buf, buf, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    ACLCHECK(aclrtSynchronizeStream(stream));
    ACLCHECK(aclrtMemcpy(host, sizeof host, buf, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST));
    for (uint64_t i = 0; i < count; i++) {
        if (host[i] != 10.0f * (float)i) {
            fprintf(stderr, "rank %d: element %lu is %f, not %f\n", rank_id, (unsigned long)i,
                    host[i], 10.0f * (float)i);
            return 1;
        }
    }
    ACLCHECK(aclrtDestroyStream(stream));
    ACLCHECK(aclrtFree(buf));
    HCCLCHECK(HcclCommDestroy(comm));
    ACLCHECK(aclrtResetDevice(device));
    printf("rank %d: rank table checks and AllReduce passed\n", rank_id);
    return 0;
}
