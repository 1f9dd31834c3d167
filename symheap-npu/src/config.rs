//! Settings read from the environment when the library first loads CANN.

use crate::error::{Failure, Outcome};

/// The default size of one segment: 256 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 256 << 20;

/// The environment variable that sets the segment size.
pub const SEGMENT_BYTES_VAR: &str = "SYMHEAP_NPU_SEGMENT_BYTES";

/// The environment variable that caps the bytes of all segments together.
pub const LIMIT_BYTES_VAR: &str = "SYMHEAP_NPU_LIMIT_BYTES";

/// The allocator's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The size of a new segment (a request larger than it gets a segment of its own size,
    /// rounded up to the device granularity).
    pub segment_bytes: u64,
    /// The most bytes all segments together may hold; `None` for no limit but the device's.
    pub limit_bytes: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            limit_bytes: None,
        }
    }
}

impl Config {
    /// The settings of this process's environment.
    ///
    /// # Errors
    /// A value that is not a byte count.
    pub fn from_env() -> Outcome<Config> {
        Config::parse(|name| std::env::var(name).ok())
    }

    /// The settings that `get` (a variable's value by name) gives.
    ///
    /// # Errors
    /// A value that is not a byte count, or a segment size of 0.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Outcome<Config> {
        let mut config = Config::default();
        if let Some(v) = get(SEGMENT_BYTES_VAR).filter(|v| !v.trim().is_empty()) {
            config.segment_bytes = parse_bytes(SEGMENT_BYTES_VAR, &v)?;
            if config.segment_bytes == 0 {
                return Err(Failure::invalid(format!(
                    "{SEGMENT_BYTES_VAR} must not be 0"
                )));
            }
        }
        if let Some(v) = get(LIMIT_BYTES_VAR).filter(|v| !v.trim().is_empty()) {
            config.limit_bytes = Some(parse_bytes(LIMIT_BYTES_VAR, &v)?);
        }
        Ok(config)
    }
}

/// A byte count: digits, optionally followed by `K`, `M`, `G` or `T` (binary units, an
/// optional `iB` or `B` after them).
fn parse_bytes(name: &str, value: &str) -> Outcome<u64> {
    let v = value.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(digits);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => u32::MAX,
    };
    let bad = || {
        Failure::invalid(format!(
            "{name}={value:?} is not a byte count (digits, optionally K, M, G or T)"
        ))
    };
    let number: u64 = number.parse().map_err(|_| bad())?;
    if shift == u32::MAX {
        return Err(bad());
    }
    number.checked_mul(1u64 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Outcome<Config> {
        Config::parse(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn sizes_in_bytes_or_binary_units() {
        assert_eq!(with(&[]).unwrap(), Config::default());
        let c = with(&[(SEGMENT_BYTES_VAR, "8M"), (LIMIT_BYTES_VAR, "3GiB")]).unwrap();
        assert_eq!(c.segment_bytes, 8 << 20);
        assert_eq!(c.limit_bytes, Some(3 << 30));
        assert_eq!(
            with(&[(SEGMENT_BYTES_VAR, "4096")]).unwrap().segment_bytes,
            4096
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        for bad in ["", "x", "12Q", "0", "99999999999999999999"] {
            let got = with(&[(SEGMENT_BYTES_VAR, bad)]);
            if bad.is_empty() {
                assert!(got.is_ok());
                continue;
            }
            let e = got.unwrap_err();
            assert!(e.message.contains(SEGMENT_BYTES_VAR), "{e}");
        }
    }
}
