//! The C types of DLPack 1.x (`dlpack/dlpack.h` of dmlc/dlpack) that an exchange of a
//! versioned managed tensor uses, with their layouts pinned at compile time.

use std::ffi::c_void;

/// The DLPack version a managed tensor declares (`DLPackVersion`): a consumer refuses a
/// major version it does not know, and reads a newer minor one (new enumeration values only).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLPackVersion {
    /// The ABI version: 1 for `DLManagedTensorVersioned`.
    pub major: u32,
    /// Additions within the ABI (device types, data type codes, flags).
    pub minor: u32,
}

impl DLPackVersion {
    /// What symheap's exports declare: 1.3, the header whose rules they follow (strides
    /// always given, since 1.2). `kDLAscend` came later, an added enumeration value that the
    /// minor version does not need to announce to a consumer that knows it.
    pub const CURRENT: DLPackVersion = DLPackVersion { major: 1, minor: 3 };
}

/// A device type (`DLDeviceType`, a C `enum`, so 32 bits): the values symheap uses are
/// associated constants; any other value can be read from a foreign tensor.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDeviceType(pub u32);

impl DLDeviceType {
    /// `kDLCPU`: host memory, which a host consumer (NumPy, `ndarray`) reads. The
    /// emulator's device memory is host memory, so its exports say this.
    pub const CPU: DLDeviceType = DLDeviceType(1);
    /// `kDLExtDev`: the reserved extension device, as which `torch_npu` exchanges NPU
    /// tensors today.
    pub const EXT_DEV: DLDeviceType = DLDeviceType(12);
    /// `kDLAscend`: Huawei Ascend NPU device memory (dmlc/dlpack #189).
    pub const ASCEND: DLDeviceType = DLDeviceType(21);
}

/// Where a tensor's memory is (`DLDevice`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The kind of device.
    pub device_type: DLDeviceType,
    /// Which device of that kind; 0 for host memory.
    pub device_id: i32,
}

/// The code of a data type (`DLDataTypeCode`, stored in a `uint8_t`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataTypeCode(pub u8);

impl DLDataTypeCode {
    /// `kDLInt`: signed integers.
    pub const INT: DLDataTypeCode = DLDataTypeCode(0);
    /// `kDLUInt`: unsigned integers.
    pub const UINT: DLDataTypeCode = DLDataTypeCode(1);
    /// `kDLFloat`: IEEE floating point (half, single, double).
    pub const FLOAT: DLDataTypeCode = DLDataTypeCode(2);
    /// `kDLBfloat`: bfloat16.
    pub const BFLOAT: DLDataTypeCode = DLDataTypeCode(4);
}

/// An element type (`DLDataType`): code, bits per lane, lanes (1 for a scalar).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// The kind of number.
    pub code: DLDataTypeCode,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes per element: 1 but for vector types.
    pub lanes: u16,
}

/// A tensor's description (`DLTensor`), which owns nothing: its element `i` (a multi-index)
/// is at byte `data + byte_offset + sum(i[d] * strides[d]) * element size`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    /// The memory's base address (a device address off the host); null for a tensor of no
    /// element.
    pub data: *mut c_void,
    /// Where the memory is.
    pub device: DLDevice,
    /// How many dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` extents; may be null when `ndim` is 0.
    pub shape: *mut i64,
    /// `ndim` strides in elements (not bytes); since DLPack 1.2 never null when `ndim` is
    /// not 0.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// The deleter of a [`DLManagedTensorVersioned`]: frees the tensor and what keeps its
/// memory alive; the consumer calls it once, from any thread.
pub type DLDeleter = unsafe extern "C" fn(*mut DLManagedTensorVersioned);

/// A tensor with its owner (`DLManagedTensorVersioned`): what a DLPack 1.x producer hands a
/// consumer, who calls `deleter` once it no longer needs the memory.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The version; the fields up to `flags` keep their places in every later version.
    pub version: DLPackVersion,
    /// The producer's context (symheap's: what keeps the pool's block alive).
    pub manager_ctx: *mut c_void,
    /// Frees the tensor, `manager_ctx` and the struct itself; may be absent.
    pub deleter: Option<DLDeleter>,
    /// [`DLPACK_FLAG_BITMASK_READ_ONLY`], [`DLPACK_FLAG_BITMASK_IS_COPIED`], ...
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// A [`DLManagedTensorVersioned::flags`] bit: the consumer must not write the memory.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// A [`DLManagedTensorVersioned::flags`] bit: the memory is a copy the consumer alone owns.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;

// The C layouts (LP64): sizes, alignments and every field's offset, as `dlpack.h` lays them.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<DLPackVersion>() == 8 && align_of::<DLPackVersion>() == 4);
    assert!(offset_of!(DLPackVersion, minor) == 4);
    assert!(size_of::<DLDevice>() == 8 && align_of::<DLDevice>() == 4);
    assert!(offset_of!(DLDevice, device_id) == 4);
    assert!(size_of::<DLDataType>() == 4 && align_of::<DLDataType>() == 2);
    assert!(offset_of!(DLDataType, bits) == 1 && offset_of!(DLDataType, lanes) == 2);
    assert!(size_of::<DLTensor>() == 48 && align_of::<DLTensor>() == 8);
    assert!(offset_of!(DLTensor, data) == 0 && offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16 && offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24 && offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(align_of::<DLManagedTensorVersioned>() == 8);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<Option<DLDeleter>>() == size_of::<*mut c_void>());
};
