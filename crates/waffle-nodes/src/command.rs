//! The memcached command line `waffle nodes --print-flags` prints for an
//! operator's own node: where it listens, as whom, how much memory, and the
//! slab classes of a [`SlabPlan`].
//!
//! memcached has no authentication here: whoever reaches its port reads and
//! replaces cached pages. So the command always names the address (`-l`;
//! memcached's default is every interface) and the user it drops to when
//! started as root (`-u`; without it memcached refuses to run as root), and
//! [`exposure_note`] says what listening means.

use std::ffi::CString;
use std::net::IpAddr;

use crate::flash::Flash;
use crate::slabs::SlabPlan;

/// memcached's own port.
pub const DEFAULT_PORT: u16 = 11211;

/// A memcached node an operator runs.
#[derive(Clone, Debug)]
pub struct NodeCommand {
    /// `-l`: never unspecified (0.0.0.0 or ::, every interface); see [`listen_addr`].
    pub listen: IpAddr,
    pub port: u16,
    pub memory_mib: u32,
    /// `-u`: the user memcached runs as when started as root.
    pub user: String,
    /// Slab classes for a page size; None: memcached's defaults.
    pub plan: Option<SlabPlan>,
    /// An extstore file (`--ssd`); None: RAM only.
    pub flash: Option<Flash>,
}

impl NodeCommand {
    /// The command, one line, ready to paste.
    pub fn line(&self) -> String {
        let mut words = vec![
            "memcached".to_string(),
            "-l".into(),
            self.listen.to_string(),
            "-p".into(),
            self.port.to_string(),
            "-u".into(),
            self.user.clone(),
            "-m".into(),
            self.memory_mib.to_string(),
        ];
        words.extend(self.plan.iter().flat_map(SlabPlan::args));
        words.extend(self.flash.iter().flat_map(Flash::args));
        words.join(" ")
    }

    /// One line on what listening on this address exposes.
    pub fn exposure_note(&self) -> String {
        exposure_note(self.listen, self.port)
    }
}

/// What a node on `listen:port` exposes, and where it may listen.
pub fn exposure_note(listen: IpAddr, port: u16) -> String {
    let who = if listen.is_loopback() {
        format!("on {listen}:{port} any process of this machine")
    } else {
        format!("anyone who reaches {listen}:{port}")
    };
    format!(
        "note: memcached serves page data unauthenticated: {who} can read and replace cached pages; \
         listen on a private network only, never a public address (waffle_key_file seals the pages)"
    )
}

/// A `-l` address: an IP address, not the unspecified one (every interface).
/// The error is the reason only: the caller names the flag and the value.
pub fn listen_addr(s: &str) -> Result<IpAddr, String> {
    let ip: IpAddr = s.trim().parse().map_err(|_| "expected an IP address, e.g. 127.0.0.1 or 10.0.0.2".to_string())?;
    if ip.is_unspecified() {
        return Err(format!("{ip} listens on every interface: name the private address to listen on"));
    }
    Ok(ip)
}

/// The user memcached should drop to: `memcache` where it exists (Debian's
/// package creates it), else `nobody`.
pub fn default_user() -> &'static str {
    if user_exists("memcache") {
        "memcache"
    } else {
        "nobody"
    }
}

fn user_exists(name: &str) -> bool {
    let Ok(c) = CString::new(name) else { return false };
    // SAFETY: a NUL-terminated name; the result is only compared with null
    // (getpwnam's static buffer is not read, so its reuse by another call does not matter).
    !unsafe { libc::getpwnam(c.as_ptr()) }.is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_names_the_address_the_user_and_the_slabs() {
        let plan = SlabPlan::for_node(4096, false, 4096);
        let c = NodeCommand {
            listen: "10.0.0.2".parse().unwrap(),
            port: DEFAULT_PORT,
            memory_mib: 4096,
            user: "memcache".into(),
            plan: Some(plan.clone()),
            flash: None,
        };
        assert_eq!(c.line(), format!("memcached -l 10.0.0.2 -p 11211 -u memcache -m 4096 {}", plan.describe()));
        let bare = NodeCommand { plan: None, ..c.clone() };
        assert_eq!(bare.line(), "memcached -l 10.0.0.2 -p 11211 -u memcache -m 4096");
        assert!(c.exposure_note().contains("unauthenticated") && c.exposure_note().contains("private network"));
        let flash = Flash { path: "/srv/flash/waffle".into(), size_mib: 1 << 10 };
        let with_flash = NodeCommand { flash: Some(flash.clone()), ..bare };
        assert!(with_flash.line().ends_with(&format!(" -o {}", flash.options().join(","))), "{}", with_flash.line());
    }

    #[test]
    fn every_interface_is_refused_as_an_address() {
        assert_eq!(listen_addr("127.0.0.1"), Ok("127.0.0.1".parse().unwrap()));
        assert_eq!(listen_addr(" ::1 "), Ok("::1".parse().unwrap()));
        for bad in ["0.0.0.0", "::", "localhost", "", "10.0.0.300"] {
            assert!(listen_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_user_is_one_that_exists() {
        assert!(user_exists(default_user()), "{}", default_user());
        assert!(!user_exists("no-such-user-waffle"));
    }
}
