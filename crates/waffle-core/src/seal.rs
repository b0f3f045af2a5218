//! Sealing keys: optional authenticated encryption of grid values.
//!
//! memcached holds pages in plaintext for anyone who reaches its port, and
//! crc32c is no defence against someone who writes values on purpose. With a
//! key, every value is sealed with XChaCha20-Poly1305; the envelope header
//! (cache identity, page number, version, length) is the associated data, so a
//! value moved to another key, replayed from an older version, or modified in
//! any bit fails to open. Every seal draws its whole 24-byte nonce from the
//! OS: XChaCha20's nonces are large enough for random ones (a repeat is a
//! 2^-96 event after 2^48 seals), and unlike a per-process prefix and a
//! counter they do not repeat when a process image is restored twice (CRIU, a
//! cloned VM).
//!
//! A key is 32 bytes: a file holding them raw or as 64 hex digits
//! (`waffle_key_file`), or the environment variable `WAFFLE_KEY` (hex).

use std::fmt;
use std::path::Path;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};

pub const KEY_BYTES: usize = 32;
pub const NONCE_BYTES: usize = 24;
pub const TAG_BYTES: usize = 16;

/// A key that cannot be had: not 64 hex digits, or a key file that cannot be read or holds no key.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("a key is {KEY_BYTES} bytes: 64 hex digits (got {chars} characters)")]
    NotHex { chars: usize },
    #[error("cannot read the key file: {0}")]
    Unreadable(#[source] std::io::Error),
    #[error("the key file must hold {KEY_BYTES} raw bytes or 64 hex digits")]
    FileNotText,
    #[error("the key file must hold {KEY_BYTES} raw bytes or 64 hex digits: {0}")]
    FileNotAKey(#[source] Box<SealError>),
    /// A FIFO, a device, a directory: never read (a FIFO blocks, /dev/zero never ends).
    #[error("the key file must be a regular file (this is {0})")]
    NotRegular(&'static str),
    #[error("the key file is larger than {MAX_KEY_FILE_BYTES} bytes: a key is {KEY_BYTES} raw bytes or 64 hex digits")]
    FileTooLarge,
}

/// A key file is read up to this: 32 raw bytes or 64 hex digits and some white space fit many times.
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

pub struct SealKey {
    cipher: XChaCha20Poly1305,
    /// Tells keys apart for configuration comparison without keeping the key around twice.
    fingerprint: u32,
}

impl SealKey {
    pub fn from_bytes(key: &[u8; KEY_BYTES]) -> SealKey {
        SealKey { cipher: XChaCha20Poly1305::new(key.into()), fingerprint: crc32c::crc32c(key) }
    }

    /// 64 hex digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<SealKey, SealError> {
        let t = text.trim();
        if t.len() != 2 * KEY_BYTES || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SealError::NotHex { chars: t.len() });
        }
        let mut key = [0u8; KEY_BYTES];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        Ok(SealKey::from_bytes(&key))
    }

    /// A file of exactly 32 raw bytes, or of 64 hex digits. The name may come
    /// from SQL (an ATTACH's URI): a symlink is followed (keys are often
    /// linked from a secrets mount) but the open never blocks (O_NONBLOCK: a
    /// FIFO), only a regular file is read, and at most [`MAX_KEY_FILE_BYTES`].
    pub fn load_file(path: &Path) -> Result<SealKey, SealError> {
        let bytes = read_key_file(path)?;
        if bytes.len() == KEY_BYTES {
            let key: [u8; KEY_BYTES] = bytes.as_slice().try_into().expect("length checked");
            return Ok(SealKey::from_bytes(&key));
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| SealError::FileNotText)?;
        SealKey::from_hex(text).map_err(|e| SealError::FileNotAKey(Box::new(e)))
    }

    /// A fresh random nonce; None if the OS random source fails (the caller
    /// then does not seal, and the page is not pushed).
    fn next_nonce(&self) -> Option<[u8; NONCE_BYTES]> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::getrandom(&mut nonce).ok()?;
        Some(nonce)
    }

    /// Encrypts `buf` in place; returns the nonce used and the tag. None
    /// (and `buf` untouched) when no nonce could be drawn.
    pub fn seal_in_place(&self, aad: &[u8], buf: &mut [u8]) -> Option<([u8; NONCE_BYTES], [u8; TAG_BYTES])> {
        let nonce = self.next_nonce()?;
        let tag = self
            .cipher
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), aad, buf)
            .expect("a page is far below the AEAD's length limit");
        Some((nonce, tag.into()))
    }

    /// Decrypts `buf` in place; false (and `buf` unspecified) if anything was altered.
    pub fn open_in_place(&self, nonce: &[u8], aad: &[u8], buf: &mut [u8], tag: &[u8]) -> bool {
        if nonce.len() != NONCE_BYTES || tag.len() != TAG_BYTES {
            return false;
        }
        self.cipher.decrypt_in_place_detached(XNonce::from_slice(nonce), aad, buf, tag.into()).is_ok()
    }
}

/// The bytes of a key file, read as [`SealKey::load_file`] says.
fn read_key_file(path: &Path) -> Result<Vec<u8>, SealError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(SealError::Unreadable)?;
    let t = file.metadata().map_err(SealError::Unreadable)?.file_type();
    if !t.is_file() {
        let kind = if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(SealError::NotRegular(kind));
    }
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(SealError::Unreadable)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(SealError::FileTooLarge);
    }
    Ok(bytes)
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SealKey(fingerprint {:08x})", self.fingerprint)
    }
}

impl PartialEq for SealKey {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

impl Eq for SealKey {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let k = SealKey::from_bytes(&[7; 32]);
        let mut buf = b"hello page".to_vec();
        let (nonce, tag) = k.seal_in_place(b"aad", &mut buf).unwrap();
        assert_ne!(&buf, b"hello page");
        let mut copy = buf.clone();
        assert!(k.open_in_place(&nonce, b"aad", &mut copy, &tag));
        assert_eq!(&copy, b"hello page");
        let mut copy = buf.clone();
        assert!(!k.open_in_place(&nonce, b"aae", &mut copy, &tag), "other associated data");
        let mut copy = buf.clone();
        copy[0] ^= 1;
        assert!(!k.open_in_place(&nonce, b"aad", &mut copy, &tag), "modified ciphertext");
        let other = SealKey::from_bytes(&[8; 32]);
        let mut copy = buf.clone();
        assert!(!other.open_in_place(&nonce, b"aad", &mut copy, &tag), "another key");
    }

    #[test]
    fn nonces_are_random_whole() {
        let k = SealKey::from_bytes(&[1; 32]);
        let nonces: Vec<[u8; NONCE_BYTES]> = (0..64).map(|_| k.next_nonce().unwrap()).collect();
        for (i, a) in nonces.iter().enumerate() {
            for b in &nonces[i + 1..] {
                assert_ne!(a, b);
                // No shared prefix or suffix either: each byte is drawn, none counted.
                assert!(a[..8] != b[..8] && a[16..] != b[16..], "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn hex_and_files() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        assert!(SealKey::from_hex(hex).is_ok());
        assert!(SealKey::from_hex(&hex[..62]).is_err());
        assert!(SealKey::from_hex(&hex.replace('0', "g")).is_err());
        let dir = std::env::temp_dir().join(format!("waffle-seal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = dir.join("raw");
        std::fs::write(&raw, [9u8; 32]).unwrap();
        assert_eq!(SealKey::load_file(&raw).unwrap(), SealKey::from_bytes(&[9; 32]));
        let text = dir.join("text");
        std::fs::write(&text, format!("{hex}\n")).unwrap();
        assert_eq!(SealKey::load_file(&text).unwrap(), SealKey::from_hex(hex).unwrap());
        let short = dir.join("short");
        std::fs::write(&short, b"abc").unwrap();
        let e = SealKey::load_file(&short).unwrap_err();
        assert!(matches!(e, SealError::FileNotAKey(ref inner) if matches!(**inner, SealError::NotHex { chars: 3 })));
        assert_eq!(
            e.to_string(),
            "the key file must hold 32 raw bytes or 64 hex digits: a key is 32 bytes: 64 hex digits (got 3 characters)"
        );
        let e = SealKey::load_file(&dir.join("missing")).unwrap_err();
        assert!(matches!(e, SealError::Unreadable(_)), "{e}");
        assert!(e.to_string().starts_with("cannot read the key file: "), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b' '; MAX_KEY_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(SealKey::load_file(&big), Err(SealError::FileTooLarge)));
        let linked = dir.join("linked");
        std::os::unix::fs::symlink(&raw, &linked).unwrap();
        assert!(SealKey::load_file(&linked).is_ok(), "a symlink to a key is followed");
        assert!(matches!(SealKey::load_file(Path::new("/dev/zero")), Err(SealError::NotRegular("a device"))));
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = SealKey::load_file(&fifo).unwrap_err(); // returns at once: no writer needed
        assert_eq!(e.to_string(), "the key file must be a regular file (this is a FIFO)");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
