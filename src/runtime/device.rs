//! Device selection and device properties.

use super::Runtime;
use super::calls;
use crate::sys::{aclrtMemAttr, aclrtMemGranularityOptions, aclrtPhysicalMemProp};
use crate::{Error, Result};

impl Runtime {
    /// Binds the calling thread to `device` (`aclrtSetDevice`).
    ///
    /// # Errors
    /// The runtime's error for an invalid device id.
    pub fn set_device(&self, device: u32) -> Result<()> {
        let id = i32::try_from(device)
            .map_err(|_| crate::Error::invalid(format!("device id {device} out of range")))?;
        // SAFETY: plain value argument.
        unsafe { calls::aclrtSetDevice(self, id) }
    }

    /// The device bound to the calling thread (`aclrtGetDevice`).
    ///
    /// # Errors
    /// The runtime's error when no device is bound.
    pub fn current_device(&self) -> Result<u32> {
        let mut id = -1;
        // SAFETY: valid out-pointer.
        unsafe { calls::aclrtGetDevice(self, &mut id) }?;
        Ok(id as u32)
    }

    /// The recommended allocation granularity of huge-page HBM on `device` (2 MiB on Ascend).
    ///
    /// # Errors
    /// The runtime's error.
    pub fn granularity(&self, device: u32) -> Result<u64> {
        let mut prop = aclrtPhysicalMemProp::device_huge(device);
        let mut granularity = 0usize;
        // SAFETY: valid property struct and out-pointer.
        unsafe {
            calls::aclrtMemGetAllocationGranularity(
                self,
                &mut prop,
                aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                &mut granularity,
            )
        }?;
        Ok(granularity as u64)
    }

    /// `bytes` rounded up to a whole number of granules of `device`, at least one: a size that
    /// [`Mapping::allocate`](crate::raw::Mapping::allocate) accepts.
    ///
    /// # Errors
    /// The runtime's error from the granularity query; [`Error::InvalidArgument`] if the
    /// rounded size overflows.
    pub fn round_to_granularity(&self, bytes: u64, device: u32) -> Result<u64> {
        let granularity = self.granularity(device)?;
        bytes
            .max(1)
            .checked_next_multiple_of(granularity)
            .ok_or_else(|| Error::invalid(format!("{bytes} bytes overflow when rounded up")))
    }

    /// `(free, total)` bytes of huge-page HBM on the current device (`aclrtGetMemInfo`).
    ///
    /// # Errors
    /// The runtime's error.
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        unsafe {
            calls::aclrtGetMemInfo(self, aclrtMemAttr::ACL_HBM_MEM_HUGE, &mut free, &mut total)
        }?;
        Ok((free as u64, total as u64))
    }
}
