//! `aclrtMemcpy` / `aclrtMemset` and their async forms: argument checks, then the copy on the
//! calling thread or on a stream.
//!
//! Device-side ranges are validated and pinned (see [`crate::acl::memory`]); host-side pointers are
//! trusted, as in C, except inside `aclrtMallocHost` allocations, whose ranges are checked and
//! pinned too (see [`crate::acl::host`]).
//!
//! An async copy between the device and pageable host memory (any host memory not from
//! `aclrtMallocHost`) is what hicann/runtime's `ApiErrorDecorator::MemcpyAsync` makes of it:
//! refused on a capturing stream, otherwise a synchronize of the stream and a synchronous
//! copy, so the host memory is free again when the call returns.

use crate::sys::{ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC, aclrtMemcpyKind};

use crate::acl::memory::{self, Pins};
use crate::base::errors::{AclResult, Fail, acl_non_null, param};
use crate::base::handle::StreamHandle;
use crate::{acl::graph, acl::host, acl::stream};
use std::ffi::c_void;
use std::sync::Arc;

/// A validated copy or fill, holding its device ranges pinned until dropped.
struct Op {
    dst: usize,
    /// Source address, or `None` for a fill.
    src: Option<usize>,
    value: u8,
    len: usize,
    /// A copy between the device and pageable host memory.
    pageable: bool,
    _pins: Pins,
}

impl Op {
    fn run(&self) {
        if let Some(src) = self.src {
            // SAFETY: device sides were checked to be wholly inside mapped read/write memory
            // and stay pinned (unmappable) until `self` is dropped (a captured copy's pins
            // live as long as its graph); host sides are valid for `len` bytes by the
            // contract of `memcpy` / `memcpy_async`, the only makers of a copy (a captured
            // one's until its graph is destroyed). `copy` tolerates overlap. Work racing on
            // the same device bytes from another stream is the caller's ordering bug and gives
            // torn data, as on a device.
            unsafe { std::ptr::copy(src as *const u8, self.dst as *mut u8, self.len) };
        } else {
            // SAFETY: the destination was checked to be wholly inside mapped device memory
            // or inside one live `aclrtMallocHost` allocation (`plan_set`), and stays pinned
            // (neither unmapped nor freed) until `self` is dropped.
            unsafe { std::ptr::write_bytes(self.dst as *mut u8, self.value, self.len) };
        }
    }
}

/// Pins a device side of a copy.
fn pin(what: &str, addr: usize, len: usize) -> AclResult<Pins> {
    memory::pin_range(addr, len).or_else(|e| param(format!("{what}: {e}")))
}

/// Pins a host side of a copy if it is in `aclrtMallocHost` memory (other host memory is
/// trusted, and pageable): whether it is.
fn pin_host(what: &str, addr: usize, len: usize, pins: &mut Pins) -> AclResult<bool> {
    match host::pin(addr, len) {
        None => Ok(false),
        Some(Ok(p)) => {
            pins.push(p);
            Ok(true)
        }
        Some(Err(e)) => param(format!("{what}: {e}")),
    }
}

/// Checks a memcpy; `None` when there is nothing to copy.
///
/// # Safety
/// The host sides of the copy (those `kind` names host memory) are valid for `count` bytes,
/// read or written as `kind` says, until the returned [`Op`] is dropped: `Op::run` writes and
/// reads through them unchecked (the device sides it checks and pins itself).
unsafe fn plan_copy(
    dst: usize,
    dest_max: usize,
    src: usize,
    count: usize,
    kind: aclrtMemcpyKind,
) -> AclResult<Option<Op>> {
    acl_non_null(dst, "dst")?;
    acl_non_null(src, "src")?;
    if count > dest_max {
        return param(format!("count {count} exceeds destMax {dest_max}"));
    }
    let (dst_dev, src_dev) = (
        memory::is_device_address(dst),
        memory::is_device_address(src),
    );
    let expected = match kind {
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_HOST => Some((false, false)),
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE => Some((true, false)),
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST => Some((false, true)),
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE => Some((true, true)),
        aclrtMemcpyKind::ACL_MEMCPY_DEFAULT => None,
        other => return param(format!("unknown aclrtMemcpyKind {}", other.0)),
    };
    // Not a let chain: those need Rust 1.88, and the crate builds with 1.85.
    if expected.is_some_and(|want| want != (dst_dev, src_dev)) {
        let side = |dev| if dev { "device" } else { "host" };
        return param(format!(
            "kind {} does not match the pointers: dst is {} memory, src is {} memory",
            kind.0,
            side(dst_dev),
            side(src_dev)
        ));
    }
    if count == 0 {
        return Ok(None);
    }
    let mut pins = Pins::default();
    let mut pinned_host = true;
    if dst_dev {
        pins.extend(pin("dst", dst, count)?);
    } else {
        pinned_host &= pin_host("dst", dst, count, &mut pins)?;
    }
    if src_dev {
        pins.extend(pin("src", src, count)?);
    } else {
        pinned_host &= pin_host("src", src, count, &mut pins)?;
    }
    Ok(Some(Op {
        dst,
        src: Some(src),
        value: 0,
        len: count,
        pageable: dst_dev != src_dev && !pinned_host,
        _pins: pins,
    }))
}

/// Checks a memset of device memory or of `aclrtMallocHost` memory (CANN's documentation
/// allows both; other host memory is refused); `None` when there is nothing to fill.
fn plan_set(dst: usize, max: usize, value: i32, count: usize) -> AclResult<Option<Op>> {
    acl_non_null(dst, "devPtr")?;
    if count > max {
        return param(format!("count {count} exceeds maxCount {max}"));
    }
    if count == 0 {
        return Ok(None);
    }
    let pins = if memory::is_device_address(dst) {
        pin("devPtr", dst, count)?
    } else {
        let mut pins = Pins::default();
        match host::pin(dst, count) {
            Some(Ok(p)) => pins.push(p),
            Some(Err(e)) => return param(format!("devPtr: {e}")),
            None => {
                return param(format!(
                    "devPtr {dst:#x} is neither device memory nor aclrtMallocHost memory"
                ));
            }
        }
        pins
    };
    Ok(Some(Op {
        dst,
        src: None,
        // C's memset semantics: the value converted to unsigned char.
        value: value as u8,
        len: count,
        pageable: false,
        _pins: pins,
    }))
}

/// `aclrtMemcpy`: synchronous, on the calling thread.
///
/// # Safety
/// `aclrtMemcpy`'s contract for host memory: where `dst` or `src` is host memory outside
/// `aclrtMallocHost` allocations (which, like device memory, are checked and need nothing),
/// it is valid for writing (`dst`) or reading (`src`) `count` bytes. Null pointers are refused.
pub(crate) unsafe fn memcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> AclResult {
    graph::check_unsafe_call("aclrtMemcpy")?;
    // SAFETY: this function's contract, which `Op::run` relies on: the host sides are valid
    // for `count` bytes until the copy has run (it runs before this returns).
    if let Some(op) = unsafe { plan_copy(dst as usize, dest_max, src as usize, count, kind) }? {
        op.run();
    }
    Ok(())
}

/// `aclrtMemset`: synchronous, on the calling thread.
pub(crate) fn memset(dst: usize, max: usize, value: i32, count: usize) -> AclResult {
    graph::check_unsafe_call("aclrtMemset")?;
    if let Some(op) = plan_set(dst, max, value, count)? {
        op.run();
    }
    Ok(())
}

/// Queues `op` on stream `handle`, or keeps it in the stream's capture (an empty op is still
/// a checked no-op). The stream is looked up before the op is planned, so a bad stream is the
/// error whatever the op.
fn enqueue(op: Option<Op>, stream: &stream::Stream, handle: StreamHandle) -> AclResult {
    let Some(op) = op else {
        return Ok(());
    };
    let op = Arc::new(op);
    graph::submit(
        stream,
        handle,
        Arc::new(move || {
            let op = op.clone();
            Ok(Box::new(move || {
                op.run();
                Ok(())
            }) as stream::Task)
        }),
    )
}

/// `aclrtMemcpyAsync`.
///
/// # Safety
/// `aclrtMemcpyAsync`'s contract for host memory: as [`memcpy`]'s, and the host memory stays
/// valid until the copy has run (for a captured copy, at every replay, until the graph is
/// destroyed). A copy of pageable memory runs before this returns.
pub(crate) unsafe fn memcpy_async(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: StreamHandle,
) -> AclResult {
    let s = stream::lookup(stream)?;
    // SAFETY: this function's contract, which `Op::run` relies on: the host sides stay valid
    // until the queued copy has run (a captured one's until its graph is destroyed).
    let op = match unsafe { plan_copy(dst as usize, dest_max, src as usize, count, kind) }? {
        Some(op) if op.pageable => op,
        op => return enqueue(op, &s, stream),
    };
    if s.capture().is_some() {
        return param(
            "an async copy of pageable host memory cannot be captured: copy from \
             aclrtMallocHost memory",
        );
    }
    stream::wait_for(&s, None)?;
    graph::check_unsafe_call("aclrtMemcpyAsync of pageable host memory").map_err(|f| Fail {
        code: ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
        ..f
    })?;
    op.run();
    Ok(())
}

/// `aclrtMemsetAsync`.
pub(crate) fn memset_async(
    dst: usize,
    max: usize,
    value: i32,
    count: usize,
    stream: StreamHandle,
) -> AclResult {
    let s = stream::lookup(stream)?;
    enqueue(plan_set(dst, max, value, count)?, &s, stream)
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr::null_mut;

    use crate::sys::*;
    use crate::testutil::{DevBuf, acl, assert_clean, ok};
    use crate::{GRANULARITY as G, test_lock};

    const PARAM: aclError = ACL_ERROR_RT_PARAM_INVALID;
    const NULL: aclError = ACL_ERROR_INVALID_PARAM;
    const H2D: aclrtMemcpyKind = aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE;
    const D2H: aclrtMemcpyKind = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST;
    const D2D: aclrtMemcpyKind = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE;
    const H2H: aclrtMemcpyKind = aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_HOST;
    const DEFAULT: aclrtMemcpyKind = aclrtMemcpyKind::ACL_MEMCPY_DEFAULT;

    #[test]
    fn memcpy_checks_kinds_and_ranges() {
        let _g = test_lock();
        let a = acl();
        let buf = DevBuf::new(0, G);
        let mut host = [7u8; 64];
        let h = host.as_mut_ptr().cast::<c_void>();
        let d = buf.ptr;
        // SAFETY: host pointers are valid for 64 bytes; device sides are validated.
        unsafe {
            let cp = a.aclrtMemcpy;
            assert_eq!(cp(null_mut(), 64, h, 64, H2D), NULL);
            assert_eq!(cp(d, 64, std::ptr::null(), 64, H2D), NULL);
            assert_eq!(cp(d, 63, h, 64, H2D), PARAM, "count > destMax");
            assert_eq!(cp(d, 64, h, 64, D2H), PARAM, "wrong direction");
            assert_eq!(cp(d, 64, h, 64, H2H), PARAM, "dst is device memory");
            assert_eq!(cp(h, 64, d, 64, D2D), PARAM, "dst is host memory");
            assert_eq!(cp(d, 64, h, 64, aclrtMemcpyKind(9)), PARAM);
            assert_eq!(
                cp(buf.at(G - 32), 64, h, 64, H2D),
                PARAM,
                "runs past the mapping"
            );
            ok(cp(d, 64, h, 64, H2D));
            ok(cp(buf.at(128), 64, d, 64, D2D));
            ok(cp(buf.at(256), 64, h, 0, DEFAULT));
            host = [0; 64];
            ok(cp(host.as_mut_ptr().cast(), 64, buf.at(128), 64, DEFAULT));
            assert_eq!(host, [7; 64]);
            let mut other = [1u8; 64];
            ok(cp(
                other.as_mut_ptr().cast(),
                64,
                host.as_ptr().cast(),
                64,
                H2H,
            ));
            assert_eq!(other, [7; 64]);

            let ms = a.aclrtMemset;
            assert_eq!(ms(null_mut(), 8, 0, 8), NULL);
            assert_eq!(ms(d, 4, 0, 8), PARAM, "count > maxCount");
            assert_eq!(ms(h, 8, 0, 8), PARAM, "host memory");
            assert_eq!(ms(buf.at(G - 4), 8, 0, 8), PARAM, "runs past the mapping");
            ok(ms(d, 8, 0x1AB, 8));
        }
        assert_eq!(
            buf.read::<u8>(0, 9),
            vec![0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 7]
        );
        buf.free();
        assert_clean();
    }

    #[test]
    fn unmapped_reserved_space_is_an_error_not_a_fault() {
        let _g = test_lock();
        let a = acl();
        let mut va = null_mut();
        let mut host = [0u8; 16];
        // SAFETY: the emulator validates the device side and refuses the unmapped range.
        unsafe {
            ok((a.aclrtReserveMemAddress)(&mut va, G, 0, null_mut(), 0));
            let h = host.as_mut_ptr().cast();
            assert_eq!((a.aclrtMemcpy)(h, 16, va, 16, DEFAULT), PARAM);
            assert_eq!((a.aclrtMemcpy)(va, 16, h, 16, DEFAULT), PARAM);
            assert_eq!((a.aclrtMemset)(va, 16, 0, 16), PARAM);
            ok((a.aclrtReleaseMemAddress)(va));
        }
        assert_clean();
    }

    #[test]
    fn copies_may_span_adjacent_mappings() {
        let _g = test_lock();
        let a = acl();
        let prop = aclrtPhysicalMemProp::device_huge(0);
        let (mut va, mut p1, mut p2) = (null_mut(), null_mut(), null_mut());
        let data: Vec<u8> = (0..=255).collect();
        let mut back = vec![0u8; 256];
        // SAFETY: valid out-pointers; device ranges are validated.
        unsafe {
            ok((a.aclrtReserveMemAddress)(&mut va, 2 * G, 0, null_mut(), 0));
            ok((a.aclrtMallocPhysical)(&mut p1, G, &prop, 0));
            ok((a.aclrtMallocPhysical)(&mut p2, G, &prop, 0));
            ok((a.aclrtMapMem)(va, G, 0, p1, 0));
            ok((a.aclrtMapMem)(va.wrapping_byte_add(G), G, 0, p2, 0));
            let mid = va.wrapping_byte_add(G - 128);
            ok((a.aclrtMemcpy)(mid, 256, data.as_ptr().cast(), 256, H2D));
            ok((a.aclrtMemcpy)(
                back.as_mut_ptr().cast(),
                256,
                mid,
                256,
                D2H,
            ));
            ok((a.aclrtUnmapMem)(va));
            ok((a.aclrtUnmapMem)(va.wrapping_byte_add(G)));
            ok((a.aclrtFreePhysical)(p1));
            ok((a.aclrtFreePhysical)(p2));
            ok((a.aclrtReleaseMemAddress)(va));
        }
        assert_eq!(back, data);
        assert_clean();
    }
}
