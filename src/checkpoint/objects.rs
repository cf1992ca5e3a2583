//! git objects made in process: ids (SHA-1 of `<kind> <len>\0<data>`), the
//! set of objects a store holds, and one pack (with its `.idx`) per
//! checkpoint holding every object that checkpoint made.
//!
//! A pack is git's own format (version 2, whole objects, no deltas), so the
//! store stays a repository the `git` binary reads (`diff-tree`,
//! `read-tree`, `pack-objects` for a fork, `fsck`). It is named by the
//! SHA-1 trailer of its bytes, as git names packs, and never changed once in
//! place. Made in memory (or, when large, in a temporary file in the
//! store's root), written into `objects/pack/` and synced there (one wait
//! for the disk: the new name goes with the data), then the directory is
//! synced and the `.idx` is renamed in beside it: one sync of data and one
//! of the directory for a checkpoint's objects, however many there are.

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
/// object of a pack whose `.idx` is whole (its checksum holds); and the
/// packs with no whole index (see [`PackWriter::finish`]: after a power
/// loss, the last one written may have lost its index).
pub fn known_objects(objects: &Path) -> (HashSet<Oid>, Vec<PathBuf>) {
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
    let mut unindexed = Vec::new();
    let Ok(entries) = std::fs::read_dir(objects.join("pack")) else {
        return (known, unindexed);
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "pack") {
            continue;
        }
        match std::fs::read(path.with_extension("idx"))
            .ok()
            .and_then(|b| idx_ids(&b))
        {
            Some(ids) => known.extend(ids),
            None => unindexed.push(path),
        }
    }
    (known, unindexed)
}

/// Whether a pack file is whole: its last 20 bytes are the SHA-1 of the
/// rest, and its name (`pack-<hex>.pack`) is that SHA-1.
pub fn pack_is_whole(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(len) = f.metadata().map(|m| m.len()) else {
        return false;
    };
    let Some(body) = len.checked_sub(20).filter(|n| *n >= 12) else {
        return false;
    };
    let mut sum = Sha1::new();
    if std::io::copy(&mut (&mut f).take(body), &mut sum).ok() != Some(body) {
        return false;
    }
    let mut trailer = [0u8; 20];
    if f.read_exact(&mut trailer).is_err() {
        return false;
    }
    let ours: Oid = sum.finalize().into();
    let named = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.strip_prefix("pack-"))
        .and_then(parse_hex);
    ours == trailer && named == Some(ours)
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

/// One pack being written: objects are kept in memory up to
/// [`SPILL_BYTES`], then go to a temporary file as they come.
pub struct PackWriter {
    store: PathBuf,
    tmp: PathBuf,
    sink: Sink,
    offset: u64,
    /// (id, offset, crc32 of the packed bytes) of each object.
    entries: Vec<(Oid, u64, u32)>,
    buf: Vec<u8>,
}

enum Sink {
    Memory(Vec<u8>),
    File(std::io::BufWriter<std::fs::File>),
}

/// A pack up to this size is made in memory and written once, straight
/// to its place; a larger one is written to a temporary file as it is
/// made.
const SPILL_BYTES: usize = 8 << 20;

/// Names of this process's temporary files in a store's root.
const TMP_PREFIX: &str = "tmp-tinyagent-";

thread_local! {
    /// One deflate state for every object this thread packs (making one
    /// costs more than compressing a small file).
    static DEFLATE: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(flate2::Compression::fast(), true));
}

/// `data` zlib-compressed (what a pack holds of each object), appended to
/// `out`.
fn deflate_into(data: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    DEFLATE.with(|z| {
        let mut z = z.borrow_mut();
        z.reset();
        out.reserve(data.len() / 2 + 64);
        loop {
            let before = z.total_in();
            let done = usize::try_from(before).unwrap_or(usize::MAX);
            let status = z
                .compress_vec(
                    data.get(done..).unwrap_or(&[]),
                    out,
                    flate2::FlushCompress::Finish,
                )
                .map_err(std::io::Error::other)?;
            match status {
                flate2::Status::StreamEnd => return Ok(()),
                flate2::Status::Ok | flate2::Status::BufError => {
                    out.reserve(out.capacity().max(64));
                }
            }
        }
    })
}

impl PackWriter {
    /// A pack for the store `git_dir` (its objects go to `objects/pack/`).
    pub fn new(git_dir: &Path) -> std::io::Result<PackWriter> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = git_dir.join(format!("{TMP_PREFIX}{}-{n}.pack", std::process::id()));
        let mut w = PackWriter {
            store: git_dir.to_path_buf(),
            tmp,
            sink: Sink::Memory(Vec::with_capacity(16 << 10)),
            offset: 0,
            entries: Vec::new(),
            buf: Vec::new(),
        };
        // The object count is patched in at the end.
        w.put(b"PACK\0\0\0\x02\0\0\0\0")?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if let Sink::Memory(m) = &mut self.sink
            && m.len() + bytes.len() > SPILL_BYTES
        {
            let mut f = std::io::BufWriter::with_capacity(64 << 10, tmp_file(&self.tmp)?);
            f.write_all(m)?;
            self.sink = Sink::File(f);
        }
        match &mut self.sink {
            Sink::Memory(m) => m.extend_from_slice(bytes),
            Sink::File(f) => f.write_all(bytes)?,
        }
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
        deflate_into(data, &mut buf)?;
        self.entries.push((id, self.offset, crc32fast::hash(&buf)));
        let r = self.put(&buf);
        self.buf = buf;
        r
    }

    /// Completes the pack and its index, durably, under their final names
    /// in `objects/pack/`; gives the pack's name. Nothing is left behind if
    /// it fails.
    pub fn finish(self, spares: Option<&Spares>) -> std::io::Result<String> {
        // Removed on every way out but success.
        let mut left = Leftovers(vec![self.tmp.clone()]);
        let count = u32::try_from(self.entries.len())
            .map_err(|_| std::io::Error::other("too many objects for one pack"))?;
        let packs = self.store.join("objects/pack");
        // The pack's bytes are complete (count and trailer) before its
        // name is known: the name is the trailer.
        let (file, trailer) = match self.sink {
            Sink::Memory(mut m) => {
                m[8..12].copy_from_slice(&count.to_be_bytes());
                let trailer: Oid = Sha1::digest(&m).into();
                m.extend_from_slice(&trailer);
                (Placed::Bytes(m), trailer)
            }
            Sink::File(f) => {
                use std::io::{Read, Seek, SeekFrom};
                let mut file = f.into_inner().map_err(std::io::Error::other)?;
                file.seek(SeekFrom::Start(8))?;
                file.write_all(&count.to_be_bytes())?;
                // The trailer is the SHA-1 of everything before it: read
                // back (from the page cache) rather than kept in memory.
                file.seek(SeekFrom::Start(0))?;
                let mut sum = Sha1::new();
                let mut chunk = vec![0u8; 64 << 10];
                loop {
                    let n = file.read(&mut chunk)?;
                    if n == 0 {
                        break;
                    }
                    sum.update(&chunk[..n]);
                }
                let trailer: Oid = sum.finalize().into();
                file.write_all(&trailer)?;
                (Placed::Tmp(file), trailer)
            }
        };
        let name = format!("pack-{}", hex(&trailer));
        let pack_path = packs.join(format!("{name}.pack"));
        let idx_path = packs.join(format!("{name}.idx"));
        // A pack of this name already in place holds these very bytes; one
        // without its index (it could not be indexed again) is replaced by
        // the same bytes, and never removed if this fails.
        let in_place = pack_path.is_file();
        if in_place && std::fs::read(&idx_path).is_ok_and(|b| idx_ids(&b).is_some()) {
            // The same objects, already in place and indexed (a pack's
            // name is the hash of its bytes).
            drop(file);
            return Ok(name);
        }
        let mut entries = self.entries;
        entries.sort_unstable_by_key(|a| a.0);
        // The index is made ready beside the store before the pack is
        // synced, and goes into place only after: an index in place always
        // stands beside a whole pack. It is not synced: a machine that
        // loses it (power, not a kill) leaves a whole pack with no index or
        // a torn one, which the next run of this store indexes again
        // (`Checkpointer::index_again`, `git index-pack`) before it reads
        // the store; nothing is lost, since the pack holds every object.
        let new_file = |tmp: PathBuf| match spares.and_then(Spares::take) {
            Some(spare) => Ok(spare),
            None => tmp_file(&tmp).map(|f| (tmp, f)),
        };
        let (idx_tmp, mut f) = new_file(self.tmp.with_extension("idx"))?;
        left.0.push(idx_tmp.clone());
        f.write_all(&idx_bytes(&entries, &trailer))?;
        drop(f);
        // The pack is written (or renamed) into its place and synced there:
        // the sync carries its name to the disk with its data (a
        // journalling file system commits the new entry with the data's
        // blocks), so the directory's sync after it has nothing left to
        // wait for. A pack in place without an index is not used by git,
        // and one a kill or power loss cut short fails its checksum and is
        // removed by the next run (no record can name it: records follow
        // this sync).
        let file = match file {
            Placed::Bytes(m) => {
                let (tmp, mut f) = new_file(self.tmp.clone())?;
                left.0.push(tmp.clone());
                f.write_all(&m)?;
                if !in_place {
                    left.0.push(pack_path.clone());
                }
                std::fs::rename(&tmp, &pack_path)?;
                f
            }
            Placed::Tmp(f) => {
                if !in_place {
                    left.0.push(pack_path.clone());
                }
                std::fs::rename(&self.tmp, &pack_path)?;
                f
            }
        };
        file.sync_data()?;
        super::git::sync_dir(&packs)?;
        // Durable now: only the index is left to remove if it fails.
        left.0.retain(|p| *p == idx_tmp);
        std::fs::rename(&idx_tmp, &idx_path)?;
        left.0.clear();
        Ok(name)
    }
}

/// Empty files made ahead, on a thread of their own, for the next packs and
/// indexes of one store: making a file (a new inode) costs this machine's
/// file system far more than writing a small one, often more than a sync,
/// so a checkpoint takes files made while the run was doing something else
/// and only renames them. They are temporary files of the store's root
/// (removed by [`clear_tmp`] after a kill, and when the pool is dropped);
/// none need be durable, since each is written, renamed and synced by the
/// checkpoint that takes it.
pub struct Spares {
    ready: std::sync::Arc<std::sync::Mutex<Vec<(PathBuf, std::fs::File)>>>,
    wake: Option<std::sync::mpsc::Sender<()>>,
    maker: Option<std::thread::JoinHandle<()>>,
}

/// Files kept ready: a pack and its index, for two checkpoints.
const SPARES: usize = 4;

impl Spares {
    /// A pool for the store at `git_dir`, filled at once in the background.
    pub fn new(git_dir: &Path) -> Spares {
        let ready = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (wake, asked) = std::sync::mpsc::channel::<()>();
        let pool = std::sync::Arc::clone(&ready);
        let dir = git_dir.to_path_buf();
        let maker = std::thread::Builder::new()
            .name("checkpoint-spares".into())
            .spawn(move || {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                while asked.recv().is_ok() {
                    loop {
                        let have = pool
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .len();
                        if have >= SPARES {
                            break;
                        }
                        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let path =
                            dir.join(format!("{TMP_PREFIX}{}-spare-{n}", std::process::id()));
                        // A store that cannot take a file now: the
                        // checkpoint makes its own and says why if it must.
                        let Ok(f) = tmp_file(&path) else { break };
                        pool.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((path, f));
                    }
                }
            })
            .ok();
        let spares = Spares {
            ready,
            wake: maker.as_ref().map(|_| wake),
            maker,
        };
        spares.refill();
        spares
    }

    /// A file made ahead, if one is ready. The pool is not refilled here:
    /// making a file holds the store's root directory, which the pack's
    /// and the index's renames out of it then wait for (under `strace`, a
    /// refill started at the pack's rename held the index's rename up to
    /// 0.7 ms). The checkpoint calls [`Spares::refill`] once its pack is in
    /// place.
    fn take(&self) -> Option<(PathBuf, std::fs::File)> {
        self.ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    }

    /// Makes the files taken again, in the background.
    pub fn refill(&self) {
        if let Some(w) = &self.wake {
            let _ = w.send(());
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(t) = self.maker.take() {
            let _ = t.join();
        }
        for (path, _) in self
            .ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Files a pack that failed leaves: removed when dropped.
struct Leftovers(Vec<PathBuf>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A finished pack's bytes: in memory, or in the temporary file.
enum Placed {
    Bytes(Vec<u8>),
    Tmp(std::fs::File),
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
