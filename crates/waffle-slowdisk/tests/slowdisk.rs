//! libwaffle_slowdisk.so under LD_PRELOAD: this test binary runs itself
//! again with the shim loaded (the `child_*` tests, ignored unless a parent
//! starts them) and checks what the child saw. Timed assertions are lower
//! bounds only, or upper bounds many times away from the slowed time.
//! The child drops the file from the page cache first (fdatasync, then
//! POSIX_FADV_DONTNEED): a read the page cache answers is not slowed.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Where the parent tells the child its files are.
const CHILD_DIR: &str = "WAFFLE_SLOWDISK_TEST_DIR";
const FILE_BYTES: usize = 256 * 1024;
const PAGE: usize = 4096;
/// hdd-10k's random read (waffle_emulation::device).
const RANDOM_READ: Duration = Duration::from_millis(5);

/// target/<profile>/libwaffle_slowdisk.so, which cargo builds before this test.
fn shim() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = deps.parent().unwrap().join("libwaffle_slowdisk.so");
    assert!(so.is_file(), "{} missing: cargo build -p waffle-slowdisk", so.display());
    so
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("waffle-slowdisk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("slow")).unwrap();
        std::fs::create_dir_all(p.join("fast")).unwrap();
        let bytes: Vec<u8> = (0..FILE_BYTES).map(|i| (i * 31 + i / 4096) as u8).collect();
        std::fs::write(p.join("slow/data"), &bytes).unwrap();
        std::fs::write(p.join("fast/data"), &bytes).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the child test `name` of this binary under the shim with `setting`.
fn run_child(name: &str, dir: &Path, setting: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("LD_PRELOAD", shim())
        .env("WAFFLE_SLOWDISK", setting)
        .env(CHILD_DIR, dir)
        .output()
        .unwrap()
}

fn assert_ran(out: &Output, name: &str) {
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(text.contains(&format!("{name} ... ok")), "the child test did not run:\n{text}");
}

#[test]
fn reads_under_the_directory_wait_for_the_device_and_nothing_else_does() {
    let dir = TempDir::new("reads");
    let setting = format!("hdd-10k:{}", dir.0.join("slow").display());
    assert_ran(&run_child("child_reads", &dir.0, &setting), "child_reads");
}

#[test]
fn a_bad_setting_stops_the_program_and_says_why() {
    let dir = TempDir::new("bad");
    let out = run_child("child_reads", &dir.0, "floppy:/tmp");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WAFFLE_SLOWDISK=floppy:/tmp") && err.contains("unknown device profile"), "{err}");
}

// ---------------------------------------------------------------- the child

/// Reads the shim slowed on `device` so far (the shim's own count); None without the shim.
fn slowed_reads(device: &str) -> Option<i64> {
    let name = std::ffi::CString::new(device).unwrap();
    // SAFETY: the name is NUL-terminated; RTLD_DEFAULT searches every loaded object.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"waffle_slowdisk_reads".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: the shim exports this function with this signature.
    let f: unsafe extern "C" fn(*const libc::c_char) -> i64 = unsafe { std::mem::transmute(f) };
    // SAFETY: a NUL-terminated name.
    Some(unsafe { f(name.as_ptr()) })
}

fn count() -> i64 {
    slowed_reads("hdd-10k").expect("the shim is loaded")
}

/// Drops `f`'s pages from the kernel's page cache (written back first, so they are clean).
fn evict(f: &File) {
    f.sync_data().unwrap();
    // SAFETY: advice on a descriptor this test owns.
    assert_eq!(unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
}

/// A page-aligned buffer for O_DIRECT.
struct Aligned(*mut u8);

impl Aligned {
    fn page() -> Aligned {
        // SAFETY: a nonzero size and a power-of-two alignment.
        Aligned(unsafe { std::alloc::alloc(std::alloc::Layout::from_size_align(PAGE, PAGE).unwrap()) })
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(self.0, std::alloc::Layout::from_size_align(PAGE, PAGE).unwrap()) }
    }
}

/// Page offsets that never continue one another: every read is a random one.
fn scattered(n: usize) -> Vec<u64> {
    (0..n).map(|i| ((i * 7 + 3) % (FILE_BYTES / PAGE) * PAGE) as u64).collect()
}

#[test]
#[ignore = "run by the tests above, under LD_PRELOAD"]
fn child_reads() {
    let dir = PathBuf::from(std::env::var_os(CHILD_DIR).expect("started by a parent test"));
    assert_eq!(count(), 0);
    assert_eq!(slowed_reads("nvme"), Some(-1), "a device not set up is not emulated");
    let slow = File::open(dir.join("slow/data")).unwrap();
    let fast = File::open(dir.join("fast/data")).unwrap();
    evict(&slow);
    // No kernel read-ahead: a read of page 3 may otherwise bring page 10 into
    // the page cache, and that read is rightly not slowed (seen once in CI).
    // SAFETY: advice on a descriptor this test owns.
    assert_eq!(unsafe { libc::posix_fadvise(slow.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) }, 0);
    let (mut a, mut b) = (vec![0u8; PAGE], vec![0u8; PAGE]);

    // pread64 (std's read_at): each random read waits for the device; the bytes are the file's.
    let t = Instant::now();
    for &off in &scattered(8) {
        slow.read_exact_at(&mut a, off).unwrap();
        fast.read_exact_at(&mut b, off).unwrap();
        assert_eq!(a, b);
    }
    assert!(t.elapsed() >= 8 * RANDOM_READ, "8 random reads in {:?}", t.elapsed());
    assert_eq!(count(), 8);
    // Read again, they are in the page cache: no disk, no wait. Through O_DIRECT, the page cache is bypassed.
    for &off in &scattered(8) {
        slow.read_exact_at(&mut a, off).unwrap();
    }
    assert_eq!(count(), 8, "reads the page cache answered waited for the device");
    let direct = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(dir.join("slow/data")).unwrap();
    let buf = Aligned::page();
    let t = Instant::now();
    // SAFETY: a live, page-aligned buffer of PAGE bytes.
    assert_eq!(
        unsafe { libc::pread(direct.as_raw_fd(), buf.0.cast(), PAGE, (50 * PAGE) as libc::off_t) },
        PAGE as isize
    );
    assert!(t.elapsed() >= RANDOM_READ, "an O_DIRECT read in {:?}", t.elapsed());
    assert_eq!(count(), 9);
    evict(&slow);

    // read(2) after a seek, and preadv.
    let t = Instant::now();
    let mut f = File::open(dir.join("slow/data")).unwrap();
    f.seek(SeekFrom::Start(40 * PAGE as u64)).unwrap();
    f.read_exact(&mut a).unwrap();
    let iov = [libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: PAGE }];
    // SAFETY: one iovec over a live buffer of PAGE bytes.
    let n = unsafe { libc::preadv(slow.as_raw_fd(), iov.as_ptr(), 1, (20 * PAGE) as libc::off_t) };
    assert_eq!(n, PAGE as isize);
    assert!(t.elapsed() >= 2 * RANDOM_READ, "read + preadv in {:?}", t.elapsed());
    assert_eq!(count(), 11);

    // A dup of a slowed descriptor is slowed too.
    // SAFETY: dup of a descriptor this test owns; the copy is closed below.
    let copy = unsafe { libc::dup(slow.as_raw_fd()) };
    // SAFETY: a live buffer of PAGE bytes.
    assert_eq!(unsafe { libc::pread(copy, a.as_mut_ptr().cast(), PAGE, 0) }, PAGE as isize);
    // SAFETY: closes the copy made above.
    unsafe { libc::close(copy) };
    assert_eq!(count(), 12);

    // A file outside the directory: not slowed. The count is the check (the shim counts every
    // read it makes wait, where it waits); a bound on the time was not one: these reads reach
    // this machine's own disk (evicted above), which a CI run beside load once took 105 ms for.
    evict(&fast);
    for &off in scattered(64).iter() {
        fast.read_exact_at(&mut b, off).unwrap();
    }
    assert_eq!(count(), 12);

    // Writes to a file under the directory are not touched; the bytes land. Writes are not
    // counted: each is timed, and a slowed one would take a device's random read or more. The
    // median, not the total: a stall or the kernel's throttling of dirty pages can hold a few.
    let w = OpenOptions::new().write(true).open(dir.join("slow/data")).unwrap();
    let mut took: Vec<Duration> = scattered(64)
        .iter()
        .map(|&off| {
            let t = Instant::now();
            w.write_all_at(&[0xAB; PAGE], off).unwrap();
            t.elapsed()
        })
        .collect();
    assert_eq!(count(), 12);
    took.sort();
    assert!(took[took.len() / 2] < RANDOM_READ, "the median of 64 writes took {:?}", took[took.len() / 2]);
    std::fs::read(dir.join("slow/data")).unwrap()[3 * PAGE..4 * PAGE].iter().for_each(|&x| assert_eq!(x, 0xAB));
}
