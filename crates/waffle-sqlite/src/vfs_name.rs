//! The name this VFS registers under (vfs.rs) and a job's own connection
//! opens with (warm.rs): a leaf both use.

use std::ffi::CStr;

/// The VFS's name: `vfs=waffle` in a URI.
pub const VFS_NAME: &CStr = c"waffle";
