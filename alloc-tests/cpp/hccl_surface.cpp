// A C++ program written for CANN, the way hccl_test and torch_npu use the C API: it includes
// <acl/acl.h> and <hccl/hccl.h> (declarations in alloc-tests/emu-cdylib/include, written as CANN's
// headers declare them), links with -lhccl -lascendcl, and checks the answer and the error code
// of every function of issue 9 it calls. alloc-tests/cpp_program.rs compiles it against the
// emulator's shared library and runs it.
//
// Two modes:
//   hccl_surface             one rank of a job started by symheap-run (SYMHEAP_RANK,
//                            SYMHEAP_WORLD_SIZE, SYMHEAP_ROOT_INFO): the whole surface;
//   hccl_surface init-all N  one process, N devices through HcclCommInitAll, one thread each.
// Exits 0 when every check passed; the first failed check prints itself and exits 1.
#include <acl/acl.h>
#include <hccl/hccl.h>
#include <hcomm_res.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

static_assert(sizeof(HcclSendRecvItem) == 32, "HcclSendRecvItem is 32 bytes on LP64");
static_assert(sizeof(HcclRootInfo) == 4108, "HcclRootInfo is HCCL_ROOT_INFO_BYTES");
static_assert(sizeof(aclrtPhysicalMemProp) == 32, "aclrtPhysicalMemProp is 32 bytes");

namespace {

int g_rank = -1;

[[noreturn]] void fail(const char *what, long got, long want, int line)
{
    const char *msg = aclGetRecentErrMsg();
    fprintf(stderr, "rank %d, line %d: %s returned %ld, expected %ld (%s)\n", g_rank, line, what,
            got, want, msg != nullptr ? msg : "no message");
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

const char *env(const char *name)
{
    const char *v = getenv(name);
    if (v == nullptr) {
        fprintf(stderr, "%s is not set: run under symheap-run\n", name);
        exit(1);
    }
    return v;
}

// Rank 0 writes the root info beside `path` and links it into place; the others wait for it.
void share_root_info(HcclRootInfo *root, const std::string &path)
{
    if (g_rank == 0) {
        HCCL_OK(HcclGetRootInfo(root));
        std::string tmp = path + ".tmp";
        FILE *f = fopen(tmp.c_str(), "wb");
        CHECK(f != nullptr && fwrite(root, sizeof *root, 1, f) == 1 && fclose(f) == 0);
        CHECK(link(tmp.c_str(), path.c_str()) == 0);
        unlink(tmp.c_str());
        return;
    }
    for (int tries = 0; tries < 60000; tries++) {
        struct stat st;
        if (stat(path.c_str(), &st) == 0 && st.st_size == (off_t)sizeof *root) {
            FILE *f = fopen(path.c_str(), "rb");
            if (f != nullptr && fread(root, sizeof *root, 1, f) == 1) {
                fclose(f);
                return;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    fprintf(stderr, "rank %d: no root info at %s\n", g_rank, path.c_str());
    exit(1);
}

// A device buffer from aclrtMalloc (outside any window) with host staging through
// aclrtMallocHost, as hccl_test checks its results.
struct DevBuf {
    void *dev = nullptr;
    size_t bytes = 0;
    explicit DevBuf(size_t n) : bytes(n)
    {
        ACL_OK(aclrtMalloc(&dev, n, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL_OK(aclrtMemset(dev, n, 0, n));
    }
    ~DevBuf() { ACL_OK(aclrtFree(dev)); }
    DevBuf(const DevBuf &) = delete;
    DevBuf &operator=(const DevBuf &) = delete;
};

template <typename T> void upload(void *dev, const std::vector<T> &v)
{
    size_t n = v.size() * sizeof(T);
    void *host = nullptr;
    ACL_OK(aclrtMallocHost(&host, n));
    memcpy(host, v.data(), n);
    ACL_OK(aclrtMemcpy(dev, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE));
    ACL_OK(aclrtFreeHost(host));
}

template <typename T> std::vector<T> download(const void *dev, size_t count)
{
    std::vector<T> v(count);
    if (count > 0) {
        ACL_OK(aclrtMemcpy(v.data(), count * sizeof(T), dev, count * sizeof(T),
                           ACL_MEMCPY_DEVICE_TO_HOST));
    }
    return v;
}

std::vector<uint64_t> prefix_sums(const std::vector<uint64_t> &counts, uint64_t gap)
{
    std::vector<uint64_t> displs(counts.size());
    uint64_t at = 0;
    for (size_t i = 0; i < counts.size(); i++) {
        displs[i] = at;
        at += counts[i] + gap;
    }
    return displs;
}

// The value rank `src` puts at element `i` of what it sends to rank `dst`.
int32_t tag(uint32_t src, uint32_t dst, uint64_t i)
{
    return (int32_t)(src * 1000000 + dst * 10000 + i);
}

struct Rank {
    uint32_t r, n;
    int32_t device;
    HcclComm comm;
    aclrtStream stream;
};

void acl_basics(uint32_t *device_count)
{
    ACL_OK(aclInit(nullptr));
    EXPECT_ACL(aclInit(nullptr), ACL_ERROR_REPEAT_INITIALIZE);
    ACL_OK(aclrtGetDeviceCount(device_count));
    const char *configured = getenv("SYMHEAP_EMU_DEVICE_COUNT");  // the emulator's setting
    CHECK(*device_count == (configured != nullptr ? (uint32_t)atoi(configured) : 16u));
    EXPECT_ACL(aclrtGetDeviceCount(nullptr), ACL_ERROR_INVALID_PARAM);
    EXPECT_ACL(aclrtSetDevice((int32_t)*device_count), ACL_ERROR_RT_INVALID_DEVICEID);
}

void device_basics()
{
    const char *soc = aclrtGetSocName();
    CHECK(soc != nullptr && strncmp(soc, "Ascend910_93", 12) == 0 && strlen(soc) > 12);
    aclrtFloatOverflowMode mode = ACL_RT_OVERFLOW_MODE_UNDEF;
    ACL_OK(aclrtGetDeviceSatMode(&mode));
    CHECK(mode == ACL_RT_OVERFLOW_MODE_INFNAN);
    ACL_OK(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION));
    ACL_OK(aclrtGetDeviceSatMode(&mode));
    CHECK(mode == ACL_RT_OVERFLOW_MODE_SATURATION);
    ACL_OK(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_INFNAN));
    EXPECT_ACL(aclrtSetDeviceSatMode((aclrtFloatOverflowMode)7), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT_ACL(aclrtGetDeviceSatMode(nullptr), ACL_ERROR_INVALID_PARAM);
}

void memory_basics()
{
    size_t free0 = 0, total = 0, free1 = 0;
    ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
    CHECK(total > 0 && free0 <= total);
    void *p = nullptr;
    const size_t big = 64u << 20;
    ACL_OK(aclrtMalloc(&p, big, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(p != nullptr && (uintptr_t)p % 64 == 0);
    ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
    CHECK(free1 + big <= free0);
    ACL_OK(aclrtMemset(p, big, 0x5a, big));
    std::vector<uint8_t> back = download<uint8_t>(p, 4096);
    for (uint8_t b : back) CHECK(b == 0x5a);
    EXPECT_ACL(aclrtMemset(p, 16, 0, 32), ACL_ERROR_RT_PARAM_INVALID);
    ACL_OK(aclrtFree(p));
    EXPECT_ACL(aclrtFree(p), ACL_ERROR_RT_PARAM_INVALID);
    EXPECT_ACL(aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM);
    EXPECT_ACL(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT_ACL(aclrtMalloc(nullptr, 1024, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    void *h = nullptr;
    ACL_OK(aclrtMallocHost(&h, 1000));
    CHECK(h != nullptr && (uintptr_t)h % 64 == 0);
    memset(h, 1, 1000);
    ACL_OK(aclrtFreeHost(h));
    EXPECT_ACL(aclrtMallocHost(nullptr, 1000), ACL_ERROR_INVALID_PARAM);
    EXPECT_ACL(aclrtFreeHost(nullptr), ACL_ERROR_INVALID_PARAM);
}

// Times iterations of an AllReduce with two events on the stream, as hccl_test does, and checks
// the elapsed time against the host's clock around it.
void timed_all_reduce(const Rank &k)
{
    aclrtEvent start, end;
    ACL_OK(aclrtCreateEvent(&start));
    ACL_OK(aclrtCreateEvent(&end));
    EXPECT_ACL(aclrtCreateEvent(nullptr), ACL_ERROR_INVALID_PARAM);
    float ms = -1;
    EXPECT_ACL(aclrtEventElapsedTime(&ms, start, end), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID);

    const uint64_t count = 1 << 20;
    DevBuf in(count * 4), out(count * 4);
    std::vector<float> host(count);
    for (uint64_t i = 0; i < count; i++) host[i] = (float)(k.r + i % 7);
    upload(in.dev, host);
    const int iters = 5;
    auto before = std::chrono::steady_clock::now();
    ACL_OK(aclrtRecordEvent(start, k.stream));
    for (int i = 0; i < iters; i++) {
        HCCL_OK(HcclAllReduce(in.dev, out.dev, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, k.comm,
                              k.stream));
    }
    ACL_OK(aclrtRecordEvent(end, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before)
            .count();
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    ACL_OK(aclrtQueryEventStatus(end, &status));
    CHECK(status == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    EXPECT_ACL(aclrtQueryEventStatus(end, nullptr), ACL_ERROR_INVALID_PARAM);
    ACL_OK(aclrtSynchronizeEvent(end));
    ACL_OK(aclrtEventElapsedTime(&ms, start, end));
    // Within the host's time around it (plus float rounding of the milliseconds).
    CHECK(ms > 0 && ms <= wall_ms * 1.001 + 0.01);
    EXPECT_ACL(aclrtEventElapsedTime(nullptr, start, end), ACL_ERROR_INVALID_PARAM);
    std::vector<float> got = download<float>(out.dev, count);
    float ranks = (float)k.n;
    for (uint64_t i = 0; i < count; i++) {
        float want = ranks * (float)(i % 7) + ranks * (ranks - 1) / 2;
        CHECK(got[i] == want);
    }
    if (k.r == 0) {
        printf("rank 0: %d x AllReduce of %llu floats: %.3f ms by events, %.3f ms by the host\n",
               iters, (unsigned long long)count, ms, wall_ms);
    }
    ACL_OK(aclrtDestroyEvent(start));
    ACL_OK(aclrtDestroyEvent(end));
}

// A second stream waits for an event recorded on the first: the copy it then runs sees the fill.
void stream_waits_for_event(const Rank &k)
{
    aclrtStream second;
    ACL_OK(aclrtCreateStream(&second));
    aclrtEvent filled;
    ACL_OK(aclrtCreateEvent(&filled));
    const size_t bytes = 32u << 20;
    DevBuf a(bytes), b(bytes);
    ACL_OK(aclrtMemsetAsync(a.dev, bytes, 7, bytes, k.stream));
    ACL_OK(aclrtRecordEvent(filled, k.stream));
    ACL_OK(aclrtStreamWaitEvent(second, filled));
    ACL_OK(aclrtMemcpyAsync(b.dev, bytes, a.dev, bytes, ACL_MEMCPY_DEVICE_TO_DEVICE, second));
    ACL_OK(aclrtSynchronizeStream(second));
    std::vector<uint8_t> tail = download<uint8_t>((char *)b.dev + bytes - 4096, 4096);
    for (uint8_t v : tail) CHECK(v == 7);
    ACL_OK(aclrtSynchronizeStream(k.stream));
    ACL_OK(aclrtDestroyEvent(filled));
    ACL_OK(aclrtDestroyStream(second));
}

void comm_name(const Rank &k)
{
    char name[COMM_NAME_MAX_LENGTH] = {0};
    HCCL_OK(HcclGetCommName(k.comm, name));
    CHECK(name[0] != 0 && strlen(name) < COMM_NAME_MAX_LENGTH);
    EXPECT_HCCL(HcclGetCommName(k.comm, nullptr), HCCL_E_PTR);
    // Every rank has the same name: gather them and compare.
    DevBuf mine(COMM_NAME_MAX_LENGTH), all(COMM_NAME_MAX_LENGTH * k.n);
    ACL_OK(aclrtMemcpy(mine.dev, COMM_NAME_MAX_LENGTH, name, COMM_NAME_MAX_LENGTH,
                       ACL_MEMCPY_HOST_TO_DEVICE));
    HCCL_OK(HcclAllGather(mine.dev, all.dev, COMM_NAME_MAX_LENGTH, HCCL_DATA_TYPE_INT8, k.comm,
                          k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<char> names = download<char>(all.dev, COMM_NAME_MAX_LENGTH * k.n);
    for (uint32_t p = 0; p < k.n; p++) {
        CHECK(strcmp(&names[p * COMM_NAME_MAX_LENGTH], name) == 0);
    }
}

// Rank p contributes p + 1 elements; the receive layout leaves a gap of 3 between blocks.
void all_gather_v(const Rank &k)
{
    std::vector<uint64_t> counts(k.n);
    for (uint32_t p = 0; p < k.n; p++) counts[p] = p + 1;
    std::vector<uint64_t> displs = prefix_sums(counts, 3);
    uint64_t total = displs.back() + counts.back();
    DevBuf in(counts[k.r] * 4), out(total * 4);
    std::vector<int32_t> mine(counts[k.r]);
    for (uint64_t i = 0; i < mine.size(); i++) mine[i] = tag(k.r, 0, i);
    upload(in.dev, mine);
    HCCL_OK(HcclAllGatherV(in.dev, counts[k.r], out.dev, counts.data(), displs.data(),
                           HCCL_DATA_TYPE_INT32, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<int32_t> got = download<int32_t>(out.dev, total);
    for (uint32_t p = 0; p < k.n; p++) {
        for (uint64_t i = 0; i < counts[p]; i++) CHECK(got[displs[p] + i] == tag(p, 0, i));
        if (p + 1 < k.n) {
            for (uint64_t i = counts[p]; i < displs[p + 1] - displs[p]; i++) {
                CHECK(got[displs[p] + i] == 0);
            }
        }
    }
    EXPECT_HCCL(HcclAllGatherV(in.dev, counts[k.r], out.dev, nullptr, displs.data(),
                               HCCL_DATA_TYPE_INT32, k.comm, k.stream),
                HCCL_E_PTR);
}

// Rank p receives p + 1 sums; every rank contributes tag(rank, p, i) to element i of block p.
void reduce_scatter_v(const Rank &k)
{
    std::vector<uint64_t> counts(k.n);
    for (uint32_t p = 0; p < k.n; p++) counts[p] = p + 1;
    std::vector<uint64_t> displs = prefix_sums(counts, 0);
    uint64_t total = displs.back() + counts.back();
    DevBuf in(total * 4), out(counts[k.r] * 4);
    std::vector<int32_t> mine(total);
    for (uint32_t p = 0; p < k.n; p++) {
        for (uint64_t i = 0; i < counts[p]; i++) mine[displs[p] + i] = tag(k.r, p, i);
    }
    upload(in.dev, mine);
    HCCL_OK(HcclReduceScatterV(in.dev, counts.data(), displs.data(), out.dev, counts[k.r],
                               HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<int32_t> got = download<int32_t>(out.dev, counts[k.r]);
    for (uint64_t i = 0; i < counts[k.r]; i++) {
        int32_t want = 0;
        for (uint32_t s = 0; s < k.n; s++) want += tag(s, k.r, i);
        CHECK(got[i] == want);
    }
    EXPECT_HCCL(HcclReduceScatterV(in.dev, counts.data(), nullptr, out.dev, counts[k.r],
                                   HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, k.comm, k.stream),
                HCCL_E_PTR);
}

// Rank r sends (r + p) % n + 1 elements to rank p: an imbalanced split, as MoE dispatch makes.
uint64_t split_amount(const Rank &k, uint32_t from, uint32_t to)
{
    return (uint64_t)((from + to) % k.n + 1);
}

// One rank's side of the split: counts and displacements (receive blocks packed).
struct Split {
    std::vector<uint64_t> scounts, sdispls, rcounts, rdispls;
};

// This rank's side of the split, its send blocks `send_gap` elements apart, tagged and uploaded
// to `send`.
Split upload_split(const Rank &k, void *send, uint64_t send_gap)
{
    Split s;
    s.scounts.resize(k.n);
    s.rcounts.resize(k.n);
    for (uint32_t p = 0; p < k.n; p++) {
        s.scounts[p] = split_amount(k, k.r, p);
        s.rcounts[p] = split_amount(k, p, k.r);
    }
    s.sdispls = prefix_sums(s.scounts, send_gap);
    s.rdispls = prefix_sums(s.rcounts, 0);
    std::vector<int32_t> mine(s.sdispls.back() + s.scounts.back());
    for (uint32_t p = 0; p < k.n; p++) {
        for (uint64_t i = 0; i < s.scounts[p]; i++) mine[s.sdispls[p] + i] = tag(k.r, p, i);
    }
    upload(send, mine);
    return s;
}

// Checks that `recv` holds, at this rank's receive blocks, what every rank sent it.
void check_split(const Rank &k, const Split &s, const void *recv)
{
    std::vector<int32_t> got = download<int32_t>(recv, s.rdispls.back() + s.rcounts.back());
    for (uint32_t p = 0; p < k.n; p++) {
        for (uint64_t i = 0; i < s.rcounts[p]; i++) CHECK(got[s.rdispls[p] + i] == tag(p, k.r, i));
    }
}

void all_to_all_v_on(const Rank &k, void *send, void *recv)
{
    Split s = upload_split(k, send, 1);
    HCCL_OK(HcclAlltoAllV(send, s.scounts.data(), s.sdispls.data(), HCCL_DATA_TYPE_INT32, recv,
                          s.rcounts.data(), s.rdispls.data(), HCCL_DATA_TYPE_INT32, k.comm,
                          k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    check_split(k, s, recv);
    EXPECT_HCCL(HcclAlltoAllV(send, nullptr, s.sdispls.data(), HCCL_DATA_TYPE_INT32, recv,
                              s.rcounts.data(), s.rdispls.data(), HCCL_DATA_TYPE_INT32, k.comm,
                              k.stream),
                HCCL_E_PTR);
}

void all_to_all_v(const Rank &k)
{
    DevBuf send(1 << 16), recv(1 << 16);
    all_to_all_v_on(k, send.dev, recv.dev);
}

// The same split through HcclAlltoAllVC: one count matrix for every rank, blocks packed.
void all_to_all_vc(const Rank &k)
{
    DevBuf send(1 << 16), recv(1 << 16);
    std::vector<uint64_t> matrix(k.n * k.n);
    for (uint32_t from = 0; from < k.n; from++) {
        for (uint32_t to = 0; to < k.n; to++) matrix[from * k.n + to] = split_amount(k, from, to);
    }
    Split s = upload_split(k, send.dev, 0);
    HCCL_OK(HcclAlltoAllVC(send.dev, matrix.data(), HCCL_DATA_TYPE_INT32, recv.dev,
                           HCCL_DATA_TYPE_INT32, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    check_split(k, s, recv.dev);
    EXPECT_HCCL(HcclAlltoAllVC(send.dev, nullptr, HCCL_DATA_TYPE_INT32, recv.dev,
                               HCCL_DATA_TYPE_INT32, k.comm, k.stream),
                HCCL_E_PTR);
}

// Pinned 2 MiB-page HBM on `device`, the physical memory the HCCL documents' examples map.
aclrtPhysicalMemProp device_huge_pages(int32_t device)
{
    aclrtPhysicalMemProp prop = {};
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = ACL_HBM_MEM_HUGE;
    prop.location.id = (uint32_t)device;
    prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    return prop;
}

// The same AlltoAllV with both buffers in a symmetric window (HCCL's zero-copy path).
void all_to_all_v_in_window(const Rank &k)
{
    aclrtPhysicalMemProp prop = device_huge_pages(k.device);
    size_t g = 0;
    ACL_OK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g));
    void *vir = nullptr;
    aclrtDrvMemHandle handle = nullptr;
    ACL_OK(aclrtReserveMemAddress(&vir, g, 0, nullptr, 1));
    ACL_OK(aclrtMallocPhysical(&handle, g, &prop, 0));
    ACL_OK(aclrtMapMem(vir, g, 0, handle, 0));
    HcclCommSymWindow win = nullptr;
    HCCL_OK(HcclCommSymWinRegister(k.comm, vir, g, &win, 1));
    all_to_all_v_on(k, vir, (char *)vir + g / 2);
    HCCL_OK(HcclCommSymWinDeregister(win));
    ACL_OK(aclrtUnmapMem(vir));
    ACL_OK(aclrtFreePhysical(handle));
    ACL_OK(aclrtReleaseMemAddress(vir));
}

// The other two kinds of memory HCCL registers: HcommMemAlloc's (its documented example's
// AllGather) and aclrtMalloc memory of whole granules, found with aclrtMemGetAddressRange.
void windows_of_every_memory_kind(const Rank &k)
{
    const size_t send_bytes = 1024, recv_bytes = k.n * send_bytes;
    void *dev = nullptr;
    HCCL_OK((HcclResult)HcommMemAlloc(&dev, send_bytes + recv_bytes));
    HcclCommSymWindow win = nullptr;
    HCCL_OK(HcclCommSymWinRegister(k.comm, dev, send_bytes + recv_bytes, &win, 1));
    std::vector<int8_t> mine(send_bytes, (int8_t)(k.r + 1));
    upload(dev, mine);
    char *recv = (char *)dev + send_bytes;
    HCCL_OK(HcclAllGather(dev, recv, send_bytes, HCCL_DATA_TYPE_INT8, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<int8_t> got = download<int8_t>(recv, recv_bytes);
    for (uint32_t p = 0; p < k.n; p++) CHECK(got[p * send_bytes] == (int8_t)(p + 1));
    HCCL_OK(HcclCommSymWinDeregister(win));
    HCCL_OK((HcclResult)HcommMemFree(dev));

    void *m = nullptr, *base = nullptr;
    size_t size = 0;
    ACL_OK(aclrtMalloc(&m, 2 << 20, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL_OK(aclrtMemGetAddressRange((char *)m + 100, &base, &size));
    CHECK(base == m && size == (size_t)(2 << 20));
    HCCL_OK(HcclCommSymWinRegister(k.comm, (char *)m + 4096, 64, &win, 1));
    all_to_all_v_on(k, m, (char *)m + (1 << 20));
    HCCL_OK(HcclCommSymWinDeregister(win));
    ACL_OK(aclrtFree(m));
}

void rooted(const Rank &k)
{
    const uint64_t count = 1000;
    DevBuf in(count * 4 * k.n), out(count * 4);
    // Reduce to root 1: the sum lands there only.
    std::vector<float> mine(count);
    for (uint64_t i = 0; i < count; i++) mine[i] = (float)(k.r * 10 + i);
    upload(in.dev, mine);
    HCCL_OK(HcclReduce(in.dev, out.dev, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, 1 % k.n,
                       k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    if (k.r == 1 % k.n) {
        std::vector<float> got = download<float>(out.dev, count);
        for (uint64_t i = 0; i < count; i++) CHECK(got[i] == (float)((k.n - 1) * 10 + i));
    }
    EXPECT_HCCL(HcclReduce(in.dev, out.dev, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, k.n,
                           k.comm, k.stream),
                HCCL_E_PARA);

    // Scatter from the last rank: block p of its buffer goes to rank p; others pass NULL.
    uint32_t root = k.n - 1;
    if (k.r == root) {
        std::vector<int32_t> all(count * k.n);
        for (uint32_t p = 0; p < k.n; p++) {
            for (uint64_t i = 0; i < count; i++) all[p * count + i] = tag(root, p, i);
        }
        upload(in.dev, all);
    }
    HCCL_OK(HcclScatter(k.r == root ? in.dev : nullptr, out.dev, count, HCCL_DATA_TYPE_INT32, root,
                        k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<int32_t> got = download<int32_t>(out.dev, count);
    for (uint64_t i = 0; i < count; i++) CHECK(got[i] == tag(root, k.r, i));

    // Broadcast from rank 0.
    std::vector<int32_t> value(count);
    for (uint64_t i = 0; i < count; i++) value[i] = k.r == 0 ? tag(0, 9, i) : -1;
    upload(out.dev, value);
    HCCL_OK(HcclBroadcast(out.dev, count, HCCL_DATA_TYPE_INT32, 0, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    got = download<int32_t>(out.dev, count);
    for (uint64_t i = 0; i < count; i++) CHECK(got[i] == tag(0, 9, i));
}

// Pairs (0, 1), (2, 3), ...: the even rank sends first, the odd one receives first. Then a ring
// through HcclBatchSendRecv.
void point_to_point(const Rank &k)
{
    const uint64_t count = 300000;  // more than one chunk of a staging section
    DevBuf send(count * 4), recv(count * 4);
    std::vector<int32_t> mine(count);
    uint32_t peer = k.r ^ 1;
    if (peer < k.n) {
        for (uint64_t i = 0; i < count; i++) mine[i] = tag(k.r, peer, i);
        upload(send.dev, mine);
        if (k.r % 2 == 0) {
            HCCL_OK(HcclSend(send.dev, count, HCCL_DATA_TYPE_INT32, peer, k.comm, k.stream));
            HCCL_OK(HcclRecv(recv.dev, count, HCCL_DATA_TYPE_INT32, peer, k.comm, k.stream));
        } else {
            HCCL_OK(HcclRecv(recv.dev, count, HCCL_DATA_TYPE_INT32, peer, k.comm, k.stream));
            HCCL_OK(HcclSend(send.dev, count, HCCL_DATA_TYPE_INT32, peer, k.comm, k.stream));
        }
        ACL_OK(aclrtSynchronizeStream(k.stream));
        std::vector<int32_t> got = download<int32_t>(recv.dev, count);
        for (uint64_t i = 0; i < count; i++) CHECK(got[i] == tag(peer, k.r, i));
    }
    EXPECT_HCCL(HcclSend(send.dev, count, HCCL_DATA_TYPE_INT32, k.n, k.comm, k.stream),
                HCCL_E_PARA);
    EXPECT_HCCL(HcclRecv(nullptr, count, HCCL_DATA_TYPE_INT32, peer % k.n, k.comm, k.stream),
                HCCL_E_PTR);

    uint32_t next = (k.r + 1) % k.n, prev = (k.r + k.n - 1) % k.n;
    for (uint64_t i = 0; i < count; i++) mine[i] = tag(k.r, next, i);
    upload(send.dev, mine);
    HcclSendRecvItem items[2] = {
        {HCCL_SEND, send.dev, count, HCCL_DATA_TYPE_INT32, next},
        {HCCL_RECV, recv.dev, count, HCCL_DATA_TYPE_INT32, prev},
    };
    HCCL_OK(HcclBatchSendRecv(items, 2, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<int32_t> got = download<int32_t>(recv.dev, count);
    for (uint64_t i = 0; i < count; i++) CHECK(got[i] == tag(prev, k.r, i));
    EXPECT_HCCL(HcclBatchSendRecv(nullptr, 2, k.comm, k.stream), HCCL_E_PTR);
}

// The zero-copy VA-range calls in hccl_test's order: set the range, back part of it, activate,
// run a collective on it, then tear down in reverse.
void memory_range(const Rank &k)
{
    aclrtPhysicalMemProp prop = device_huge_pages(k.device);
    size_t g = 0;
    ACL_OK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g));
    void *vir = nullptr;
    ACL_OK(aclrtReserveMemAddress(&vir, 2 * g, 0, nullptr, 1));
    EXPECT_HCCL(HcclCommSetMemoryRange(k.comm, vir, 2 * g, 1, 0), HCCL_E_PARA);
    EXPECT_HCCL(HcclCommSetMemoryRange(k.comm, nullptr, 2 * g, 0, 0), HCCL_E_PTR);
    HCCL_OK(HcclCommSetMemoryRange(k.comm, vir, 2 * g, 0, 0));
    EXPECT_HCCL(HcclCommSetMemoryRange(k.comm, vir, 2 * g, 0, 0), HCCL_E_PARA);
    aclrtDrvMemHandle handle = nullptr;
    ACL_OK(aclrtMallocPhysical(&handle, g, &prop, 0));
    ACL_OK(aclrtMapMem(vir, g, 0, handle, 0));
    EXPECT_HCCL(HcclCommActivateCommMemory(k.comm, vir, g, 1, handle, 0), HCCL_E_PARA);
    HCCL_OK(HcclCommActivateCommMemory(k.comm, vir, g, 0, handle, 0));
    EXPECT_HCCL(HcclCommUnsetMemoryRange(k.comm, vir), HCCL_E_PARA);

    const uint64_t count = 4096;
    std::vector<float> mine(count);
    for (uint64_t i = 0; i < count; i++) mine[i] = (float)(k.r + 1);
    upload(vir, mine);
    void *out = (char *)vir + g / 2;
    HCCL_OK(HcclAllReduce(vir, out, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, k.comm, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<float> got = download<float>(out, count);
    for (float v : got) CHECK(v == (float)(k.n * (k.n + 1) / 2));

    EXPECT_HCCL(HcclCommDeactivateCommMemory(k.comm, (char *)vir + g / 2), HCCL_E_PARA);
    HCCL_OK(HcclCommDeactivateCommMemory(k.comm, vir));
    ACL_OK(aclrtUnmapMem(vir));
    ACL_OK(aclrtFreePhysical(handle));
    HCCL_OK(HcclCommUnsetMemoryRange(k.comm, vir));
    EXPECT_HCCL(HcclCommUnsetMemoryRange(k.comm, vir), HCCL_E_PARA);
    ACL_OK(aclrtReleaseMemAddress(vir));
}

// HcclCreateSubCommConfig on a world of 4: TP pairs {0,1} {2,3} and DP pairs {0,2} {1,3}, one
// physical allocation registered in the world and in the TP pair (a window in each, found per
// communicator by HcclCommSymWinGet), collectives on each; sub-communicators destroyed first.
void sub_communicators(const Rank &k)
{
    if (k.n != 4) return;
    HcclComm world = k.comm;
    HcclCommConfig config;
    HcclCommConfigInit(&config);
    uint32_t tp_ids[2] = {k.r & ~1u, k.r | 1u}, dp_ids[2] = {k.r & 1u, (k.r & 1u) + 2};
    HcclComm tp = nullptr, dp = nullptr, none = nullptr;
    HCCL_OK(HcclCreateSubCommConfig(&world, 2, tp_ids, 1 + k.r / 2, k.r % 2, &config, &tp));
    HCCL_OK(HcclCreateSubCommConfig(&world, 2, dp_ids, 10 + k.r % 2, k.r / 2, &config, &dp));
    // Not a member: nothing happens, and the global communicator is not involved.
    HCCL_OK(HcclCreateSubCommConfig(&world, 0, nullptr, 0xFFFFFFFF, 0, &config, &none));
    CHECK(none == nullptr);
    uint32_t rank = 9, size = 9;
    HCCL_OK(HcclGetRankId(tp, &rank));
    HCCL_OK(HcclGetRankSize(tp, &size));
    CHECK(rank == k.r % 2 && size == 2);
    char world_name[128] = {0}, tp_name[128] = {0};
    HCCL_OK(HcclGetCommName(world, world_name));
    HCCL_OK(HcclGetCommName(tp, tp_name));
    CHECK(std::string(tp_name) == std::string(world_name) + "_sub_" + std::to_string(1 + k.r / 2));
    HcclComm again = nullptr;
    uint32_t one[1] = {0};
    EXPECT_HCCL(HcclCreateSubCommConfig(&tp, 1, one, 5, 0, &config, &again), HCCL_E_INTERNAL);
    EXPECT_HCCL(HcclCreateSubCommConfig(&world, 2, tp_ids, 5, 2, &config, &again), HCCL_E_PARA);
    uint32_t twice[2] = {k.r, k.r};
    EXPECT_HCCL(HcclCreateSubCommConfig(&world, 2, twice, 5, 0, &config, &again), HCCL_E_PARA);
    EXPECT_HCCL(HcclCreateSubCommConfig(&world, 2, tp_ids, 5, k.r % 2, nullptr, &again),
                HCCL_E_PTR);
    CHECK(again == nullptr);

    const size_t bytes = 2 << 20;
    void *mem = nullptr;
    HCCL_OK((HcclResult)HcommMemAlloc(&mem, bytes));
    HcclCommSymWindow in_world = nullptr, in_tp = nullptr, found = nullptr;
    HCCL_OK(HcclCommSymWinRegister(world, mem, bytes, &in_world, 1));
    HCCL_OK(HcclCommSymWinRegister(tp, mem, bytes, &in_tp, 1));
    CHECK(in_world != nullptr && in_tp != nullptr && in_world != in_tp);
    size_t offset = 0;
    char *at = (char *)mem + 4096;
    HCCL_OK(HcclCommSymWinGet(world, at, 64, &found, &offset));
    CHECK(found == in_world && offset == 4096);
    HCCL_OK(HcclCommSymWinGet(tp, at, 64, &found, &offset));
    CHECK(found == in_tp && offset == 4096);
    EXPECT_HCCL(HcclCommSymWinGet(dp, at, 64, &found, &offset), HCCL_E_NOT_FOUND);

    const uint64_t count = 1024;
    float *send = (float *)mem, *recv = (float *)((char *)mem + (1 << 20));
    upload(send, std::vector<float>(count, (float)(k.r + 1)));
    HCCL_OK(HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, tp, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    float pair = (float)(tp_ids[0] + tp_ids[1] + 2);
    for (float v : download<float>(recv, count)) CHECK(v == pair);
    HCCL_OK(HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, world,
                          k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    for (float v : download<float>(recv, count)) CHECK(v == 10.0f);
    // DP: the same memory is not in any window of it, so this stages; the answer is the same.
    HCCL_OK(HcclAllGather(send, recv, count, HCCL_DATA_TYPE_FP32, dp, k.stream));
    ACL_OK(aclrtSynchronizeStream(k.stream));
    std::vector<float> gathered = download<float>(recv, 2 * count);
    CHECK(gathered[0] == (float)(dp_ids[0] + 1) && gathered[count] == (float)(dp_ids[1] + 1));

    HCCL_OK(HcclCommSymWinDeregister(in_tp));
    HCCL_OK(HcclCommSymWinDeregister(in_world));
    HCCL_OK((HcclResult)HcommMemFree(mem));
    HCCL_OK(HcclCommDestroy(dp));
    HCCL_OK(HcclCommDestroy(tp));
}

// The host function a captured step starts with: counts its calls.
void count_call(void *calls) { ++*static_cast<int *>(calls); }

// A captured step of a host function, a device copy, an AllReduce and an AllGather on a window
// and a ring of sends and receives, across two streams joined by events (the cross-stream
// guide's shape), replayed 100 times and checked each time; then the codes of what capture forbids. Last, rank 3 leaves and the
// others' next replay fails at once, naming it. Returns with k.comm NULL on rank 3.
void graph_capture(Rank &k)
{
    aclrtStream side = nullptr;
    ACL_OK(aclrtCreateStream(&side));
    aclrtEvent joined = nullptr, back = nullptr, plain = nullptr;
    ACL_OK(aclrtCreateEventExWithFlag(&joined, ACL_EVENT_SYNC));
    ACL_OK(aclrtCreateEventExWithFlag(&back, ACL_EVENT_SYNC));
    ACL_OK(aclrtCreateEvent(&plain));
    const size_t bytes = 2 << 20;
    const uint64_t count = 256;
    void *mem = nullptr;
    HCCL_OK((HcclResult)HcommMemAlloc(&mem, bytes));
    HcclCommSymWindow win = nullptr;
    HCCL_OK(HcclCommSymWinRegister(k.comm, mem, bytes, &win, 1));
    float *pristine = (float *)mem, *work = pristine + count, *gathered = work + count;
    upload(pristine, std::vector<float>(count, (float)(k.r + 1)));
    int calls = 0;

    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
    aclmdlRI model = nullptr;
    ACL_OK(aclmdlRICaptureGetInfo(k.stream, &status, &model));
    CHECK(status == ACL_MODEL_RI_CAPTURE_STATUS_NONE && model == nullptr);
    EXPECT_ACL(aclmdlRICaptureBegin(nullptr, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_ERROR_INVALID_PARAM);
    ACL_OK(aclmdlRICaptureBegin(k.stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    EXPECT_ACL(aclmdlRICaptureBegin(k.stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), ACL_ERROR_RT_STREAM_CAPTURED);
    ACL_OK(aclrtLaunchHostFunc(k.stream, count_call, &calls));
    ACL_OK(aclrtMemcpyAsync(work, count * 4, pristine, count * 4, ACL_MEMCPY_DEVICE_TO_DEVICE, k.stream));
    ACL_OK(aclrtRecordEvent(joined, k.stream));
    ACL_OK(aclrtStreamWaitEvent(side, joined));
    ACL_OK(aclmdlRICaptureGetInfo(side, &status, nullptr));
    CHECK(status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    HCCL_OK(HcclAllReduce(work, work, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, k.comm, side));
    HCCL_OK(HcclAllGather(work, gathered, count, HCCL_DATA_TYPE_FP32, k.comm, side));
    float *ring = gathered + count * k.n;
    uint32_t next = (k.r + 1) % k.n, prev = (k.r + k.n - 1) % k.n;
    HcclSendRecvItem items[2] = {
        {HCCL_SEND, pristine, count, HCCL_DATA_TYPE_FP32, next},
        {HCCL_RECV, ring, count, HCCL_DATA_TYPE_FP32, prev},
    };
    HCCL_OK(HcclBatchSendRecv(items, 2, k.comm, side));
    ACL_OK(aclrtRecordEvent(back, side));
    ACL_OK(aclrtStreamWaitEvent(k.stream, back));
    // What capture forbids, each failing alone.
    EXPECT_ACL(aclrtSynchronizeStream(k.stream), ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT_ACL(aclrtSynchronizeStreamWithTimeout(side, 1000), ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT_ACL(aclrtSynchronizeDevice(), ACL_ERROR_RT_STREAM_CAPTURED);
    aclrtStreamStatus stream_status = ACL_STREAM_STATUS_RESERVED;
    EXPECT_ACL(aclrtStreamQuery(k.stream, &stream_status), ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT_ACL(aclrtSynchronizeEvent(joined), ACL_ERROR_RT_EVENT_CAPTURED);
    EXPECT_ACL(aclrtMemcpy(work, 4, pristine, 4, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    EXPECT_ACL(aclrtRecordEvent(plain, k.stream), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    float pageable[4] = {0, 0, 0, 0};
    EXPECT_ACL(aclrtMemcpyAsync(work, 16, pageable, 16, ACL_MEMCPY_HOST_TO_DEVICE, k.stream),
               ACL_ERROR_RT_PARAM_INVALID);
    EXPECT_ACL(aclrtDestroyStream(side), ACL_ERROR_RT_STREAM_CAPTURED);
    EXPECT_ACL(aclmdlRICaptureEnd(side, &model), ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED);
    ACL_OK(aclmdlRICaptureEnd(k.stream, &model));
    CHECK(model != nullptr && calls == 0);
    const float sum = (float)(k.n * (k.n + 1) / 2);
    for (int i = 1; i <= 100; i++) {
        ACL_OK(aclmdlRIExecuteAsync(model, k.stream));
        ACL_OK(aclrtSynchronizeStream(k.stream));
        CHECK(calls == i);
        for (float v : download<float>(gathered, count * k.n)) CHECK(v == sum);
        for (float v : download<float>(ring, count)) CHECK(v == (float)(prev + 1));
    }
    ACL_OK(aclmdlRIDestroy(model));
    // The graph, then the window, then the communicator.
    HCCL_OK(HcclCommSymWinDeregister(win));
    HCCL_OK((HcclResult)HcommMemFree(mem));
    if (k.r == 3) {
        HCCL_OK(HcclCommDestroy(k.comm));
        k.comm = nullptr;
    } else {
        DevBuf buf(count * 4);
        ACL_OK(aclmdlRICaptureBegin(k.stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
        HCCL_OK(HcclAllReduce(buf.dev, buf.dev, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, k.comm, k.stream));
        ACL_OK(aclmdlRICaptureEnd(k.stream, &model));
        auto started = std::chrono::steady_clock::now();
        ACL_OK(aclmdlRIExecuteAsync(model, k.stream));
        EXPECT_ACL(aclrtSynchronizeStream(k.stream), ACL_ERROR_RT_INTERNAL_ERROR);
        CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
        const char *why = aclGetRecentErrMsg();
        CHECK(why != nullptr && strstr(why, "[3]") != nullptr);
        ACL_OK(aclmdlRIDestroy(model));
    }
    ACL_OK(aclrtDestroyEvent(joined));
    ACL_OK(aclrtDestroyEvent(back));
    ACL_OK(aclrtDestroyEvent(plain));
    ACL_OK(aclrtDestroyStream(side));
}

int one_rank_of_a_job()
{
    g_rank = atoi(env("SYMHEAP_RANK"));
    Rank k{};
    k.r = (uint32_t)g_rank;
    k.n = (uint32_t)atoi(env("SYMHEAP_WORLD_SIZE"));
    uint32_t devices = 0;
    acl_basics(&devices);
    k.device = (int32_t)(k.r % devices);
    ACL_OK(aclrtSetDevice(k.device));
    device_basics();
    ACL_OK(aclrtCreateStream(&k.stream));
    ACL_OK(aclrtSetStreamFailureMode(k.stream, ACL_STOP_ON_FAILURE));
    EXPECT_ACL(aclrtSetStreamFailureMode(k.stream, 2), ACL_ERROR_RT_PARAM_INVALID);

    HcclRootInfo root;
    share_root_info(&root, env("SYMHEAP_ROOT_INFO"));
    HCCL_OK(HcclCommInitRootInfo(k.n, &root, k.r, &k.comm));

    memory_basics();
    comm_name(k);
    timed_all_reduce(k);
    stream_waits_for_event(k);
    all_gather_v(k);
    reduce_scatter_v(k);
    all_to_all_v(k);
    all_to_all_vc(k);
    all_to_all_v_in_window(k);
    windows_of_every_memory_kind(k);
    rooted(k);
    point_to_point(k);
    memory_range(k);
    sub_communicators(k);
    graph_capture(k);

    ACL_OK(aclrtDestroyStream(k.stream));
    if (k.comm != nullptr) HCCL_OK(HcclCommDestroy(k.comm));
    ACL_OK(aclrtResetDevice(k.device));
    ACL_OK(aclFinalize());
    EXPECT_ACL(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    printf("rank %u of %u: every check passed\n", k.r, k.n);
    return 0;
}

// HcclCommInitAll: one process, n devices, then one thread per device runs an AllReduce.
int init_all(uint32_t n)
{
    g_rank = 0;
    ACL_OK(aclInit(nullptr));
    std::vector<int32_t> devices(n);
    for (uint32_t i = 0; i < n; i++) devices[i] = (int32_t)(n - 1 - i);  // rank i on device n-1-i
    std::vector<HcclComm> comms(n, nullptr);
    EXPECT_HCCL(HcclCommInitAll(n, devices.data(), nullptr), HCCL_E_PTR);
    EXPECT_HCCL(HcclCommInitAll(0, devices.data(), comms.data()), HCCL_E_PARA);
    std::vector<int32_t> twice(n, 0);
    EXPECT_HCCL(HcclCommInitAll(n, twice.data(), comms.data()), HCCL_E_PARA);
    HCCL_OK(HcclCommInitAll(n, devices.data(), comms.data()));
    char first[COMM_NAME_MAX_LENGTH] = {0};
    HCCL_OK(HcclGetCommName(comms[0], first));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = n, size = 0;
        HCCL_OK(HcclGetRankId(comms[i], &id));
        HCCL_OK(HcclGetRankSize(comms[i], &size));
        CHECK(id == i && size == n);
        char name[COMM_NAME_MAX_LENGTH] = {0};
        HCCL_OK(HcclGetCommName(comms[i], name));
        CHECK(strcmp(name, first) == 0);
    }
    std::vector<int> ok(n, 0);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < n; i++) {
        threads.emplace_back([&, i] {
            ACL_OK(aclrtSetDevice(devices[i]));
            aclrtStream stream;
            ACL_OK(aclrtCreateStream(&stream));
            const uint64_t count = 1024;
            DevBuf buf(count * 8);
            std::vector<int64_t> mine(count, (int64_t)i + 1);
            upload(buf.dev, mine);
            HCCL_OK(HcclAllReduce(buf.dev, buf.dev, count, HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM,
                                  comms[i], stream));
            ACL_OK(aclrtSynchronizeStream(stream));
            std::vector<int64_t> got = download<int64_t>(buf.dev, count);
            for (int64_t v : got) CHECK(v == (int64_t)(n * (n + 1) / 2));
            ACL_OK(aclrtDestroyStream(stream));
            HCCL_OK(HcclCommDestroy(comms[i]));
            ACL_OK(aclrtResetDevice(devices[i]));
            ok[i] = 1;
        });
    }
    for (auto &t : threads) t.join();
    for (int v : ok) CHECK(v == 1);
    ACL_OK(aclFinalize());
    printf("HcclCommInitAll: %u communicators in one process, AllReduce correct on each\n", n);
    return 0;
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "init-all") == 0) {
        return init_all((uint32_t)atoi(argv[2]));
    }
    return one_rank_of_a_job();
}
