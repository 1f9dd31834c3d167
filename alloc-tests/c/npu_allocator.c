/* symheap-npu (the pluggable allocator for torch_npu) called the way torch_npu calls it, as one
 * rank of a job started by symheap-run. alloc-tests/npu_allocator.rs compiles it against the
 * CANN-style declarations in alloc-tests/emu-cdylib/include, links it with -lhccl -lascendcl
 * (the emulator's shared library) and -lsymheap_npu, and runs it.
 *
 * Modes (the first argument):
 *   main            init, tensors before any communicator, HcclCommInitRootInfo, attach, more
 *                   tensors (some growing the pool); every pointer is found in a window of the
 *                   communicator at the same offset on every rank, an AllReduce on each is
 *                   checked; stream-ordered reuse across two streams; 1000 malloc/free rounds
 *                   add no registration.
 *   diverge-attach  rank 1 makes one extra malloc before the communicator exists: attach fails
 *                   on every rank with the clear error, and nothing is registered.
 *   diverge-grow    after attach, rank 2 makes one extra malloc: the next growth (a
 *                   registration) fails on every rank with the clear error.
 * Exits 0 when every check passed; the first failed check prints itself and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <acl/acl.h>
#include <hccl/hccl.h>

/* The library's header; torch_npu itself looks the symbols up and casts them to the same
 * types (alloc, free and the hooks). */
#include <symheap_npu.h>

static int rank_id = -1;

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "rank %d, line %d: ", rank_id, __LINE__);                          \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, " (last error: %s)\n", last_error());                             \
        exit(1);                                                                           \
    } while (0)
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) FAIL("check failed: %s", #cond);                                      \
    } while (0)
#define ACLCHECK(call)                                                                     \
    do {                                                                                   \
        aclError e_ = (call);                                                              \
        if (e_ != ACL_SUCCESS) FAIL("%s failed: %d", #call, e_);                           \
    } while (0)
#define HCCLCHECK(call)                                                                    \
    do {                                                                                   \
        HcclResult e_ = (call);                                                            \
        if (e_ != HCCL_SUCCESS) FAIL("%s failed: %d", #call, e_);                          \
    } while (0)

static const char *last_error(void)
{
    const char *e = symheap_npu_last_error();
    return e != NULL ? e : "(none)";
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL) {
        fprintf(stderr, "%s is not set: run under symheap-run\n", name);
        exit(1);
    }
    return v;
}

/* Rank 0 makes the root info and publishes it in the file SYMHEAP_ROOT_INFO names (written
 * beside it, then linked into place); the others wait for the whole file. */
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

static symheap_npu_stats_t stats(void)
{
    symheap_npu_stats_t s;
    memset(&s, 0xff, sizeof s);
    CHECK(symheap_npu_stats(&s) == 0);
    return s;
}

static uint32_t world;
static int device;
static aclrtStream s1, s2;

static HcclComm join(void)
{
    HcclRootInfo root;
    share_root_info(&root, env("SYMHEAP_ROOT_INFO"));
    HcclCommConfig config;
    HcclCommConfigInit(&config);
    config.hcclExecTimeOut = 30; /* a divergence must fail, never wait forever */
    HcclComm comm = NULL;
    HCCLCHECK(HcclCommInitRootInfoConfig(world, &root, (uint32_t)rank_id, &config, &comm));
    return comm;
}

static void *must_malloc(size_t size, aclrtStream stream)
{
    void *p = symheap_npu_malloc((ssize_t)size, device, stream);
    if (p == NULL) FAIL("symheap_npu_malloc(%zu) returned NULL", size);
    return p;
}

enum { MIB = 1 << 20 };

static void expect_divergence(const char *what, const char *who)
{
    const char *e = last_error();
    if (strstr(e, who) == NULL || strstr(e, "made different allocation calls from rank 0") == NULL) {
        FAIL("%s: the error does not name %s: %s", what, who, e);
    }
}

static int run_main(void)
{
    /* torch_npu calls the init hook with the device count, then allocates from the start. */
    symheap_npu_init((int)world);
    symheap_npu_set_memory_fraction(0.9, device);
    void *ptrs[16];
    size_t sizes[16];
    int n = 0;
    const size_t before[] = {1000, 4096, 3 * MIB, 512};
    for (size_t i = 0; i < sizeof before / sizeof *before; i++) {
        sizes[n] = before[i];
        ptrs[n++] = must_malloc(before[i], s1);
    }
    symheap_npu_stats_t st = stats();
    CHECK(st.registrations == 0 && st.communicators == 0 && st.segments == 1);
    CHECK(st.live_allocations == 4);

    HcclComm comm = join();
    HCCLCHECK(symheap_npu_attach(comm));
    HCCLCHECK(symheap_npu_attach(comm)); /* again: nothing more to do */
    st = stats();
    CHECK(st.registrations == 1 && st.communicators == 1);

    /* After attach: one that fits, one larger than a segment (its own segment), one that
     * needs a new segment. Each growth registers, collectively, on every rank alike. */
    const size_t after[] = {2 * MIB, 100, 9 * MIB, 6 * MIB, 64};
    for (size_t i = 0; i < sizeof after / sizeof *after; i++) {
        sizes[n] = after[i];
        ptrs[n++] = must_malloc(after[i], s1);
    }
    st = stats();
    CHECK(st.segments == 3 && st.registrations == 3);
    CHECK(st.live_allocations == (uint64_t)n);
    CHECK(symheap_npu_check() == HCCL_SUCCESS);

    /* Every pointer is inside a window of the communicator, at the same offset everywhere. */
    uint64_t offsets[16];
    for (int i = 0; i < n; i++) {
        HcclCommSymWindow win = NULL;
        size_t off = (size_t)-1;
        HCCLCHECK(HcclCommSymWinGet(comm, ptrs[i], sizes[i], &win, &off));
        CHECK(win != NULL);
        offsets[i] = off;
    }
    size_t bytes = (size_t)n * sizeof(uint64_t);
    void *mine = must_malloc(bytes, s1);
    void *all = must_malloc(bytes * world, s1);
    ACLCHECK(aclrtMemcpy(mine, bytes, offsets, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    HCCLCHECK(HcclAllGather(mine, all, (uint64_t)n, HCCL_DATA_TYPE_UINT64, comm, s1));
    ACLCHECK(aclrtSynchronizeStream(s1));
    uint64_t *gathered = malloc(bytes * world);
    CHECK(gathered != NULL);
    ACLCHECK(aclrtMemcpy(gathered, bytes * world, all, bytes * world, ACL_MEMCPY_DEVICE_TO_HOST));
    for (uint32_t r = 0; r < world; r++) {
        for (int i = 0; i < n; i++) {
            if (gathered[r * (uint32_t)n + (uint32_t)i] != offsets[i]) {
                FAIL("tensor %d: offset %llu on rank %u, %llu here", i,
                     (unsigned long long)gathered[r * (uint32_t)n + (uint32_t)i], r,
                     (unsigned long long)offsets[i]);
            }
        }
    }
    free(gathered);
    symheap_npu_free(all, bytes * world, device, s1);
    symheap_npu_free(mine, bytes, device, s1);

    /* An AllReduce on each tensor, in place: element j of rank r is r + j. */
    for (int i = 0; i < n; i++) {
        size_t count = sizes[i] / sizeof(float);
        if (count > 4096) count = 4096;
        if (count == 0) continue;
        float *host = malloc(count * sizeof(float));
        CHECK(host != NULL);
        for (size_t j = 0; j < count; j++) host[j] = (float)(rank_id + (int)j);
        ACLCHECK(aclrtMemcpy(ptrs[i], sizes[i], host, count * sizeof(float),
                             ACL_MEMCPY_HOST_TO_DEVICE));
        HCCLCHECK(HcclAllReduce(ptrs[i], ptrs[i], count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM,
                                comm, s1));
        ACLCHECK(aclrtSynchronizeStream(s1));
        ACLCHECK(aclrtMemcpy(host, count * sizeof(float), ptrs[i], count * sizeof(float),
                             ACL_MEMCPY_DEVICE_TO_HOST));
        float w = (float)world;
        for (size_t j = 0; j < count; j++) {
            float want = w * (float)j + w * (w - 1) / 2;
            if (host[j] != want) FAIL("tensor %d element %zu: %f, not %f", i, j, host[j], want);
        }
        free(host);
    }

    /* Stream-ordered reuse: a block freed on s1 while s1 still writes it, handed out again on
     * s2 at the same address; s2's write must land after s1's. */
    {
        size_t len = 2 * MIB;
        void *a = must_malloc(len, s1);
        for (int k = 0; k < 8; k++) ACLCHECK(aclrtMemsetAsync(a, len, 1, len, s1));
        symheap_npu_free(a, len, device, s1);
        void *b = must_malloc(len, s2);
        CHECK(b == a); /* placement is program order: the same block */
        ACLCHECK(aclrtMemsetAsync(b, len, 2, len, s2));
        ACLCHECK(aclrtSynchronizeStream(s2));
        ACLCHECK(aclrtSynchronizeStream(s1));
        unsigned char *host = malloc(len);
        CHECK(host != NULL);
        ACLCHECK(aclrtMemcpy(host, len, b, len, ACL_MEMCPY_DEVICE_TO_HOST));
        for (size_t j = 0; j < len; j += 4093) {
            if (host[j] != 2) FAIL("byte %zu is %d: s2 wrote before s1 had finished", j, host[j]);
        }
        free(host);
        symheap_npu_free(b, len, device, s2);
    }

    /* 1000 rounds of mixed sizes on two streams: no registration, no growth. */
    st = stats();
    uint64_t registrations = st.registrations, segments = st.segments;
    enum { RING = 8 };
    void *ring[RING] = {0};
    size_t ring_size[RING] = {0};
    aclrtStream ring_stream[RING] = {0};
    const size_t mixed[] = {512, 1000, 4096, 65536, 100000, 262144, 1536};
    for (int round = 0; round < 1000; round++) {
        int slot = round % RING;
        if (ring[slot] != NULL) {
            symheap_npu_free(ring[slot], ring_size[slot], device, ring_stream[slot]);
        }
        size_t size = mixed[(round * 7 + round / 7) % (int)(sizeof mixed / sizeof *mixed)];
        aclrtStream stream = round % 3 == 0 ? s2 : s1;
        ring[slot] = must_malloc(size, stream);
        ring_size[slot] = size;
        ring_stream[slot] = stream;
        if (round % 50 == 0) ACLCHECK(aclrtMemsetAsync(ring[slot], size, 0, size, stream));
    }
    for (int slot = 0; slot < RING; slot++) {
        symheap_npu_free(ring[slot], ring_size[slot], device, ring_stream[slot]);
    }
    st = stats();
    CHECK(st.registrations == registrations);
    CHECK(st.segments == segments);
    CHECK(st.peak_allocated_bytes >= st.allocated_bytes);
    CHECK(symheap_npu_check() == HCCL_SUCCESS);
    symheap_npu_reset_peak(device);
    st = stats();
    CHECK(st.peak_allocated_bytes == st.allocated_bytes);

    for (int i = 0; i < n; i++) symheap_npu_free(ptrs[i], sizes[i], device, s1);
    st = stats();
    CHECK(st.live_allocations == 0 && st.allocated_bytes == 0);
    symheap_npu_reset(true); /* registered segments stay: documented */
    ACLCHECK(aclrtSynchronizeStream(s1));
    ACLCHECK(aclrtSynchronizeStream(s2));
    printf("rank %d: %llu segments, %llu registrations, offsets agree on %u ranks\n", rank_id,
           (unsigned long long)st.segments, (unsigned long long)st.registrations, world);
    return 0;
}

static int run_diverge_attach(void)
{
    symheap_npu_init((int)world);
    void *a = must_malloc(1 * MIB, s1);
    void *extra = NULL;
    if (rank_id == 1) extra = must_malloc(1000, s1);
    HcclComm comm = join();
    HcclResult r = symheap_npu_attach(comm);
    if (r == HCCL_SUCCESS) FAIL("attach succeeded although rank 1 made an extra call");
    expect_divergence("attach", "ranks [1]");
    symheap_npu_stats_t st = stats();
    CHECK(st.registrations == 0 && st.communicators == 0);
    (void)a;
    (void)extra;
    printf("rank %d: attach refused: %s\n", rank_id, last_error());
    return 0;
}

static int run_diverge_grow(void)
{
    symheap_npu_init((int)world);
    HcclComm comm = join();
    HCCLCHECK(symheap_npu_attach(comm));
    void *a = must_malloc(1 * MIB, s1);
    if (rank_id == 2) (void)must_malloc(1000, s1);
    /* Larger than a segment: every rank grows here, and the agreement sees the extra call. */
    void *big = symheap_npu_malloc(20 * MIB, device, s1);
    if (big != NULL) FAIL("the growth succeeded although rank 2 made an extra call");
    expect_divergence("growth", "ranks [2]");
    symheap_npu_stats_t st = stats();
    CHECK(st.registrations == 1 && st.segments == 1);
    /* What fits still works locally; the pool is not corrupted. */
    void *b = must_malloc(4096, s1);
    symheap_npu_free(b, 4096, device, s1);
    symheap_npu_free(a, 1 * MIB, device, s1);
    printf("rank %d: growth refused: %s\n", rank_id, last_error());
    return 0;
}

int main(int argc, char **argv)
{
    rank_id = atoi(env("SYMHEAP_RANK"));
    world = (uint32_t)atoi(env("SYMHEAP_WORLD_SIZE"));
    device = rank_id;
    const char *mode = argc > 1 ? argv[1] : "main";
    ACLCHECK(aclInit(NULL));
    ACLCHECK(aclrtSetDevice(device));
    ACLCHECK(aclrtCreateStream(&s1));
    ACLCHECK(aclrtCreateStream(&s2));
    if (strcmp(mode, "main") == 0) return run_main();
    if (strcmp(mode, "diverge-attach") == 0) return run_diverge_attach();
    if (strcmp(mode, "diverge-grow") == 0) return run_diverge_grow();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
