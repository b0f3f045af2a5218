//! InnoDB pages as `preload-file-io` writes them for `mysql_preload.rs`.

/// The page size (InnoDB's default, 16 KiB).
pub const PS: usize = 16384;
/// The tablespace id every page names.
pub const SPACE: u32 = 5;

/// A full_crc32 InnoDB page (MariaDB 10.5+ format) numbered `index`, contents by `gen`.
pub fn page(index: u32, gen: u32) -> Vec<u8> {
    let mut p: Vec<u8> = (0..PS)
        .map(|i| ((i as u32).wrapping_mul(31) ^ index.wrapping_mul(7919) ^ gen.wrapping_mul(104729)) as u8)
        .collect();
    let lsn = 1_000_000u64 + index as u64 * 10 + gen as u64;
    p[0..4].fill(0);
    p[4..8].copy_from_slice(&index.to_be_bytes());
    p[16..24].copy_from_slice(&lsn.to_be_bytes());
    p[34..38].copy_from_slice(&SPACE.to_be_bytes());
    p[PS - 8..PS - 4].copy_from_slice(&(lsn as u32).to_be_bytes());
    let crc = crc32c::crc32c(&p[..PS - 4]);
    p[PS - 4..].copy_from_slice(&crc.to_be_bytes());
    p
}
