//! How ranks talk across processes: Unix `SOCK_SEQPACKET` sockets in the abstract namespace
//! (no file to clean up: the name vanishes with the last descriptor), messages that keep their
//! boundaries and carry file descriptors (`SCM_RIGHTS`, for memfds), and a small binary
//! encoding for what they carry.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The largest part of a message: far above what a rendezvous of 64 ranks sends in one (a
/// few KiB), and small enough that the receive buffer costs nothing measurable per message.
/// A larger message goes in parts ([`Conn::send`]).
const MAX_MESSAGE: usize = 16 << 10;
/// The most descriptors one part carries (the kernel's `SCM_MAX_FD` is 253). A job of more
/// ranks than that hands every rank one memfd of each rank (the staging buffers, a window's
/// memory): such a message goes in parts.
const MAX_FDS: usize = 253;
/// The first byte of a part of a message sent in parts, after which more parts follow. No
/// message that fits one part begins with it or [`LAST_PART`] (their first byte is a message
/// type, all below 0x20).
const MORE_PARTS: u8 = 0xC0;
/// The first byte of the last part of a message sent in parts.
const LAST_PART: u8 = 0xC1;
/// The largest message in parts: what 4096 ranks (the most a group may have) send in the
/// largest answer, a step's every deposit, with room to spare; a bound on what a peer can
/// make this process hold.
const MAX_WHOLE_MESSAGE: usize = 4 << 20;
/// The most descriptors a message in parts carries: two for each of 4096 ranks.
const MAX_WHOLE_FDS: usize = 8192;
/// How long a receiver waits for the next part of a message: the sender writes them back to
/// back, so a peer that stops in the middle of one is cut off rather than waited for.
const NEXT_PART_WITHIN: Duration = Duration::from_secs(10);

/// One end of a connection.
#[derive(Debug)]
pub(crate) struct Conn {
    fd: OwnedFd,
}

/// A message: its bytes and the descriptors that came with it.
pub(crate) struct Message {
    pub(crate) bytes: Vec<u8>,
    pub(crate) fds: Vec<OwnedFd>,
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: creating a socket touches no memory.
    let fd = check(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The address of abstract socket `name` (a leading NUL byte, then the name).
fn address(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if name.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket name too long",
        ));
    }
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *dst = b as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((addr, len as libc::socklen_t))
}

/// A listening socket.
pub(crate) struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Listens on abstract socket `name`.
    pub(crate) fn bind(name: &str) -> io::Result<Listener> {
        let fd = seqpacket()?;
        let (addr, len) = address(name)?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        check(unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) })?;
        // SAFETY: a bound socket.
        check(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
        Ok(Listener { fd })
    }

    /// Accepts one connection.
    pub(crate) fn accept(&self) -> io::Result<Conn> {
        // SAFETY: null address arguments are allowed; the result is a fresh descriptor.
        let fd = check(unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        })?;
        // SAFETY: a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Conn { fd })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Why [`Conn::connect`] made no connection.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The socket calls failed: nothing listens at the name (`ECONNREFUSED`), or the listener
    /// took no connection within the time given (`EAGAIN`: its backlog stayed full).
    Io(io::Error),
    /// A process of a user that is not admitted listens at the name (its process id and user
    /// id, by the kernel's word): nothing was sent to it.
    Stranger { pid: u32, uid: u32 },
}

impl Conn {
    /// Connects to abstract socket `name`, waiting at most `timeout` for room in the
    /// listener's backlog, and checks who listens before anything is sent: the process that
    /// made the listening socket must be of one of the `admitted` users (`SO_PEERCRED` on the
    /// connected socket: for a client, the listener's credentials). An abstract name belongs
    /// to whoever binds it first, so a name a job expects its own hub at may be held by anyone.
    pub(crate) fn connect(
        name: &str,
        admitted: &[u32],
        timeout: Duration,
    ) -> Result<Conn, ConnectError> {
        let fd = seqpacket().map_err(ConnectError::Io)?;
        let (addr, len) = address(name).map_err(ConnectError::Io)?;
        // A blocking connect waits while the listener's backlog is full (a listener that never
        // accepts keeps it full): bounded by a send timeout, then lifted for the messages.
        set_send_timeout(fd.as_fd(), timeout.max(Duration::from_millis(1)))
            .map_err(ConnectError::Io)?;
        loop {
            // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
            let ret = unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) };
            match check(ret) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ConnectError::Io(e)),
            }
        }
        set_send_timeout(fd.as_fd(), Duration::ZERO).map_err(ConnectError::Io)?;
        let conn = Conn { fd };
        let (pid, uid) = conn.peer().map_err(ConnectError::Io)?;
        if !admitted.contains(&uid) {
            return Err(ConnectError::Stranger { pid, uid });
        }
        Ok(conn)
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Sends one message with `fds` attached: in one part when it fits ([`MAX_MESSAGE`]
    /// bytes, [`MAX_FDS`] descriptors), else in parts that [`Conn::recv`] puts together.
    pub(crate) fn send(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if bytes.len() > MAX_WHOLE_MESSAGE || fds.len() > MAX_WHOLE_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "message too large",
            ));
        }
        if bytes.len() <= MAX_MESSAGE && fds.len() <= MAX_FDS {
            if matches!(bytes.first(), Some(&(MORE_PARTS | LAST_PART))) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a message may not begin with a part marker",
                ));
            }
            return self.send_part(bytes, fds);
        }
        let part_bytes = MAX_MESSAGE - 1;
        let parts = bytes
            .len()
            .div_ceil(part_bytes)
            .max(fds.len().div_ceil(MAX_FDS));
        let mut part = Vec::with_capacity(MAX_MESSAGE);
        for k in 0..parts {
            let these_bytes = bytes.chunks(part_bytes).nth(k).unwrap_or(&[]);
            let these_fds = fds.chunks(MAX_FDS).nth(k).unwrap_or(&[]);
            part.clear();
            part.push(if k + 1 == parts {
                LAST_PART
            } else {
                MORE_PARTS
            });
            part.extend_from_slice(these_bytes);
            self.send_part(&part, these_fds)?;
        }
        Ok(())
    }

    /// Sends one part: a message of the socket's own.
    fn send_part(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if fds.len() > MAX_FDS || bytes.len() > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "message too large",
            ));
        }
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let payload = size_of::<RawFd>() * raw.len();
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
        let mut control = vec![0u8; if raw.is_empty() { 0 } else { space }];
        // SAFETY: msghdr is plain old data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !raw.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len() as _;
            // SAFETY: the control buffer is CMSG_SPACE(payload) bytes, so the first header
            // and its data fit; the data is copied from `raw`, which holds `payload` bytes.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
                std::ptr::copy_nonoverlapping(
                    raw.as_ptr().cast::<u8>(),
                    libc::CMSG_DATA(cmsg),
                    payload,
                );
            }
        }
        loop {
            // SAFETY: `msg` points to the iovec and control buffer above, alive for the call.
            let sent =
                unsafe { libc::sendmsg(self.fd.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
            if sent >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Receives one message, putting one sent in parts together; `None` once the peer has
    /// closed the connection. A message in parts that breaks off (the next part does not come
    /// within [`NEXT_PART_WITHIN`], grows past [`MAX_WHOLE_MESSAGE`] or [`MAX_WHOLE_FDS`], or
    /// cannot be received) is an error, and the connection is shut down: what is left of the
    /// message would be read as the next one.
    pub(crate) fn recv(&self) -> io::Result<Option<Message>> {
        let Some(mut part) = self.recv_part()? else {
            return Ok(None);
        };
        if !matches!(part.bytes.first(), Some(&(MORE_PARTS | LAST_PART))) {
            return Ok(Some(part));
        }
        let whole = self.recv_rest(&mut part);
        if whole.is_err() {
            self.shutdown();
        }
        whole
    }

    /// The rest of a message in parts, from its first part `part`.
    fn recv_rest(&self, part: &mut Message) -> io::Result<Option<Message>> {
        let broken = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
        let mut whole = Message {
            bytes: Vec::new(),
            fds: Vec::new(),
        };
        loop {
            let last = part.bytes.first() == Some(&LAST_PART);
            whole
                .bytes
                .extend_from_slice(part.bytes.get(1..).unwrap_or(&[]));
            whole.fds.append(&mut part.fds);
            if whole.bytes.len() > MAX_WHOLE_MESSAGE || whole.fds.len() > MAX_WHOLE_FDS {
                return Err(broken("message in parts too large"));
            }
            if last {
                return Ok(Some(whole));
            }
            if poll_readable(&[self.fd()], NEXT_PART_WITHIN)?.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the rest of a message in parts did not come",
                ));
            }
            *part = self
                .recv_part()?
                .ok_or_else(|| broken("the peer closed the connection within a message"))?;
            if !matches!(part.bytes.first(), Some(&(MORE_PARTS | LAST_PART))) {
                return Err(broken("a message in parts broke off"));
            }
        }
    }

    /// Receives one part: a message of the socket's own.
    fn recv_part(&self) -> io::Result<Option<Message>> {
        let mut bytes = vec![0u8; MAX_MESSAGE];
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize;
        let mut control = vec![0u8; space];
        // SAFETY: msghdr is plain old data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        let got = loop {
            // SAFETY: `msg` points to buffers of the stated sizes, alive for the call.
            let got =
                unsafe { libc::recvmsg(self.fd.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC) };
            if got >= 0 {
                break got as usize;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::ConnectionReset => return Ok(None),
                _ => return Err(err),
            }
        };
        let mut fds = Vec::new();
        // SAFETY: the kernel filled the control buffer; CMSG_* walk it within its length, and
        // every SCM_RIGHTS descriptor received is a fresh one this process now owns.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for i in 0..len / size_of::<RawFd>() {
                        let fd = data
                            .add(i * size_of::<RawFd>())
                            .cast::<RawFd>()
                            .read_unaligned();
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            // The control buffer holds the most descriptors a message can carry, so the kernel
            // dropped descriptors it could not install: this process has no room for them.
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message truncated",
            ));
        }
        if got == 0 && fds.is_empty() {
            return Ok(None);
        }
        bytes.truncate(got);
        Ok(Some(Message { bytes, fds }))
    }

    /// The process id and user id of the process that made the other end (`SO_PEERCRED`:
    /// the kernel's word, not the peer's).
    pub(crate) fn peer(&self) -> io::Result<(u32, u32)> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` is a ucred of `len` bytes, which SO_PEERCRED fills.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&raw mut cred).cast(),
                &mut len,
            )
        })?;
        Ok((cred.pid as u32, cred.uid))
    }

    /// Whether a message (or the end of the connection) waits to be read, without waiting.
    pub(crate) fn is_readable(&self) -> bool {
        poll_readable(&[self.fd()], Duration::ZERO).is_ok_and(|r| !r.is_empty())
    }

    /// Whether the peer has closed the connection (without waiting, and without reading).
    pub(crate) fn is_closed(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout returns at once.
        let ready = unsafe { libc::poll(&raw mut p, 1, 0) };
        ready > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
    }

    /// Stops both directions, waking a thread blocked in [`Conn::recv`] (it gets `None`).
    pub(crate) fn shutdown(&self) {
        // SAFETY: shutting a socket down touches no memory.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// Sets `fd`'s send timeout (`SO_SNDTIMEO`), which also bounds a blocking `connect`; zero
/// waits without limit.
fn set_send_timeout(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a timeval of the stated size, which SO_SNDTIMEO reads.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Whether `e` says that a process ran out of file descriptors (its own limit, or the
/// system's).
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Waits until one of `fds` is readable (or hung up), at most `timeout`; the indices of those
/// that are.
pub(crate) fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<Vec<usize>> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `polls` holds `polls.len()` valid pollfd structs.
    let ret = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, ms) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::Interrupted {
            Ok(Vec::new())
        } else {
            Err(err)
        };
    }
    Ok(polls
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .map(|(i, _)| i)
        .collect())
}

/// A value that travels in a rendezvous step: its bytes, and the descriptors it carries.
pub(crate) trait Wire: Sized {
    /// Tells the kinds of value apart, so ranks that ran different operations under one step
    /// are noticed.
    const TAG: u8;
    /// Appends the value; descriptors go to `fds`, in order.
    fn put<'a>(&'a self, w: &mut Writer, fds: &mut Vec<BorrowedFd<'a>>);
    /// Reads a value written by `put`, taking its descriptors from `fds`.
    fn get(r: &mut Reader<'_>, fds: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self>;
}

impl Wire for () {
    const TAG: u8 = 1;
    fn put<'a>(&'a self, _: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {}
    fn get(_: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        Some(())
    }
}

/// What a step reports: done, or why not.
impl Wire for Result<(), String> {
    const TAG: u8 = 2;
    fn put<'a>(&'a self, w: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {
        match self {
            Ok(()) => w.u8(0),
            Err(why) => w.u8(1).blob(why.as_bytes()),
        };
    }
    fn get(r: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        match r.u8()? {
            0 => Some(Ok(())),
            _ => Some(Err(String::from_utf8_lossy(r.blob()?).into_owned())),
        }
    }
}

impl Wire for u64 {
    const TAG: u8 = 3;
    fn put<'a>(&'a self, w: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {
        w.u64(*self);
    }
    fn get(r: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        r.u64()
    }
}

/// Builds a message.
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend(v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend(v.to_le_bytes());
        self
    }
    /// A length-prefixed byte string.
    pub(crate) fn blob(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.bytes.extend(v);
        self
    }
}

/// Reads a message; every getter fails (`None`) past the end.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    }
    pub(crate) fn blob(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    /// A listener of a user that is not admitted is refused before anything is sent (here:
    /// this user, not admitted), and a listener whose backlog stays full (it never accepts)
    /// ends the connect by its timeout instead of blocking it.
    #[test]
    fn connect_checks_who_listens_and_waits_no_longer_than_told() {
        let name = format!("symheap-wire-test-stranger-{}", std::process::id());
        let listener = Listener::bind(&name).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let refused = Conn::connect(&name, &[me.wrapping_add(1)], Duration::from_secs(5));
        assert!(
            matches!(refused, Err(ConnectError::Stranger { pid, uid })
                if pid == std::process::id() && uid == me),
            "{refused:?}"
        );
        let taken = listener.accept().unwrap();
        assert!(taken.is_closed(), "the refused connection stays open");
        assert!(
            poll_readable(&[taken.fd()], Duration::ZERO).is_ok_and(|r| r.len() == 1)
                && taken.recv().unwrap().is_none(),
            "something was sent to a stranger"
        );
        // A backlog of 1 that nobody accepts from: the second connect finds it full.
        let name = format!("symheap-wire-test-full-{}", std::process::id());
        let full = seqpacket().unwrap();
        let (addr, len) = address(&name).unwrap();
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; then listening on it.
        unsafe {
            check(libc::bind(full.as_raw_fd(), (&raw const addr).cast(), len)).unwrap();
            check(libc::listen(full.as_raw_fd(), 0)).unwrap();
        }
        let timeout = Duration::from_millis(200);
        let _first = Conn::connect(&name, &[me], timeout);
        let started = std::time::Instant::now();
        let second = Conn::connect(&name, &[me], timeout);
        assert!(
            matches!(&second, Err(ConnectError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock),
            "{second:?}"
        );
        assert!(started.elapsed() < timeout + Duration::from_secs(1));
    }

    #[test]
    fn messages_keep_their_bounds_and_carry_descriptors() {
        let name = format!("symheap-wire-test-{}", std::process::id());
        let listener = Listener::bind(&name).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let client = Conn::connect(&name, &[me], Duration::from_secs(5)).unwrap();
        let server = listener.accept().unwrap();
        let memfd = crate::ipc::os::memfd(4096).unwrap();
        client.send(b"one", &[memfd.as_fd()]).unwrap();
        client.send(b"two", &[]).unwrap();
        let first = server.recv().unwrap().unwrap();
        assert_eq!((first.bytes.as_slice(), first.fds.len()), (&b"one"[..], 1));
        let second = server.recv().unwrap().unwrap();
        assert_eq!(
            (second.bytes.as_slice(), second.fds.len()),
            (&b"two"[..], 0)
        );
        // The same open file: a size set through one descriptor shows through the other.
        // SAFETY: ftruncate on a memfd this test owns.
        let truncated = unsafe { libc::ftruncate(first.fds[0].as_raw_fd(), 8192) };
        assert_eq!(truncated, 0);
        let size = std::fs::File::from(memfd).metadata().unwrap().len();
        assert_eq!(size, 8192);
        drop(client);
        assert!(
            server.recv().unwrap().is_none(),
            "end of stream after close"
        );
        let mut w = Writer::default();
        w.u8(1).u32(2).u64(3).blob(b"xyz");
        let mut r = Reader::new(&w.bytes);
        assert_eq!((r.u8(), r.u32(), r.u64()), (Some(1), Some(2), Some(3)));
        assert_eq!(r.blob(), Some(&b"xyz"[..]));
        assert!(r.u8().is_none());
    }

    /// A message with more descriptors than one part carries and more bytes than one part
    /// holds arrives whole, between messages that fit one part; a message may not begin with
    /// a part marker.
    #[test]
    fn a_message_too_large_for_one_part_goes_in_parts_and_arrives_whole() {
        let name = format!("symheap-wire-test-parts-{}", std::process::id());
        let listener = Listener::bind(&name).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let client = Conn::connect(&name, &[me], Duration::from_secs(5)).unwrap();
        let server = listener.accept().unwrap();
        let memfds: Vec<OwnedFd> = (0..300)
            .map(|_| crate::ipc::os::memfd(4096).unwrap())
            .collect();
        // Each memfd sized differently, to tell them apart on the other side.
        for (k, fd) in memfds.iter().enumerate() {
            // SAFETY: ftruncate on a memfd this test owns.
            let sized = unsafe { libc::ftruncate(fd.as_raw_fd(), 4096 * (k as i64 + 1)) };
            assert_eq!(sized, 0);
        }
        let big: Vec<u8> = (0..3 * MAX_MESSAGE + 5).map(|i| (i % 251) as u8).collect();
        let fds: Vec<BorrowedFd<'_>> = memfds.iter().map(AsFd::as_fd).collect();
        let sender = std::thread::scope(|s| {
            let sent = s.spawn(|| {
                client.send(b"before", &[]).unwrap();
                client.send(&big, &fds).unwrap();
                client.send(b"after", &[]).unwrap();
            });
            let before = server.recv().unwrap().unwrap();
            assert_eq!(before.bytes, b"before");
            let whole = server.recv().unwrap().unwrap();
            assert_eq!(whole.bytes, big);
            assert_eq!(whole.fds.len(), 300);
            for (k, fd) in whole.fds.into_iter().enumerate() {
                let size = std::fs::File::from(fd).metadata().unwrap().len();
                assert_eq!(size, 4096 * (k as u64 + 1), "descriptor {k} out of order");
            }
            let after = server.recv().unwrap().unwrap();
            assert_eq!(after.bytes, b"after");
            sent.join()
        });
        sender.unwrap();
        let refused = client.send(&[MORE_PARTS, 1], &[]).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
    }
}
