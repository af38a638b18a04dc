//! A loose object whose zlib stream is stored, not compressed: what farm
//! writes for the large trees of a task's commits.
//!
//! Why: every task writes its `tasks/` and `tasks/done/` trees anew (an
//! entry a task, ~190 KB between them on a board of 5,000), twice when the
//! branch moved (the done commit, its replay), and reads them back. Their
//! entries are mostly object ids, which do not compress, yet deflating them
//! (libgit2 writes loose objects at zlib's level 1) was a sixth of farm's
//! own CPU a task on that board, and inflating them a tenth (perf,
//! `--call-graph dwarf`). Stored, a write is a copy and a checksum, and
//! every git reads it as any loose object. They live until the clone is
//! next packed (`git::maintain`), which compresses them; the push packs
//! them as git always does.
//!
//! (libgit2's own loose backend at level 0 does not do this: it writes the
//! object with no zlib stream around it at all, which git cannot read.)

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use git2::{ObjectType, Oid, Repository};

/// Write `data` as an object of `kind` to `repo`'s objects, unless it
/// has it already (loose, packed or borrowed); its id.
pub fn write_stored(repo: &Repository, kind: ObjectType, data: &[u8]) -> Result<Oid, git2::Error> {
    let id = Oid::hash_object(kind, data)?;
    if repo.odb()?.exists(id) {
        return Ok(id);
    }
    let mut object = format!("{} {}\0", kind.str(), data.len()).into_bytes();
    object.extend_from_slice(data);
    let stream = stored(&object)?;
    let hex = id.to_string();
    let dir = repo.path().join("objects").join(&hex[..2]);
    let fail = |e: std::io::Error| git2::Error::from_str(&format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(fail)?;
    let mut file = tempfile::Builder::new()
        .prefix("tmp_obj_")
        .tempfile_in(&dir)
        .map_err(fail)?;
    file.write_all(&stream).map_err(fail)?;
    // Objects are read-only, as git makes them.
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))
        .map_err(fail)?;
    match file.persist_noclobber(dir.join(&hex[2..])) {
        Ok(_) => Ok(id),
        // Written meanwhile by another (the same bytes: its name is its hash).
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(id),
        Err(e) => Err(fail(e.error)),
    }
}

/// `bytes` as a zlib stream at level 0: stored blocks, no compression.
fn stored(bytes: &[u8]) -> Result<Vec<u8>, git2::Error> {
    let too_large = || git2::Error::from_str("an object too large to store");
    let len = libz_sys::uLong::try_from(bytes.len()).map_err(|_| too_large())?;
    // SAFETY: zlib reads `len` bytes of `bytes` and writes at most
    // `bound` bytes into `out`, which has that capacity; `written` says
    // how many it wrote.
    unsafe {
        let bound = libz_sys::compressBound(len);
        let mut out: Vec<u8> = Vec::with_capacity(usize::try_from(bound).map_err(|_| too_large())?);
        let mut written = bound;
        let status = libz_sys::compress2(out.as_mut_ptr(), &mut written, bytes.as_ptr(), len, 0);
        if status != libz_sys::Z_OK {
            return Err(git2::Error::from_str(&format!("zlib failed ({status})")));
        }
        out.set_len(usize::try_from(written).map_err(|_| too_large())?);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// git reads the object (and checks it), and so does libgit2; the
    /// bytes are there as they are, not compressed; writing it again is
    /// no error.
    #[test]
    fn git_reads_a_stored_object() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init(tmp.path()).unwrap();
        let blob = repo.blob(b"hello\n").unwrap();
        // A tree larger than one stored block (65,535 bytes).
        let mut raw = Vec::new();
        for i in 0..3000 {
            raw.extend_from_slice(format!("100644 t{i:05}.md\0").as_bytes());
            raw.extend_from_slice(blob.as_bytes());
        }
        let id = write_stored(&repo, ObjectType::Tree, &raw).unwrap();
        assert_eq!(id, Oid::hash_object(ObjectType::Tree, &raw).unwrap());
        let hex = id.to_string();
        let path = repo.path().join("objects").join(&hex[..2]).join(&hex[2..]);
        let file = std::fs::read(&path).unwrap();
        assert!(
            file.len() > raw.len(),
            "stored, not compressed: {} bytes",
            file.len()
        );
        let entry = b"100644 t01234.md\0";
        assert!(file.windows(entry.len()).any(|w| w == entry));
        let git = |args: &[&str]| {
            crate::git::command::Repo::new(tmp.path())
                .run(args)
                .unwrap()
        };
        assert_eq!(git(&["cat-file", "-t", &hex]).trim(), "tree");
        assert!(git(&["ls-tree", &hex]).contains("t02999.md"));
        git(&["fsck", "--strict", "--no-dangling"]);
        assert_eq!(repo.find_tree(id).unwrap().len(), 3000);
        assert_eq!(write_stored(&repo, ObjectType::Tree, &raw).unwrap(), id);
    }
}
