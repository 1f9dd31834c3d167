//! Reading a launcher's numeric variables (a rank, a world size, a device), each from the first
//! of several names that is set: shared by the root-info bootstrap and the rank-table one.

use std::ffi::OsString;

use crate::{Error, Result};

/// The first of `names` that is set, parsed as a `u32`: `None` when none is set.
pub(super) fn number(
    var: &impl Fn(&str) -> Option<OsString>,
    names: &[&'static str],
) -> Result<Option<(&'static str, u32)>> {
    let Some((name, value)) = names
        .iter()
        .find_map(|&name| Some((name, var(name).filter(|v| !v.is_empty())?)))
    else {
        return Ok(None);
    };
    let parsed = value.to_str().and_then(|v| v.trim().parse::<u32>().ok());
    match parsed {
        Some(n) => Ok(Some((name, n))),
        None => Err(Error::invalid(format!(
            "{name}={} is not a non-negative integer",
            value.to_string_lossy()
        ))),
    }
}
