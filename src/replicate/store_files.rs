//! Which of a checkpoint store's files are shipped: the immutable ones under
//! `objects/` (loose objects, packs and their indexes), named by content, so
//! each is stored once. A fetch refuses a bucket that holds anything else.

use std::path::Path;

/// What a checkpoint store file's name (relative to the store) is to a
/// fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFile {
    /// A loose object (`objects/ab/<38 or 62 hex>`) or a pack and its index
    /// (`objects/pack/pack-<hex>.pack`, `.idx`): shipped and fetched.
    Object,
    /// A pack's derived file (`.rev`, `.bitmap`, `.mtimes`), which git
    /// makes again when it needs it: neither shipped nor fetched.
    Derived,
    /// Anything else (`objects/info/alternates`, a config, a hook): never
    /// shipped, and a bucket that holds one is refused.
    Other,
}

fn is_hex(s: &str, lens: &[usize]) -> bool {
    lens.contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Sorts a checkpoint store file's name.
pub fn store_file(rel: &str) -> StoreFile {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        ["objects", "pack", name] => {
            let Some((stem, ext)) = name.rsplit_once('.') else {
                return StoreFile::Other;
            };
            let hex_ok = stem
                .strip_prefix("pack-")
                .is_some_and(|h| is_hex(h, &[40, 64]));
            match (hex_ok, ext) {
                (true, "pack" | "idx") => StoreFile::Object,
                (true, "rev" | "bitmap" | "mtimes") => StoreFile::Derived,
                _ => StoreFile::Other,
            }
        }
        ["objects", dir, name] if is_hex(dir, &[2]) && is_hex(name, &[38, 62]) => StoreFile::Object,
        _ => StoreFile::Other,
    }
}

/// The immutable files under a checkpoint store's `objects/`, relative to
/// the store (`objects/ab/cdef…`, `objects/pack/pack-….pack`), sorted.
pub fn immutable_files(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let objects = store.join("objects");
    let Ok(top) = std::fs::read_dir(&objects) else {
        return out;
    };
    let skip = |name: &str| {
        let ext = Path::new(name).extension().and_then(|e| e.to_str());
        name.starts_with("tmp")
            || name.starts_with('.')
            || matches!(ext, Some("lock" | "tmp" | "keep" | "promisor"))
    };
    for d in top.flatten() {
        let dname = d.file_name().to_string_lossy().to_string();
        if dname == "info" || skip(&dname) || !d.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(inner) = std::fs::read_dir(d.path()) else {
            continue;
        };
        for f in inner.flatten() {
            let fname = f.file_name().to_string_lossy().to_string();
            if skip(&fname) || !f.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let rel = format!("objects/{dname}/{fname}");
            if store_file(&rel) == StoreFile::Object {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_immutable_object_files_are_listed() {
        let d = tempfile::tempdir().unwrap();
        let o = d.path().join("objects");
        for p in ["ab", "pack", "info"] {
            std::fs::create_dir_all(o.join(p)).unwrap();
        }
        for f in [
            &format!("ab/{H38}"),
            "ab/tmp_obj_x",
            &format!("pack/pack-{H40}.pack"),
            &format!("pack/pack-{H40}.idx"),
            &format!("pack/pack-{H40}.rev"),
            "pack/tmp_pack_y",
            "info/packs",
            "info/alternates",
        ] {
            std::fs::write(o.join(f), b"x").unwrap();
        }
        assert_eq!(
            immutable_files(d.path()),
            [
                format!("objects/ab/{H38}"),
                format!("objects/pack/pack-{H40}.idx"),
                format!("objects/pack/pack-{H40}.pack")
            ]
        );
    }

    const H38: &str = "0123456789abcdef0123456789abcdef012345";
    const H40: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn only_objects_and_packs_are_store_files() {
        use StoreFile::{Derived, Object, Other};
        for (rel, kind) in [
            (format!("objects/ab/{H38}"), Object),
            (format!("objects/pack/pack-{H40}.pack"), Object),
            (format!("objects/pack/pack-{H40}.idx"), Object),
            (format!("objects/pack/pack-{H40}.rev"), Derived),
            ("objects/info/alternates".into(), Other),
            ("objects/info/packs".into(), Other),
            ("objects/ab/cdef".into(), Other),
            (format!("objects/AB/{H38}"), Other),
            (format!("objects/pack/pack-{H40}.keep"), Other),
            (format!("objects/pack/../{H38}"), Other),
            ("config".into(), Other),
            (format!("hooks/ab/{H38}"), Other),
        ] {
            assert_eq!(store_file(&rel), kind, "{rel}");
        }
    }
}
