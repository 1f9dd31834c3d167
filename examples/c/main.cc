// One rank of a CANN program under `symheap-run` (or any launcher that sets the same
// variables): rank 0 makes the root info and writes its raw bytes to the file that
// SYMHEAP_ROOT_INFO names; the other ranks wait for that file and read it; every rank joins
// and all-reduces its rank number. Builds and runs unchanged on CANN and on symheap's
// emulator (alloc-tests/emu-cdylib/install.sh):
//
//   source $PREFIX/set_env.sh
//   g++ main.cc -I$ASCEND_HOME_PATH/include -L$ASCEND_HOME_PATH/lib64 -lhccl -lascendcl -o main
//   symheap-run -n 4 ./main
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <acl/acl.h>
#include <hccl/hccl.h>

#define CHECK(call)                                                           \
    do {                                                                      \
        int e_ = static_cast<int>(call);                                      \
        if (e_ != 0) {                                                        \
            std::fprintf(stderr, "%s failed: %d\n", #call, e_);               \
            std::exit(1);                                                     \
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

// Rank 0: write the root info to a private file beside `path` (mode 0600, as symheap's Rust
// ranks require of it), then hard-link it into place, so a reader never sees half a file and
// an existing file is never replaced. The others: wait (here up to 60 s) until the whole file
// is there, then read it.
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

int main()
{
    uint32_t rank = std::atoi(env("SYMHEAP_RANK"));
    uint32_t ranks = std::atoi(env("SYMHEAP_WORLD_SIZE"));
    int32_t device = std::atoi(env("SYMHEAP_DEVICE"));
    CHECK(aclInit(nullptr));
    CHECK(aclrtSetDevice(device));

    HcclRootInfo root;
    share_root_info(rank, &root, env("SYMHEAP_ROOT_INFO"));
    HcclComm comm;
    CHECK(HcclCommInitRootInfo(ranks, &root, rank, &comm));
    if (rank == 0) {
        // Every rank has joined: nobody needs the key any more.
        unlink(env("SYMHEAP_ROOT_INFO"));
    }

    aclrtStream stream;
    CHECK(aclrtCreateStream(&stream));
    void *buf;
    CHECK(aclrtMalloc(&buf, sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    float mine = static_cast<float>(rank);
    CHECK(aclrtMemcpy(buf, sizeof mine, &mine, sizeof mine, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(HcclAllReduce(buf, buf, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    CHECK(aclrtSynchronizeStream(stream));
    float sum = 0;
    CHECK(aclrtMemcpy(&sum, sizeof sum, buf, sizeof sum, ACL_MEMCPY_DEVICE_TO_HOST));
    float want = ranks * (ranks - 1) / 2.0f;
    std::printf("rank %u of %u: sum of ranks %g\n", rank, ranks, sum);

    CHECK(aclrtFree(buf));
    CHECK(aclrtDestroyStream(stream));
    CHECK(HcclCommDestroy(comm));
    CHECK(aclrtResetDevice(device));
    CHECK(aclFinalize());
    return sum == want ? 0 : 1;
}
