//! The system calls device memory is made of: address-space reservations (`mmap` PROT_NONE),
//! physical memory (`memfd`), and fixed mappings of one into the other.
//!
//! Everything unsafe about raw address ranges is here, so the rest of the emulator deals in
//! checked ranges only.

use std::io;

use crate::base::counters::MEMFD_NAME;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An owned range of address space, unmapped on drop.
///
/// Made either as a PROT_NONE reservation ([`reserve`]) or as a shared mapping of a memfd
/// ([`map_shared`]). Fixed mappings placed inside a reservation are removed with it.
#[derive(Debug)]
pub(crate) struct Space {
    addr: usize,
    len: usize,
}

impl Space {
    /// The first byte of the range.
    pub(crate) fn addr(&self) -> usize {
        self.addr
    }

    /// The length of the range in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `reserve` or `map_shared` and is owned by this value
        // alone; nothing refers to it once its owner is dropped.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// Reserves `len` bytes of address space aligned to `align` (a power of two), inaccessible
/// (PROT_NONE) and without swap reservation, so untouched space costs nothing.
pub(crate) fn reserve(len: usize, align: usize) -> io::Result<Space> {
    debug_assert!(align.is_power_of_two());
    let total = len
        .checked_add(align)
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
    let raw = map_anonymous(total, libc::PROT_NONE)?;
    let aligned = raw.next_multiple_of(align);
    // Trim the slack on both sides so exactly `len` aligned bytes stay reserved.
    let head = aligned - raw;
    let tail = total - head - len;
    if head > 0 {
        // SAFETY: [raw, aligned) is part of the mapping just made and owned by nobody else.
        unsafe { libc::munmap(raw as *mut libc::c_void, head) };
    }
    if tail > 0 {
        // SAFETY: [aligned + len, raw + total) is likewise part of the fresh mapping.
        unsafe { libc::munmap((aligned + len) as *mut libc::c_void, tail) };
    }
    Ok(Space { addr: aligned, len })
}

fn map_anonymous(len: usize, prot: libc::c_int) -> io::Result<usize> {
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no
    // existing memory.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(ptr as usize)
}

/// Creates `len` bytes of shareable physical memory: a memfd whose pages are allocated lazily,
/// sealed against shrinking, so that no process it is shared with can pull pages from under
/// another's mapping (a SIGBUS there).
pub(crate) fn memfd(len: usize) -> io::Result<OwnedFd> {
    memfd_named(MEMFD_NAME, len)
}

/// [`memfd`] under another name than the physical memory's (which the leak checks count).
pub(crate) fn memfd_named(name: &std::ffi::CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated string; flags are valid.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let len =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // SAFETY: ftruncate on a valid, owned descriptor.
    if unsafe { libc::ftruncate(owned.as_raw_fd(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a valid, owned descriptor.
    if unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}

/// Checks, before mapping `[0, end)` of `fd` shared, that nobody can make that range go away:
/// `fd` is a memfd sealed against shrinking (as [`memfd`] makes them) at least `end` bytes
/// long. A peer's descriptor that is not (a plain file, a pipe, a memfd it may truncate, one
/// too small) is refused with `InvalidData`, where mapping it would risk a SIGBUS.
fn check_shared(fd: BorrowedFd<'_>, end: usize) -> io::Result<()> {
    // SAFETY: F_GET_SEALS reads a property of a valid descriptor.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shared memory that is not a memfd sealed against shrinking",
        ));
    }
    let size = file_size(fd)?;
    if size < end as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("shared memory of {size} bytes where {end} are needed"),
        ));
    }
    Ok(())
}

/// A descriptor that becomes readable when process `pid` ends (`pidfd_open`): unlike a
/// socket, which a `fork()`ed child may hold open after its parent is gone. `None` where the
/// kernel (before 5.3) or a tool such as valgrind lacks the call: then only the socket tells.
///
/// # Errors
/// `ESRCH` when the process is gone already.
pub(crate) fn pidfd(pid: u32) -> io::Result<Option<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a fresh descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
}

/// The size in bytes of the file (a memfd) `fd` names. (Without a copy of the descriptor,
/// which a process at its descriptor limit could not make.)
pub(crate) fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    fstat(fd).map(|st| st.st_size as u64)
}

/// What names the file (a memfd) `fd` refers to, whichever descriptor or process holds it:
/// its device and inode numbers.
pub(crate) fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    fstat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// `fstat` of `fd`.
fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: stat is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes the struct given, for a valid descriptor.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Maps the first `len` bytes of `fd` read/write and shared, where the kernel chooses.
pub(crate) fn map_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Space> {
    map_shared_at(fd, 0, len)
}

/// Maps bytes `[offset, offset + len)` of `fd` (`offset` a page multiple) read/write and
/// shared, where the kernel chooses.
pub(crate) fn map_shared_at(fd: BorrowedFd<'_>, offset: usize, len: usize) -> io::Result<Space> {
    check_shared(fd, offset.saturating_add(len))?;
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a fresh shared mapping at an address of the kernel's choosing touches no
    // existing memory.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd.as_raw_fd(),
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Space {
        addr: ptr as usize,
        len,
    })
}

/// A field of `/proc/meminfo` (`"MemTotal"`, `"MemAvailable"`) in bytes.
pub(crate) fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
    })?;
    kib.checked_mul(1024)
}

/// 16 random bytes from the kernel.
pub(crate) fn random_bytes() -> io::Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    // SAFETY: the buffer is valid for 16 bytes of writes.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes)
}

/// Maps `[offset, offset + len)` of `fd` read/write and shared at exactly `addr`, replacing
/// whatever was mapped there.
///
/// # Safety
/// `[addr, addr + len)` must lie inside a [`Space`] reservation owned by the emulator and must
/// not hold memory that anything still reads or writes through a Rust reference.
pub(crate) unsafe fn map_fixed(
    addr: usize,
    len: usize,
    fd: BorrowedFd<'_>,
    offset: usize,
) -> io::Result<()> {
    check_shared(fd, offset.saturating_add(len))?;
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the caller promises the range is ours to replace; MAP_FIXED places the shared
    // mapping exactly there.
    let ptr = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    debug_assert_eq!(ptr as usize, addr);
    Ok(())
}

/// Turns `[addr, addr + len)` back into inaccessible reserved space, dropping whatever was
/// mapped there (the physical pages survive as long as their memfd or another mapping does).
///
/// # Safety
/// As for [`map_fixed`]: the range lies inside an emulator-owned reservation and nothing
/// accesses it any more.
pub(crate) unsafe fn unmap_to_reserved(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: the caller promises the range is ours; this replaces it with a fresh PROT_NONE
    // anonymous mapping, which keeps the address space reserved.
    let ptr = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sleeps while `word` holds `seen`, at most `timeout` (or until a [`futex_wake`] on it, from
/// any process that maps the same memory).
pub(crate) fn futex_wait(
    word: &std::sync::atomic::AtomicU32,
    seen: u32,
    timeout: std::time::Duration,
) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT only reads the aligned 32-bit word and the timespec; it returns on a
    // wake, a timeout, a signal or a changed value, and never writes memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &raw const ts,
        )
    };
}

/// Wakes every thread, of any process, sleeping in [`futex_wait`] on `word`.
pub(crate) fn futex_wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the word's address as a key.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}
