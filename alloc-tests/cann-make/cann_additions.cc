// One rank of a 4-rank CANN program (launched by symheap-run or alloc-tests' Job, which set
// SYMHEAP_RANK, SYMHEAP_WORLD_SIZE, SYMHEAP_DEVICE and SYMHEAP_ROOT_INFO) that checks, through
// the C ABI and CANN's declarations, the calls added for CANN's 2026 tools to the emulator, with the codes
// CANN gives: HcclGetCommConfigCapability, aclrtCreateEventWithFlag / aclrtResetEvent, the
// profiling API with nothing to profile (acl/acl_prof.h, libmsprofiler.so), and
// HcclReduceScatter / HcclAlltoAll / HcclBarrier / HcclGetCommAsyncError, which the library
// exported before its headers declared them. Built by the Makefile beside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <acl/acl.h>
#include <acl/acl_prof.h>
#include <hccl/hccl.h>

static int failures = 0;

// A call that must succeed: the program stops if it does not.
#define CHECK(call)                                                           \
    do {                                                                      \
        int e_ = static_cast<int>(call);                                      \
        if (e_ != 0) {                                                        \
            std::fprintf(stderr, "%s failed: %d\n", #call, e_);               \
            std::exit(1);                                                     \
        }                                                                     \
    } while (0)

// A call whose code must be `want`.
#define EXPECT_CODE(call, want)                                               \
    do {                                                                      \
        long got_ = static_cast<long>(call);                                  \
        if (got_ != static_cast<long>(want)) {                                \
            std::fprintf(stderr, "%s returned %ld, not %s (%ld)\n", #call,    \
                         got_, #want, static_cast<long>(want));               \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define EXPECT(cond)                                                          \
    do {                                                                      \
        if (!(cond)) {                                                        \
            std::fprintf(stderr, "%s:%d: %s is false\n", __FILE__, __LINE__,  \
                         #cond);                                              \
            failures++;                                                       \
        }                                                                     \
    } while (0)

static const char *env(const char *name)
{
    const char *v = std::getenv(name);
    if (v == nullptr) {
        std::fprintf(stderr, "%s is not set: run under symheap-run\n", name);
        std::exit(1);
    }
    return v;
}

// The root-info protocol of symheap-run (see the README): rank 0 publishes the raw bytes with
// a hard link, the others wait for the whole file.
static void share_root_info(uint32_t rank, HcclRootInfo *root, const std::string &path)
{
    if (rank == 0) {
        CHECK(HcclGetRootInfo(root));
        std::string tmp = path + ".tmp";
        int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
        bool ok = fd >= 0 && write(fd, root, sizeof *root) == (ssize_t)sizeof *root;
        ok = fd >= 0 && close(fd) == 0 && ok;
        ok = ok && link(tmp.c_str(), path.c_str()) == 0;
        unlink(tmp.c_str());
        if (!ok) {
            std::perror("publishing the root info");
            std::exit(1);
        }
        return;
    }
    for (int tries = 0; tries < 60000; tries++) {
        struct stat st;
        if (stat(path.c_str(), &st) == 0 && st.st_size == (off_t)sizeof *root) {
            FILE *f = std::fopen(path.c_str(), "rb");
            bool read = f != nullptr && std::fread(root, sizeof *root, 1, f) == 1;
            if (f != nullptr) {
                std::fclose(f);
            }
            if (read) {
                return;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::fprintf(stderr, "rank %u: no root info at %s\n", rank, path.c_str());
    std::exit(1);
}

// Events of aclrtCreateEventWithFlag record, wait and time like the others; aclrtResetEvent
// returns one to "never recorded" in its stream's order.
static void events(aclrtStream stream)
{
    aclrtEvent start, end;
    EXPECT_CODE(aclrtCreateEventWithFlag(nullptr, ACL_EVENT_SYNC), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtCreateEventWithFlag(&start, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE));
    CHECK(aclrtCreateEventWithFlag(&end, ACL_EVENT_TIME_LINE));
    CHECK(aclrtRecordEvent(start, stream));
    CHECK(aclrtRecordEvent(end, stream));
    CHECK(aclrtSynchronizeEvent(end));
    float ms = -1;
    CHECK(aclrtEventElapsedTime(&ms, start, end));
    EXPECT(ms >= 0);
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    CHECK(aclrtQueryEventStatus(start, &status));
    EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE);

    EXPECT_CODE(aclrtResetEvent(nullptr, stream), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtResetEvent(start, stream));
    CHECK(aclrtSynchronizeStream(stream));
    // Reset: no record to time from any more.
    EXPECT_CODE(aclrtEventElapsedTime(&ms, start, end), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID);
    // A wait on a reset event passes at once, as on a new one.
    aclrtStream other;
    CHECK(aclrtCreateStream(&other));
    CHECK(aclrtStreamWaitEvent(other, start));
    CHECK(aclrtSynchronizeStream(other));
    // A record queued after the reset is the event's again.
    CHECK(aclrtResetEvent(start, stream));
    CHECK(aclrtRecordEvent(start, stream));
    CHECK(aclrtRecordEvent(end, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtEventElapsedTime(&ms, start, end));
    CHECK(aclrtDestroyStream(other));
    CHECK(aclrtDestroyEvent(start));
    CHECK(aclrtDestroyEvent(end));
    EXPECT_CODE(aclrtResetEvent(start, stream), ACL_ERROR_RT_INVALID_HANDLE);
}

// msprofiler's states and checks, with nothing collected and nothing written.
static void profiling(int32_t device, const std::string &path)
{
    EXPECT_CODE(aclprofFinalize(), ACL_ERROR_PROF_NOT_RUN);
    EXPECT_CODE(aclprofInit(nullptr, 0), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclprofInit(path.c_str(), 0), ACL_ERROR_INVALID_PARAM);
    CHECK(aclprofInit(path.c_str(), path.size()));
    EXPECT_CODE(aclprofInit(path.c_str(), path.size()), ACL_ERROR_REPEAT_INITIALIZE);

    uint32_t devices[2] = {static_cast<uint32_t>(device), static_cast<uint32_t>(device)};
    uint64_t data = ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_HCCL_TRACE;
    // Listed twice, out of range, or none without ACL_PROF_MSPROFTX: no configuration.
    EXPECT(aclprofCreateConfig(devices, 2, ACL_AICORE_PIPE_UTILIZATION, nullptr, data) == nullptr);
    uint32_t far = 100000;
    EXPECT(aclprofCreateConfig(&far, 1, ACL_AICORE_PIPE_UTILIZATION, nullptr, data) == nullptr);
    EXPECT(aclprofCreateConfig(nullptr, 0, ACL_AICORE_NONE, nullptr, data) == nullptr);
    EXPECT(aclGetRecentErrMsg() != nullptr);
    aclprofConfig *tx = aclprofCreateConfig(nullptr, 0, ACL_AICORE_NONE, nullptr, ACL_PROF_MSPROFTX);
    EXPECT(tx != nullptr);
    aclprofConfig *config =
        aclprofCreateConfig(devices, 1, ACL_AICORE_PIPE_UTILIZATION, nullptr, data);
    EXPECT(config != nullptr);

    EXPECT_CODE(aclprofStart(nullptr), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclprofStop(config), ACL_ERROR_PROF_NOT_RUN);
    EXPECT_CODE(aclprofStart(config), ACL_SUCCESS);
    EXPECT_CODE(aclprofStart(config), ACL_ERROR_PROF_ALREADY_RUN);
    EXPECT_CODE(aclprofStop(config), ACL_SUCCESS);
    EXPECT_CODE(aclprofStop(config), ACL_ERROR_PROF_NOT_RUN);

    EXPECT_CODE(aclprofSetConfig(ACL_PROF_STORAGE_LIMIT, "200MB", 5), ACL_SUCCESS);
    EXPECT_CODE(aclprofSetConfig(ACL_PROF_ARGS_MAX, "1", 1), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclprofSetConfig(ACL_PROF_STORAGE_LIMIT, nullptr, 0), ACL_ERROR_INVALID_PARAM);

    EXPECT_CODE(aclprofDestroyConfig(config), ACL_SUCCESS);
    EXPECT_CODE(aclprofDestroyConfig(config), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclprofStart(config), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclprofDestroyConfig(tx), ACL_SUCCESS);
    EXPECT_CODE(aclprofFinalize(), ACL_SUCCESS);
    EXPECT_CODE(aclprofFinalize(), ACL_ERROR_PROF_NOT_RUN);
    struct stat st;
    EXPECT(stat(path.c_str(), &st) != 0);
}

// Collectives the library always exported, called through the declarations hccl.h now has.
static void collectives(HcclComm comm, aclrtStream stream, uint32_t rank, uint32_t ranks)
{
    const uint64_t n = 4;
    std::vector<int32_t> send(n * ranks), got(n * ranks);
    void *sbuf, *rbuf;
    CHECK(aclrtMalloc(&sbuf, send.size() * sizeof(int32_t), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&rbuf, got.size() * sizeof(int32_t), ACL_MEM_MALLOC_HUGE_FIRST));

    // ReduceScatter: block b of rank r holds 100 * r + b; rank b gets the sum over r.
    for (uint64_t i = 0; i < send.size(); i++) {
        send[i] = static_cast<int32_t>(100 * rank + i / n);
    }
    CHECK(aclrtMemcpy(sbuf, send.size() * 4, send.data(), send.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(HcclReduceScatter(sbuf, rbuf, n, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(got.data(), n * 4, rbuf, n * 4, ACL_MEMCPY_DEVICE_TO_HOST));
    int32_t want = static_cast<int32_t>(100 * ranks * (ranks - 1) / 2 + ranks * rank);
    for (uint64_t i = 0; i < n; i++) {
        EXPECT(got[i] == want);
    }

    // AlltoAll: rank r's block d is 1000 * r + d; rank d receives block d of every rank.
    for (uint64_t i = 0; i < send.size(); i++) {
        send[i] = static_cast<int32_t>(1000 * rank + i / n);
    }
    CHECK(aclrtMemcpy(sbuf, send.size() * 4, send.data(), send.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(HcclAlltoAll(sbuf, n, HCCL_DATA_TYPE_INT32, rbuf, n, HCCL_DATA_TYPE_INT32, comm, stream));
    CHECK(HcclBarrier(comm, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtMemcpy(got.data(), got.size() * 4, rbuf, got.size() * 4, ACL_MEMCPY_DEVICE_TO_HOST));
    for (uint64_t i = 0; i < got.size(); i++) {
        EXPECT(got[i] == static_cast<int32_t>(1000 * (i / n) + rank));
    }
    HcclResult async = HCCL_E_INTERNAL;
    CHECK(HcclGetCommAsyncError(comm, &async));
    EXPECT(async == HCCL_SUCCESS);
    CHECK(aclrtFree(sbuf));
    CHECK(aclrtFree(rbuf));
}

int main()
{
    uint32_t rank = std::atoi(env("SYMHEAP_RANK"));
    uint32_t ranks = std::atoi(env("SYMHEAP_WORLD_SIZE"));
    int32_t device = std::atoi(env("SYMHEAP_DEVICE"));

    // hcomm's op_base.cc: every configuration field up to HCCL_COMM_CONFIG_RESERVED.
    uint32_t capability = HcclGetCommConfigCapability();
    EXPECT(capability == HCCL_COMM_CONFIG_RESERVED);
    EXPECT(capability > HCCL_COMM_CONFIG_BUFFER_NAME);

    CHECK(aclInit(nullptr));
    CHECK(aclrtSetDevice(device));
    aclrtStream stream;
    CHECK(aclrtCreateStream(&stream));
    events(stream);
    profiling(device, std::string(env("SYMHEAP_ROOT_INFO")) + ".prof-" + std::to_string(rank));

    HcclRootInfo root;
    share_root_info(rank, &root, env("SYMHEAP_ROOT_INFO"));
    HcclComm comm;
    CHECK(HcclCommInitRootInfo(ranks, &root, rank, &comm));
    if (rank == 0) {
        unlink(env("SYMHEAP_ROOT_INFO"));
    }
    collectives(comm, stream, rank, ranks);

    CHECK(aclrtDestroyStream(stream));
    CHECK(HcclCommDestroy(comm));
    CHECK(aclrtResetDevice(device));
    CHECK(aclFinalize());
    std::printf("rank %u: %d failures\n", rank, failures);
    return failures == 0 ? 0 : 1;
}
