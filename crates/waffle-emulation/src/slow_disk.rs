//! The slow-disk shim's setting, one syntax for the shim that reads it
//! (`crates/waffle-slowdisk`, `libwaffle_slowdisk.so`) and the benchmarks
//! that write it:
//!
//! `WAFFLE_SLOWDISK=PROFILE:DIR[,PROFILE:DIR...]`: reads of regular files
//! under `DIR` (an absolute path) wait for an EMULATED device of `PROFILE`
//! (device.rs's profiles), one device per entry, as if each `DIR` were a
//! disk of its own mounted there.

use std::path::{Path, PathBuf};

use crate::device::DeviceProfile;

/// The environment variable the shim reads once, when it is loaded.
pub const ENV: &str = "WAFFLE_SLOWDISK";
/// The shim's file name (`cargo build --release` puts it in target/release).
pub const LIBRARY: &str = "libwaffle_slowdisk.so";
/// Devices one process may emulate at once (the shim's table is fixed).
pub const MAX_DEVICES: usize = 8;

/// One emulated device and the directory it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowDisk {
    pub profile: DeviceProfile,
    pub dir: PathBuf,
}

/// Parses a `WAFFLE_SLOWDISK` value; the message names the bad entry.
pub fn parse(value: &str) -> Result<Vec<SlowDisk>, String> {
    let mut out: Vec<SlowDisk> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, dir) = entry.split_once(':').ok_or_else(|| format!("'{entry}': not PROFILE:DIR"))?;
        let profile = DeviceProfile::by_name(name.trim())
            .map_err(|why| format!("'{entry}': {why}"))?
            .ok_or_else(|| format!("'{entry}': the real disk needs no emulation"))?;
        let dir = PathBuf::from(dir.trim());
        if !dir.is_absolute() {
            return Err(format!("'{entry}': the directory must be an absolute path"));
        }
        if out.iter().any(|d| d.dir == dir) {
            return Err(format!("'{entry}': {} is named twice", dir.display()));
        }
        out.push(SlowDisk { profile, dir });
    }
    if out.is_empty() {
        return Err("no PROFILE:DIR entry".into());
    }
    if out.len() > MAX_DEVICES {
        return Err(format!("{} devices; at most {MAX_DEVICES}", out.len()));
    }
    Ok(out)
}

/// The `WAFFLE_SLOWDISK` value for `devices` (a directory whose path holds
/// `,` or `:`, or is relative, cannot be said).
pub fn format(devices: &[SlowDisk]) -> Result<String, String> {
    let entry = |d: &SlowDisk| -> Result<String, String> {
        let dir = d.dir.to_str().filter(|s| !s.contains([',', ':']) && Path::new(s).is_absolute());
        let dir = dir.ok_or_else(|| format!("{}: not an absolute path without ',' or ':'", d.dir.display()))?;
        Ok(format!("{}:{dir}", d.profile.name))
    };
    let value = devices.iter().map(entry).collect::<Result<Vec<_>, _>>()?.join(",");
    parse(&value)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_bad_ones_say_why() {
        let hdd = DeviceProfile::by_name("hdd-10k").unwrap().unwrap();
        let ssd = DeviceProfile::by_name("ssd-2009").unwrap().unwrap();
        let devices =
            vec![SlowDisk { profile: hdd, dir: "/a/hdd".into() }, SlowDisk { profile: ssd, dir: "/b".into() }];
        let value = format(&devices).unwrap();
        assert_eq!(value, "hdd-10k:/a/hdd,ssd-2009:/b");
        assert_eq!(parse(&value).unwrap(), devices);
        assert_eq!(parse(" nvme : /x ").unwrap()[0].profile.name, "nvme");
        for (bad, why) in [
            ("", "no PROFILE:DIR"),
            ("hdd-10k", "not PROFILE:DIR"),
            ("floppy:/x", "unknown device profile"),
            ("real:/x", "needs no emulation"),
            ("hdd-10k:rel/dir", "absolute"),
            ("hdd-10k:/x,nvme:/x", "named twice"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let nine: Vec<String> = (0..9).map(|i| format!("nvme:/d{i}")).collect();
        assert!(parse(&nine.join(",")).unwrap_err().contains("at most 8"));
        assert!(format(&[SlowDisk { profile: hdd, dir: "/a,b".into() }]).is_err());
    }
}
