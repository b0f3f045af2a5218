//! errno, read and restored around everything a hook does besides the real call.

use libc::c_int;

pub fn get() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub fn set(v: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v }
}

/// Restores errno to what it was when created, when dropped.
pub struct Saved(c_int);

impl Saved {
    pub fn now() -> Saved {
        Saved(get())
    }
}

impl Drop for Saved {
    fn drop(&mut self) {
        set(self.0)
    }
}
