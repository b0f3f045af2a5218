//! Whether this process is the one the preload is meant for, and whether it
//! still caches.
//!
//! ```text
//!  UNKNOWN --first hooked call--> ACTIVE   (program mariadbd/mysqld, or WAFFLE_PRELOAD_ACTIVE=1)
//!                            \--> INERT    (anything else: shells, helpers, tools the server starts)
//!  ACTIVE --native AIO set up, a fault, a descriptor out of range--> DISABLED (pass-through for good)
//!  ACTIVE/DISABLED --fork, in the child--> FORKED (pass-through; the parent's threads and locks are not ours)
//! ```
//!
//! Nothing is started in UNKNOWN or INERT: no thread, no socket, no file.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use libc::c_char;

pub const UNKNOWN: u8 = 0;
pub const INERT: u8 = 1;
pub const ACTIVE: u8 = 2;
pub const DISABLED: u8 = 3;
pub const FORKED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static REASON: Mutex<Option<String>> = Mutex::new(None);

/// Programs the preload caches for unless told otherwise.
pub const SERVER_PROGRAMS: [&str; 2] = ["mariadbd", "mysqld"];

extern "C" {
    static program_invocation_short_name: *const c_char;
}

/// Whether hooks should do their work (decides on the first call).
#[inline]
pub fn active() -> bool {
    match STATE.load(Ordering::Acquire) {
        ACTIVE => true,
        UNKNOWN => decide(),
        _ => false,
    }
}

pub fn get() -> u8 {
    STATE.load(Ordering::Acquire)
}

pub fn name(state: u8) -> &'static str {
    match state {
        UNKNOWN => "unknown",
        INERT => "inert",
        ACTIVE => "active",
        DISABLED => "disabled",
        _ => "forked",
    }
}

/// Why the preload turned itself off, if it did.
pub fn reason() -> Option<String> {
    REASON.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn env(name: &CStr) -> Option<String> {
    // SAFETY: name is NUL-terminated; getenv's result is read at once.
    let v = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
}

fn program() -> String {
    // SAFETY: glibc sets program_invocation_short_name before any user code runs.
    let p = unsafe { program_invocation_short_name };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null, and glibc's program name is NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn decide() -> bool {
    let forced = env(c"WAFFLE_PRELOAD_ACTIVE").map(|v| v.trim().to_ascii_lowercase());
    let active = match forced.as_deref() {
        Some("1" | "on" | "yes" | "true") => true,
        Some("0" | "off" | "no" | "false") => false,
        _ => SERVER_PROGRAMS.contains(&program().as_str()),
    };
    let new = if active { ACTIVE } else { INERT };
    match STATE.compare_exchange(UNKNOWN, new, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            if active {
                // SAFETY: registering a plain function; no handler for prepare/parent.
                unsafe {
                    libc::pthread_atfork(None, None, Some(in_child));
                }
            }
            active
        }
        Err(current) => current == ACTIVE,
    }
}

extern "C" fn in_child() {
    // The child has one thread; the cache's threads, locks and sockets belong
    // to the parent. Everything passes through from now on.
    STATE.store(FORKED, Ordering::Release);
}

/// Turns caching off for good: every hook passes through from now on and no
/// cached page is served again. Returns true if this call did it.
pub fn disable(reason: String) -> bool {
    if STATE.compare_exchange(ACTIVE, DISABLED, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false;
    }
    *REASON.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
    true
}
