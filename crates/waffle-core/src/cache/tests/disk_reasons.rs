//! Why each read went to the disk: the reasons add up to `disk_reads`.

use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::presence::Verdict;

/// The reasons that moved between two snapshots, as (name, count).
fn moved(before: &Value, after: &Value) -> Vec<(String, u64)> {
    DiskReason::ALL
        .iter()
        .map(|r| (r.name(), after[r.name()].as_u64().unwrap() - before[r.name()].as_u64().unwrap()))
        .filter(|&(_, n)| n > 0)
        .map(|(k, n)| (k.to_string(), n))
        .collect()
}

fn one(reason: DiskReason, n: u64) -> Vec<(String, u64)> {
    vec![(reason.name().to_string(), n)]
}

/// Without a grid: a first read is cold, a page L1 evicted is never
/// pushed, a page whose copy a partial write, another writer or a stale
/// L1 entry gave up is invalidated; a reset or a truncation makes pages cold again.
#[test]
fn without_a_grid_disk_reads_are_cold_then_never_pushed() {
    let (_f, m, c) = scan_file(64, 8);
    let mut buf = vec![0u8; 512];
    let r0 = disk_reasons(&c);
    for page in 0..32 {
        assert_eq!(c.read(page, &mut buf, &m).unwrap().1, Source::Disk);
    }
    let r1 = disk_reasons(&c);
    assert_eq!(moved(&r0, &r1), one(DiskReason::Cold, 32));
    assert!(!c.pool.contains(0));
    c.read(0, &mut buf, &m).unwrap();
    let r2 = disk_reasons(&c);
    assert_eq!(moved(&r1, &r2), one(DiskReason::NeverPushed, 1), "evicted from L1 with no grid");

    // Copies given up: a partial write, another writer, a stale L1 entry.
    let held: Vec<u64> = (0..32).filter(|&p| c.pool.contains(p)).collect();
    assert!(held.len() >= 3, "{held:?}");
    c.invalidate(held[0]);
    c.foreign_pages(&[held[1]]);
    c.versions.bump(held[2]);
    for &page in &held[..3] {
        c.read(page, &mut buf, &m).unwrap();
    }
    let r3 = disk_reasons(&c);
    assert_eq!(moved(&r2, &r3), one(DiskReason::Invalidated, 3));
    // A page with no copy anywhere is not invalidated by being named: it stays never pushed.
    let gone = (1..32).find(|&p| !c.pool.contains(p)).unwrap();
    c.foreign_pages(&[gone]);
    c.read(gone, &mut buf, &m).unwrap();
    let r4 = disk_reasons(&c);
    assert_eq!(moved(&r3, &r4), one(DiskReason::NeverPushed, 1));

    // A truncation makes the pages it cut cold; a reset, every page.
    c.truncated(20);
    c.read(25, &mut buf, &m).unwrap(); // read before the cut, then evicted or cut from L1
    let r5 = disk_reasons(&c);
    assert_eq!(moved(&r4, &r5), one(DiskReason::Cold, 1), "a page the file grew back to is a new page");
    c.reset();
    for page in 0..8 {
        c.read(page, &mut buf, &m).unwrap();
    }
    assert_eq!(moved(&r5, &disk_reasons(&c)), one(DiskReason::Cold, 8), "a reset: a new epoch");

    // The fuse: every read goes to the file, its copies given up.
    let r6 = disk_reasons(&c);
    c.trip("test");
    c.read(0, &mut buf, &m).unwrap();
    assert_eq!(moved(&r6, &disk_reasons(&c)), one(DiskReason::Invalidated, 1));
}

/// With a grid: a push the queue could not take is push_dropped; a page
/// pushed (stamped) whose node does not answer is skipped; a grid change
/// that drops its stamp leaves it evicted (the grid lost it).
#[test]
fn with_a_grid_disk_reads_say_what_became_of_the_push() {
    let mut buf = vec![0u8; 512];
    // No room in the push queue: every eviction is dropped.
    let (_f, m, c) = scan_file(64, 8);
    c.set_grid(Some(dead_grid()));
    let r0 = disk_reasons(&c);
    for page in 0..32 {
        c.read(page, &mut buf, &m).unwrap();
    }
    let r1 = disk_reasons(&c);
    assert_eq!(moved(&r0, &r1), one(DiskReason::Cold, 32));
    c.read(0, &mut buf, &m).unwrap();
    let r2 = disk_reasons(&c);
    assert_eq!(moved(&r1, &r2), one(DiskReason::PushDropped, 1), "{}", Value::Object(c.stats_json()));

    // Room to queue: pages are sent (stamped), the store fails, the lookup is not answered.
    let c = PageCache::new(CacheOptions {
        local_bytes: 8 * 512,
        push_queue_bytes: 1 << 20,
        grid: Some(dead_grid()),
        ..cache_opts()
    });
    for page in 0..32 {
        c.read(page, &mut buf, &m).unwrap();
    }
    assert!(c.flush_pushes(Duration::from_secs(10)));
    let r1 = disk_reasons(&c);
    assert!(!c.pool.contains(0) && c.presence.verdict(0) != Verdict::Absent);
    c.read(0, &mut buf, &m).unwrap();
    let r2 = disk_reasons(&c);
    assert_eq!(moved(&r1, &r2), one(DiskReason::Skipped, 1), "{}", Value::Object(c.stats_json()));
    // The grid goes: its stamps with it; a page it held was lost to this cache.
    c.set_grid(None);
    c.read(1, &mut buf, &m).unwrap();
    assert_eq!(moved(&r2, &disk_reasons(&c)), one(DiskReason::Evicted, 1));
}

/// The reasons sum to `disk_reads` at every step of a mixed workload:
/// reads, scans, writes, partial writes, other writers, truncations,
/// resets, and a grid that comes and goes.
#[test]
fn disk_reasons_sum_to_disk_reads_across_a_mixed_workload() {
    let (file, m, _) = scan_file(400, 32);
    let c = PageCache::new(CacheOptions { local_bytes: 32 * 512, push_queue_bytes: 4 * 512, ..cache_opts() });
    let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for step in 0..6000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let page = (x >> 8) % 300;
        match x % 100 {
            0..=59 => drop(c.read(page, &mut buf, &m).unwrap()),
            60..=79 => drop(c.read_sequential(page, &mut buf, &m, &mut ra).unwrap()),
            80..=89 => {
                let byte = (x >> 32) as u8;
                file.lock().unwrap()[page as usize * 512..][..512].fill(byte);
                c.wrote(page, &[byte; 512]);
            }
            90..=93 => c.invalidate(page),
            94..=96 => c.foreign_pages(&[page, page + 1]),
            97 => c.truncated(300 + page % 50),
            98 => c.reset(),
            _ => c.set_grid(if c.grid().is_some() { None } else { Some(dead_grid()) }),
        }
        if step % 50 == 0 {
            disk_reasons(&c);
        }
    }
    let r = disk_reasons(&c);
    for reason in [DiskReason::Cold, DiskReason::NeverPushed, DiskReason::PushDropped, DiskReason::Invalidated] {
        assert!(r[reason.name()].as_u64().unwrap() > 0, "{reason:?} never seen: {r}");
    }
}
