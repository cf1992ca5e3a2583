//! git objects made in process: ids (SHA-1 of `<kind> <len>\0<data>`), the
//! set of objects a store holds, and one pack (with its `.idx`) per
//! checkpoint holding every object that checkpoint made.
//!
//! A pack is git's own format (version 2, whole objects, no deltas), so the
//! store stays a repository the `git` binary reads (`diff-tree`,
//! `read-tree`, `pack-objects` for a fork, `fsck`). It is named by the
//! SHA-1 trailer of its bytes, as git names packs, and never changed once in
//! place. Written to a temporary file in the store's root, synced, renamed
//! into `objects/pack/`; the `.idx` likewise; then `objects/pack/` is synced
//! once: three syncs (the first two at once) for a checkpoint's objects,
//! however many there are.

use sha1::{Digest, Sha1};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An object id (SHA-1).
pub type Oid = [u8; 20];

/// git's object kinds as a pack numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tree = 2,
    Blob = 3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tree => "tree",
            Kind::Blob => "blob",
        }
    }
}

/// The id git gives `data` as an object of `kind`.
pub fn object_id(kind: Kind, data: &[u8]) -> Oid {
    let mut h = Sha1::new();
    h.update(kind.name().as_bytes());
    h.update(b" ");
    h.update(data.len().to_string().as_bytes());
    h.update([0]);
    h.update(data);
    h.finalize().into()
}

/// Lower-case hex of an id.
pub fn hex(id: &Oid) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(40);
    for b in id {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// An id from 40 hex digits.
pub fn parse_hex(s: &str) -> Option<Oid> {
    let s = s.as_bytes();
    if s.len() != 40 {
        return None;
    }
    let mut id = [0u8; 20];
    for (i, pair) in s.chunks(2).enumerate() {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(pair[1]).to_digit(16)?;
        id[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(id)
}

/// The ids of the objects a store holds: every loose object and every
/// object of a pack whose `.idx` is whole (its checksum holds).
pub fn known_objects(objects: &Path) -> HashSet<Oid> {
    let mut known = HashSet::new();
    for fan in 0..=255u8 {
        let dir = objects.join(format!("{fan:02x}"));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(rest) = name.to_str() else { continue };
            if let Some(id) = parse_hex(&format!("{fan:02x}{rest}")) {
                known.insert(id);
            }
        }
    }
    let Ok(entries) = std::fs::read_dir(objects.join("pack")) else {
        return known;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "idx")
            && path.with_extension("pack").is_file()
            && let Ok(bytes) = std::fs::read(&path)
            && let Some(ids) = idx_ids(&bytes)
        {
            known.extend(ids);
        }
    }
    known
}

/// The ids a version 2 pack index lists, if it is whole.
pub fn idx_ids(b: &[u8]) -> Option<Vec<Oid>> {
    if b.len() < 8 + 1024 + 40 || b[..8] != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
        return None;
    }
    let (body, sum) = b.split_at(b.len() - 20);
    if Sha1::digest(body).as_slice() != sum {
        return None;
    }
    let n = u32::from_be_bytes(b[8 + 255 * 4..8 + 256 * 4].try_into().ok()?) as usize;
    let ids = b.get(8 + 1024..8 + 1024 + n.checked_mul(20)?)?;
    Some(
        ids.chunks_exact(20)
            .map(|c| c.try_into().unwrap_or([0; 20]))
            .collect(),
    )
}

/// One pack being written: objects go to a temporary file as they come.
pub struct PackWriter {
    store: PathBuf,
    tmp: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    sum: Sha1,
    offset: u64,
    /// (id, offset, crc32 of the packed bytes) of each object.
    entries: Vec<(Oid, u64, u32)>,
    buf: Vec<u8>,
}

/// Names of this process's temporary files in a store's root.
const TMP_PREFIX: &str = "tmp-tinyagent-";

impl PackWriter {
    /// A pack for the store `git_dir` (its objects go to `objects/pack/`).
    pub fn new(git_dir: &Path) -> std::io::Result<PackWriter> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = git_dir.join(format!("{TMP_PREFIX}{}-{n}.pack", std::process::id()));
        let file = tmp_file(&tmp)?;
        let mut w = PackWriter {
            store: git_dir.to_path_buf(),
            tmp,
            file: std::io::BufWriter::with_capacity(64 << 10, file),
            sum: Sha1::new(),
            offset: 0,
            entries: Vec::new(),
            buf: Vec::new(),
        };
        // The object count is patched in at the end.
        w.put(b"PACK\0\0\0\x02\0\0\0\0")?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Adds one object (`id` is its id, computed by the caller).
    pub fn add(&mut self, kind: Kind, id: Oid, data: &[u8]) -> std::io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // Type and size: 4 bits of size in the first byte, 7 in the next.
        let mut size = data.len() as u64;
        let mut first = ((kind as u8) << 4) | u8::try_from(size & 0x0f).unwrap_or(0);
        size >>= 4;
        while size > 0 {
            buf.push(first | 0x80);
            first = u8::try_from(size & 0x7f).unwrap_or(0);
            size >>= 7;
        }
        buf.push(first);
        let mut z = flate2::write::ZlibEncoder::new(buf, flate2::Compression::fast());
        z.write_all(data)?;
        let buf = z.finish()?;
        self.entries.push((id, self.offset, crc32fast::hash(&buf)));
        let r = self.put(&buf);
        self.buf = buf;
        r
    }

    /// Completes the pack and its index, durably, under their final names
    /// in `objects/pack/`; gives the pack's name. Nothing is left behind if
    /// it fails.
    pub fn finish(self) -> std::io::Result<String> {
        let tmp = self.tmp.clone();
        let r = self.finish_inner();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(tmp.with_extension("idx"));
        }
        r
    }

    fn finish_inner(mut self) -> std::io::Result<String> {
        use std::io::{Read, Seek, SeekFrom};
        self.file.flush()?;
        let mut file = self.file.into_inner().map_err(std::io::Error::other)?;
        let count = u32::try_from(self.entries.len())
            .map_err(|_| std::io::Error::other("too many objects for one pack"))?;
        file.seek(SeekFrom::Start(8))?;
        file.write_all(&count.to_be_bytes())?;
        // The trailer is the SHA-1 of everything before it: read back
        // (from the page cache) rather than kept twice in memory.
        file.seek(SeekFrom::Start(0))?;
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = file.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            self.sum.update(&chunk[..n]);
        }
        let trailer: Oid = self.sum.finalize().into();
        file.write_all(&trailer)?;
        let name = format!("pack-{}", hex(&trailer));
        let mut entries = self.entries;
        entries.sort_unstable_by_key(|a| a.0);
        let idx = idx_bytes(&entries, &trailer);
        let idx_tmp = self.tmp.with_extension("idx");
        let mut f = tmp_file(&idx_tmp)?;
        f.write_all(&idx)?;
        // Both at once: on a journalling file system the two wait for one
        // commit rather than one each.
        let (a, b) = std::thread::scope(|s| {
            let other = s.spawn(|| f.sync_data());
            let mine = file.sync_data();
            (mine, other.join())
        });
        a?;
        b.map_err(|_| std::io::Error::other("syncing the pack index panicked"))??;
        let packs = self.store.join("objects/pack");
        // The pack first: git only looks for objects in a pack with an
        // index.
        std::fs::rename(&self.tmp, packs.join(format!("{name}.pack")))?;
        std::fs::rename(&idx_tmp, packs.join(format!("{name}.idx")))?;
        super::git::sync_dir(&packs)?;
        Ok(name)
    }
}

fn tmp_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Removes the temporary files a killed process left in a store's root
/// (only called where no other process writes the store).
pub fn clear_tmp(git_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(git_dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A version 2 pack index of `entries` (sorted by id).
fn idx_bytes(entries: &[(Oid, u64, u32)], pack_sum: &Oid) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 1024 + entries.len() * 28 + 40);
    out.extend_from_slice(&[0xff, b't', b'O', b'c', 0, 0, 0, 2]);
    let mut fan = [0u32; 256];
    for (id, _, _) in entries {
        fan[usize::from(id[0])] += 1;
    }
    let mut total = 0u32;
    for f in fan {
        total += f;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (id, _, _) in entries {
        out.extend_from_slice(id);
    }
    for (_, _, crc) in entries {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, off, _) in entries {
        if let Ok(small) = u32::try_from(*off)
            && small < 0x8000_0000
        {
            out.extend_from_slice(&small.to_be_bytes());
        } else {
            let i = u32::try_from(large.len()).unwrap_or(u32::MAX) | 0x8000_0000;
            out.extend_from_slice(&i.to_be_bytes());
            large.push(*off);
        }
    }
    for off in large {
        out.extend_from_slice(&off.to_be_bytes());
    }
    out.extend_from_slice(pack_sum);
    let sum = Sha1::digest(&out);
    out.extend_from_slice(&sum);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_gits() {
        assert_eq!(hex(&object_id(Kind::Tree, b"")), super::super::EMPTY_TREE);
        // `printf hello | git hash-object --stdin`
        assert_eq!(
            hex(&object_id(Kind::Blob, b"hello")),
            "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"
        );
        let id = object_id(Kind::Blob, b"x");
        assert_eq!(parse_hex(&hex(&id)), Some(id));
        assert_eq!(parse_hex("zz"), None);
    }

    #[test]
    fn a_damaged_index_lists_nothing() {
        let entries = vec![([7u8; 20], 12, 5), ([9u8; 20], 40, 6)];
        let mut idx = idx_bytes(&entries, &[1; 20]);
        assert_eq!(idx_ids(&idx), Some(vec![[7u8; 20], [9u8; 20]]));
        idx[1100] ^= 1;
        assert_eq!(idx_ids(&idx), None);
        assert_eq!(idx_ids(&idx[..100]), None);
    }
}
