/* The HCCL functions of CANN's 2026 headers, the way a C program written for CANN calls them: grouped calls
 * (HcclGroupStart / HcclGroupEnd / HcclGroupStatusGet), HcclCommGetHandleWithName,
 * HcclSetConfig / HcclGetConfig and HcclSymWinGetPeerPointer. It includes <hccl/hccl.h> and
 * <hccl/hccl_sym_win.h> (alloc-tests/emu-cdylib/include, declared as CANN declares them), links
 * with -lhccl -lascendcl, and checks the answer and the error code of every call.
 * alloc-tests/group_calls.rs compiles it against the emulator's library and runs it.
 *
 * Two modes:
 *   hccl_group_calls            one rank of a job started by symheap-run (SYMHEAP_RANK,
 *                               SYMHEAP_WORLD_SIZE, SYMHEAP_ROOT_INFO), on device = rank;
 *   hccl_group_calls threads N  one process and one thread driving N ranks made by
 *                               HcclCommInitAll, as CANN's group calls are meant for.
 * Exits 0 when every check passed; the first failed check prints itself and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <acl/acl.h>
#include <hccl/hccl.h>
#include <hccl/hccl_sym_win.h>

static int g_rank = -1;

static void fail(const char *what, long got, long want, int line)
{
    const char *msg = aclGetRecentErrMsg();
    fprintf(stderr, "rank %d, line %d: %s returned %ld, expected %ld (%s)\n", g_rank, line, what,
            got, want, msg != NULL ? msg : "no message");
    exit(1);
}

#define EXPECT_ACL(call, want)                                                                \
    do {                                                                                      \
        aclError e_ = (call);                                                                 \
        if (e_ != (want)) fail(#call, e_, (want), __LINE__);                                  \
    } while (0)
#define ACL_OK(call) EXPECT_ACL(call, ACL_SUCCESS)
#define EXPECT_HCCL(call, want)                                                               \
    do {                                                                                      \
        HcclResult e_ = (call);                                                               \
        if (e_ != (want)) fail(#call, e_, (want), __LINE__);                                  \
    } while (0)
#define HCCL_OK(call) EXPECT_HCCL(call, HCCL_SUCCESS)
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "rank %d, line %d: check failed: %s\n", g_rank, __LINE__, #cond); \
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

/* Rank 0 writes the root info beside `path` and links it into place; the others wait for it. */
static void share_root_info(HcclRootInfo *root, const char *path)
{
    if (g_rank == 0) {
        HCCL_OK(HcclGetRootInfo(root));
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
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

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    ACL_OK(aclrtMalloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL_OK(aclrtMemset(p, bytes, 0, bytes));
    return p;
}

static void upload(void *dev, const int32_t *host, size_t count)
{
    size_t n = count * sizeof *host;
    ACL_OK(aclrtMemcpy(dev, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE));
}

static void download(int32_t *host, const void *dev, size_t count)
{
    size_t n = count * sizeof *host;
    ACL_OK(aclrtMemcpy(host, n, dev, n, ACL_MEMCPY_DEVICE_TO_HOST));
}

/* The value rank `r` puts at element `i` of what it contributes. */
static int32_t tag(uint32_t r, uint64_t i) { return (int32_t)(r * 1000 + i + 1); }

static bool stream_idle(aclrtStream stream)
{
    aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
    ACL_OK(aclrtStreamQuery(stream, &status));
    return status == ACL_STREAM_STATUS_COMPLETE;
}

/* Group state and its codes, before any communicator exists. */
static void group_basics(void)
{
    bool open = true;
    HCCL_OK(HcclGroupStatusGet(&open));
    CHECK(!open);
    EXPECT_HCCL(HcclGroupStatusGet(NULL), HCCL_E_PTR);
    EXPECT_HCCL(HcclGroupEnd(), HCCL_E_NOT_SUPPORT); /* no HcclGroupStart before */
    HCCL_OK(HcclGroupStart());
    HCCL_OK(HcclGroupStart());
    HCCL_OK(HcclGroupStatusGet(&open));
    CHECK(open);
    HCCL_OK(HcclGroupEnd());
    HCCL_OK(HcclGroupStatusGet(&open));
    CHECK(open); /* still inside the outer group */
    HCCL_OK(HcclGroupEnd()); /* an empty group issues nothing */
    HCCL_OK(HcclGroupStatusGet(&open));
    CHECK(!open);
    EXPECT_HCCL(HcclGroupEnd(), HCCL_E_NOT_SUPPORT);
}

/* HcclSetConfig / HcclGetConfig of HCCL_DETERMINISTIC, with the variable unset. */
static void config_calls(void)
{
    HcclConfigValue v = {.value = 7};
    HCCL_OK(HcclGetConfig(HCCL_DETERMINISTIC, &v));
    CHECK(v.value == 0); /* the default: non-deterministic */
    EXPECT_HCCL(HcclGetConfig(HCCL_DETERMINISTIC, NULL), HCCL_E_PTR);
    HcclConfigValue on = {.value = 1};
    HCCL_OK(HcclSetConfig(HCCL_DETERMINISTIC, on));
    HCCL_OK(HcclGetConfig(HCCL_DETERMINISTIC, &v));
    CHECK(v.value == 1);
    HcclConfigValue strict = {.value = 2}, bad = {.value = 3};
    EXPECT_HCCL(HcclSetConfig(HCCL_DETERMINISTIC, strict), HCCL_E_NOT_SUPPORT); /* A2 only */
    EXPECT_HCCL(HcclSetConfig(HCCL_DETERMINISTIC, bad), HCCL_E_PARA);
    HCCL_OK(HcclGetConfig(HCCL_DETERMINISTIC, &v));
    CHECK(v.value == 1); /* refused values change nothing */
    /* A config HCCL has no branch for: both calls succeed and do nothing. */
    HCCL_OK(HcclSetConfig(HCCL_CONFIG_RESERVED, bad));
    v.value = 42;
    HCCL_OK(HcclGetConfig(HCCL_CONFIG_RESERVED, &v));
    CHECK(v.value == 42);
    HcclConfigValue off = {.value = 0};
    HCCL_OK(HcclSetConfig(HCCL_DETERMINISTIC, off));
}

/* HcclCommGetHandleWithName finds `comm` by the name HcclGetCommName gives it. */
static void handle_with_name(HcclComm comm)
{
    char name[COMM_NAME_MAX_LENGTH];
    HCCL_OK(HcclGetCommName(comm, name));
    HcclComm found = NULL;
    HCCL_OK(HcclCommGetHandleWithName(name, &found));
    CHECK(found == comm);
    EXPECT_HCCL(HcclCommGetHandleWithName(NULL, &found), HCCL_E_PTR);
    EXPECT_HCCL(HcclCommGetHandleWithName(name, NULL), HCCL_E_PTR);
    EXPECT_HCCL(HcclCommGetHandleWithName("no-such-communicator", &found), HCCL_E_PARA);
    char too_long[2 * COMM_NAME_MAX_LENGTH];
    memset(too_long, 'x', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    EXPECT_HCCL(HcclCommGetHandleWithName(too_long, &found), HCCL_E_PARA);
}

struct Rank {
    uint32_t r, n;
    HcclComm comm;
    aclrtStream stream;
};

enum { RING = 256 };

/* A ring in one group, nested one level: every rank sends to the next and receives from the
 * previous. Issued one by one, the synchronous sends would wait for each other. Nothing runs
 * before the outermost HcclGroupEnd. */
static void grouped_ring(const struct Rank *k)
{
    int32_t host[RING];
    for (int i = 0; i < RING; i++) host[i] = tag(k->r, (uint64_t)i);
    void *send = dev_alloc(sizeof host), *recv = dev_alloc(sizeof host);
    upload(send, host, RING);
    uint32_t next = (k->r + 1) % k->n, prev = (k->r + k->n - 1) % k->n;
    HCCL_OK(HcclGroupStart());
    HCCL_OK(HcclGroupStart());
    HCCL_OK(HcclSend(send, RING, HCCL_DATA_TYPE_INT32, next, k->comm, k->stream));
    HCCL_OK(HcclGroupEnd()); /* inner: issues nothing */
    CHECK(stream_idle(k->stream));
    HCCL_OK(HcclRecv(recv, RING, HCCL_DATA_TYPE_INT32, prev, k->comm, k->stream));
    /* Checked when called: a bad peer is refused at once and not kept. */
    EXPECT_HCCL(HcclSend(send, RING, HCCL_DATA_TYPE_INT32, k->n, k->comm, k->stream), HCCL_E_PARA);
    EXPECT_HCCL(HcclSend(NULL, RING, HCCL_DATA_TYPE_INT32, next, k->comm, k->stream), HCCL_E_PTR);
    /* Not allowed in a point-to-point group: a batch, or a collective. */
    HcclSendRecvItem item = {HCCL_SEND, send, RING, HCCL_DATA_TYPE_INT32, next};
    EXPECT_HCCL(HcclBatchSendRecv(&item, 1, k->comm, k->stream), HCCL_E_NOT_SUPPORT);
    EXPECT_HCCL(HcclAllReduce(send, recv, RING, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, k->comm,
                              k->stream),
                HCCL_E_NOT_SUPPORT);
    CHECK(stream_idle(k->stream));
    HCCL_OK(HcclGroupEnd());
    ACL_OK(aclrtSynchronizeStream(k->stream));
    download(host, recv, RING);
    for (int i = 0; i < RING; i++) CHECK(host[i] == tag(prev, (uint64_t)i));
    ACL_OK(aclrtFree(send));
    ACL_OK(aclrtFree(recv));
}

/* Collectives in one group. Odd ranks call them in another order than even ranks: HCCL
 * issues a group's collectives largest first and the V collectives last, so the calls still
 * match. HcclGroupEnd waits for them. */
static void grouped_collectives(const struct Rank *k)
{
    enum { BIG = 64, SMALL = 4 };
    uint32_t n = k->n;
    int32_t mine[BIG];
    for (int i = 0; i < BIG; i++) mine[i] = tag(k->r, (uint64_t)i);
    void *in = dev_alloc(sizeof mine);
    upload(in, mine, BIG);
    void *sum = dev_alloc(BIG * sizeof(int32_t));
    void *gathered = dev_alloc((size_t)n * SMALL * sizeof(int32_t));
    void *gathered_v = dev_alloc((size_t)n * SMALL * sizeof(int32_t));
    uint64_t counts[64], displs[64];
    CHECK(n <= 64);
    for (uint32_t r = 0; r < n; r++) {
        counts[r] = SMALL;
        displs[r] = (uint64_t)r * SMALL;
    }
    HCCL_OK(HcclGroupStart());
    if (k->r % 2 == 0) {
        HCCL_OK(HcclAllGatherV(in, SMALL, gathered_v, counts, displs, HCCL_DATA_TYPE_INT32,
                               k->comm, k->stream));
        HCCL_OK(HcclAllGather(in, gathered, SMALL, HCCL_DATA_TYPE_INT32, k->comm, k->stream));
        HCCL_OK(HcclAllReduce(in, sum, BIG, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, k->comm,
                              k->stream));
    } else {
        HCCL_OK(HcclAllReduce(in, sum, BIG, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, k->comm,
                              k->stream));
        HCCL_OK(HcclAllGatherV(in, SMALL, gathered_v, counts, displs, HCCL_DATA_TYPE_INT32,
                               k->comm, k->stream));
        HCCL_OK(HcclAllGather(in, gathered, SMALL, HCCL_DATA_TYPE_INT32, k->comm, k->stream));
    }
    CHECK(stream_idle(k->stream)); /* kept, not queued */
    HCCL_OK(HcclGroupEnd());
    CHECK(stream_idle(k->stream)); /* HcclGroupEnd waited for them */
    int32_t got[BIG];
    download(got, sum, BIG);
    for (int i = 0; i < BIG; i++) {
        int32_t want = 0;
        for (uint32_t r = 0; r < n; r++) want += tag(r, (uint64_t)i);
        CHECK(got[i] == want);
    }
    int32_t all[64 * SMALL];
    download(all, gathered, (size_t)n * SMALL);
    for (uint32_t r = 0; r < n; r++)
        for (int i = 0; i < SMALL; i++) CHECK(all[r * SMALL + i] == tag(r, (uint64_t)i));
    download(all, gathered_v, (size_t)n * SMALL);
    for (uint32_t r = 0; r < n; r++)
        for (int i = 0; i < SMALL; i++) CHECK(all[r * SMALL + i] == tag(r, (uint64_t)i));
    ACL_OK(aclrtFree(in));
    ACL_OK(aclrtFree(sum));
    ACL_OK(aclrtFree(gathered));
    ACL_OK(aclrtFree(gathered_v));
}

/* What a host function (the emulator's device code) saw of HcclSymWinGetPeerPointer. */
struct PeerWrite {
    HcclCommSymWindow win;
    size_t offset, window_bytes;
    uint32_t me, next, n;
    HcclResult to_next, bad_rank, bad_offset;
};

/* On the stream: writes this rank's tag into the next rank's copy of the window, at this
 * rank's element, through the peer pointer. */
static void write_to_next(void *arg)
{
    struct PeerWrite *w = arg;
    void *p = NULL;
    w->to_next = HcclSymWinGetPeerPointer(w->win, w->offset, w->next, &p);
    if (w->to_next == HCCL_SUCCESS) ((int32_t *)p)[w->me] = tag(w->me, 0);
    w->bad_rank = HcclSymWinGetPeerPointer(w->win, w->offset, w->n, &p);
    w->bad_offset = HcclSymWinGetPeerPointer(w->win, w->window_bytes, w->next, &p);
}

/* A window registered by every rank; each rank's host function writes into the next rank's
 * memory through the peer pointer, and the next rank reads it after a barrier. */
static void peer_pointer(const struct Rank *k, int32_t device)
{
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.id = (uint32_t)device;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    size_t g = 0;
    ACL_OK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g));
    void *vir = NULL;
    aclrtDrvMemHandle handle = NULL;
    ACL_OK(aclrtReserveMemAddress(&vir, g, 0, NULL, 1));
    ACL_OK(aclrtMallocPhysical(&handle, g, &prop, 0));
    ACL_OK(aclrtMapMem(vir, g, 0, handle, 0));
    ACL_OK(aclrtMemset(vir, g, 0, g));
    HcclCommSymWindow win = NULL;
    HCCL_OK(HcclCommSymWinRegister(k->comm, vir, g, &win, 1));
    /* The buffer is 4 KiB into the window: its offset is what HcclCommSymWinGet answers. */
    char *buf = (char *)vir + 4096;
    HcclCommSymWindow found = NULL;
    size_t offset = 0;
    HCCL_OK(HcclCommSymWinGet(k->comm, buf, 64 * sizeof(int32_t), &found, &offset));
    CHECK(found == win && offset == 4096);
    /* Device-side only: a plain host thread is refused. */
    void *p = NULL;
    EXPECT_HCCL(HcclSymWinGetPeerPointer(win, offset, 0, &p), HCCL_E_NOT_SUPPORT);
    EXPECT_HCCL(HcclSymWinGetPeerPointer(NULL, offset, 0, &p), HCCL_E_PTR);
    EXPECT_HCCL(HcclSymWinGetPeerPointer(win, offset, 0, NULL), HCCL_E_PTR);
    struct PeerWrite w = {win, offset, g, k->r, (k->r + 1) % k->n, k->n,
                          HCCL_E_RESERVED, HCCL_E_RESERVED, HCCL_E_RESERVED};
    ACL_OK(aclrtLaunchHostFunc(k->stream, write_to_next, &w));
    /* A collective after it: every rank's write is done before any rank's stream passes it. */
    void *one = dev_alloc(sizeof(int32_t));
    HCCL_OK(HcclAllReduce(one, one, 1, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, k->comm, k->stream));
    ACL_OK(aclrtSynchronizeStream(k->stream));
    ACL_OK(aclrtFree(one));
    CHECK(w.to_next == HCCL_SUCCESS);
    CHECK(w.bad_rank == HCCL_E_PARA);
    CHECK(w.bad_offset == HCCL_E_PARA);
    int32_t seen[64];
    CHECK(k->n <= 64);
    download(seen, buf, k->n);
    uint32_t prev = (k->r + k->n - 1) % k->n;
    for (uint32_t r = 0; r < k->n; r++) CHECK(seen[r] == (r == prev ? tag(prev, 0) : 0));
    HCCL_OK(HcclCommSymWinDeregister(win));
    ACL_OK(aclrtUnmapMem(vir));
    ACL_OK(aclrtFreePhysical(handle));
    ACL_OK(aclrtReleaseMemAddress(vir));
}

static int run_rank(void)
{
    g_rank = atoi(env("SYMHEAP_RANK"));
    uint32_t n = (uint32_t)atoi(env("SYMHEAP_WORLD_SIZE"));
    group_basics();
    config_calls();
    ACL_OK(aclrtSetDevice(g_rank));
    HcclRootInfo root;
    share_root_info(&root, env("SYMHEAP_ROOT_INFO"));
    struct Rank k = {(uint32_t)g_rank, n, NULL, NULL};
    HCCL_OK(HcclCommInitRootInfo(n, &root, k.r, &k.comm));
    ACL_OK(aclrtCreateStream(&k.stream));
    handle_with_name(k.comm);
    grouped_ring(&k);
    grouped_collectives(&k);
    peer_pointer(&k, g_rank);
    char name[COMM_NAME_MAX_LENGTH];
    HCCL_OK(HcclGetCommName(k.comm, name));
    ACL_OK(aclrtDestroyStream(k.stream));
    HCCL_OK(HcclCommDestroy(k.comm));
    HcclComm gone = NULL;
    EXPECT_HCCL(HcclCommGetHandleWithName(name, &gone), HCCL_E_PARA);
    ACL_OK(aclrtResetDevice(g_rank));
    return 0;
}

/* One thread drives `n` ranks of one process: a ring of sends and receives and an AllReduce,
 * each over every communicator in one group; then it makes and destroys `n` communicators,
 * each in one group. */
static int run_threads(uint32_t n)
{
    g_rank = 0;
    CHECK(n >= 2 && n <= 16);
    int32_t devices[16];
    HcclComm comms[16];
    aclrtStream streams[16];
    void *send[16], *recv[16];
    for (uint32_t i = 0; i < n; i++) devices[i] = (int32_t)i;
    HCCL_OK(HcclCommInitAll(n, devices, comms));
    {
        /* This thread has no device yet: the name is looked up on the lowest device that has a
         * communicator, as HCCL looks in its first used device's map. */
        char name[COMM_NAME_MAX_LENGTH];
        HCCL_OK(HcclGetCommName(comms[0], name));
        HcclComm found = NULL;
        HCCL_OK(HcclCommGetHandleWithName(name, &found));
        CHECK(found == comms[0]);
    }
    int32_t host[RING];
    for (uint32_t i = 0; i < n; i++) {
        ACL_OK(aclrtSetDevice(devices[i]));
        ACL_OK(aclrtCreateStream(&streams[i]));
        send[i] = dev_alloc(sizeof host);
        recv[i] = dev_alloc(sizeof host);
        for (int j = 0; j < RING; j++) host[j] = tag(i, (uint64_t)j);
        upload(send[i], host, RING);
        /* Every rank's communicator has the same name: each device finds its own. */
        char name[COMM_NAME_MAX_LENGTH];
        HCCL_OK(HcclGetCommName(comms[i], name));
        HcclComm found = NULL;
        HCCL_OK(HcclCommGetHandleWithName(name, &found));
        CHECK(found == comms[i]);
    }
    HCCL_OK(HcclGroupStart());
    for (uint32_t i = 0; i < n; i++) {
        HCCL_OK(HcclSend(send[i], RING, HCCL_DATA_TYPE_INT32, (i + 1) % n, comms[i], streams[i]));
        HCCL_OK(HcclRecv(recv[i], RING, HCCL_DATA_TYPE_INT32, (i + n - 1) % n, comms[i],
                         streams[i]));
    }
    HCCL_OK(HcclGroupEnd());
    for (uint32_t i = 0; i < n; i++) {
        ACL_OK(aclrtSynchronizeStream(streams[i]));
        ACL_OK(aclrtSetDevice(devices[i]));
        download(host, recv[i], RING);
        for (int j = 0; j < RING; j++) CHECK(host[j] == tag((i + n - 1) % n, (uint64_t)j));
    }
    HCCL_OK(HcclGroupStart());
    for (uint32_t i = 0; i < n; i++)
        HCCL_OK(HcclAllReduce(send[i], recv[i], RING, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM,
                              comms[i], streams[i]));
    HCCL_OK(HcclGroupEnd());
    for (uint32_t i = 0; i < n; i++) {
        CHECK(stream_idle(streams[i]));
        ACL_OK(aclrtSetDevice(devices[i]));
        download(host, recv[i], RING);
        for (int j = 0; j < RING; j++) {
            int32_t want = 0;
            for (uint32_t r = 0; r < n; r++) want += tag(r, (uint64_t)j);
            CHECK(host[j] == want);
        }
    }
    /* Communicators made and destroyed in groups from this one thread, CANN's first use of
     * groups: each init runs at HcclGroupEnd on the device current when it was called. */
    HcclRootInfo root;
    HCCL_OK(HcclGetRootInfo(&root));
    HcclComm made[16] = {NULL};
    HCCL_OK(HcclGroupStart());
    for (uint32_t i = 0; i < n; i++) {
        ACL_OK(aclrtSetDevice(devices[i]));
        HCCL_OK(HcclCommInitRootInfo(n, &root, i, &made[i]));
    }
    CHECK(made[0] == NULL); /* made at HcclGroupEnd */
    /* Communicator management and collectives do not mix in one group. */
    EXPECT_HCCL(HcclAllReduce(send[0], recv[0], RING, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM,
                              comms[0], streams[0]),
                HCCL_E_NOT_SUPPORT);
    HCCL_OK(HcclGroupEnd());
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = n, size = 0;
        CHECK(made[i] != NULL);
        HCCL_OK(HcclGetRankId(made[i], &id));
        HCCL_OK(HcclGetRankSize(made[i], &size));
        CHECK(id == i && size == n);
    }
    HCCL_OK(HcclGroupStart());
    for (uint32_t i = 0; i < n; i++) HCCL_OK(HcclCommDestroy(made[i]));
    uint32_t size = 0;
    HCCL_OK(HcclGetRankSize(made[0], &size)); /* destroyed at HcclGroupEnd */
    HCCL_OK(HcclGroupEnd());
    EXPECT_HCCL(HcclGetRankSize(made[0], &size), HCCL_E_PARA);

    for (uint32_t i = 0; i < n; i++) {
        ACL_OK(aclrtSetDevice(devices[i]));
        ACL_OK(aclrtFree(send[i]));
        ACL_OK(aclrtFree(recv[i]));
        ACL_OK(aclrtDestroyStream(streams[i]));
        HCCL_OK(HcclCommDestroy(comms[i]));
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "threads") == 0) return run_threads((uint32_t)atoi(argv[2]));
    if (argc == 1) return run_rank();
    fprintf(stderr, "usage: %s [threads N]\n", argv[0]);
    return 2;
}
