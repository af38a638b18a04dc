//! What the fs store read of each claim file, kept between listings in
//! `current_tasks/.read-cache`: a listing of 10,000 claims then looks at
//! each file (one system call) instead of opening, reading and closing it
//! (three more), and `farm locks` stays under 100 ms on a busy machine
//! (`benches/README.md`, 'Board scale').
//!
//! A kept read is used only while the file is the same inode, of the same
//! size, with the same change time: every write to it, every rename onto its
//! name and every `touch` moves its ctime. As in git's "racy git" rule, a
//! file changed less than [`RACY`] before it was read is not kept — ctime
//! moves in ticks of the kernel's coarse clock, so a second write within
//! the tick of the first could leave it where it was.
//!
//! The file is farm's own scratch: unreadable, cut short or of another
//! version, it is ignored and written again; writing it is best effort (a
//! reader with no right to write the hub just reads every claim).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The cache's file name in the claims directory (a dot file: farm's own,
/// never a claim).
pub(super) const FILE: &str = ".read-cache";

/// Listings of fewer claims than this neither read nor write the cache:
/// reading them costs less than keeping it.
pub(super) const FROM: usize = 256;

/// How long before a read a file must have last changed for its read to be
/// kept (see the module doc).
const RACY: Duration = Duration::from_secs(2);

const MAGIC: &str = "farm read-cache 1\n";

/// What identifies one version of a file: inode, size, ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Key {
    pub ino: u64,
    pub size: u64,
    /// Seconds and nanoseconds since the epoch.
    pub ctime: (i64, i64),
}

impl Key {
    fn changed(&self) -> SystemTime {
        let (s, ns) = self.ctime;
        match (u64::try_from(s), u32::try_from(ns)) {
            (Ok(s), Ok(ns)) => SystemTime::UNIX_EPOCH + Duration::new(s, ns),
            _ => SystemTime::UNIX_EPOCH,
        }
    }
}

/// The reads kept by the last listing, and those of this one.
pub(super) struct ReadCache {
    path: PathBuf,
    text: Vec<u8>,
    /// Name → its key and where its bytes are in `text`.
    kept: HashMap<String, (Key, std::ops::Range<usize>)>,
}

impl ReadCache {
    /// The cache of the claims directory `dir`; empty when there is none
    /// or it cannot be read.
    pub fn load(dir: &Path) -> ReadCache {
        let path = dir.join(FILE);
        let text = fs::read(&path).unwrap_or_default();
        let kept = parse(&text).unwrap_or_default();
        ReadCache { path, text, kept }
    }

    /// The bytes read of `name` when it was the version `key`.
    pub fn get(&self, name: &str, key: &Key) -> Option<&[u8]> {
        let (k, range) = self.kept.get(name)?;
        (k == key).then(|| &self.text[range.clone()])
    }

    /// Write the cache again, for a listing that found `hits` in it (names
    /// whose kept read it used) and made `fresh` reads (name, key, bytes)
    /// at `now` — unless that would change nothing. Best effort.
    pub fn save(&self, hits: &[String], fresh: &[(String, Key, Vec<u8>)], now: SystemTime) {
        let fresh: Vec<&(String, Key, Vec<u8>)> = fresh
            .iter()
            .filter(|(name, key, bytes)| {
                !name.contains(['\t', '\n'])
                    && bytes.len() as u64 == key.size
                    && now
                        .duration_since(key.changed())
                        .is_ok_and(|age| age >= RACY)
            })
            .collect();
        if fresh.is_empty() && hits.len() == self.kept.len() {
            return; // the same reads as before
        }
        let mut out = Vec::with_capacity(self.text.len().max(4096));
        out.extend_from_slice(MAGIC.as_bytes());
        let mut entry = |name: &str, key: &Key, bytes: &[u8]| {
            let _ = writeln!(
                out,
                "{name}\t{}\t{}\t{}\t{}",
                key.ino, key.size, key.ctime.0, key.ctime.1
            );
            out.extend_from_slice(bytes);
        };
        for name in hits {
            if let Some((key, range)) = self.kept.get(name) {
                entry(name, key, &self.text[range.clone()]);
            }
        }
        for (name, key, bytes) in fresh {
            entry(name, key, bytes);
        }
        // Written aside, in a file of its own (the loops of one run list on
        // their own threads), and renamed over: a reader sees the old cache
        // or a new one, never half of one. (A writer killed midway leaves a
        // `.tmp` file that the store's tidying removes.)
        let Some(dir) = self.path.parent() else {
            return;
        };
        let temp = tempfile::Builder::new()
            .prefix(&format!("{FILE}."))
            .suffix(".tmp")
            .tempfile_in(dir);
        if let Ok(mut temp) = temp
            && temp.write_all(&out).is_ok()
        {
            let _ = temp.persist(&self.path);
        }
    }
}

/// The entries of a cache file; `None` when it is not one, or is cut short.
fn parse(text: &[u8]) -> Option<HashMap<String, (Key, std::ops::Range<usize>)>> {
    let mut at = MAGIC.len();
    if text.get(..at)? != MAGIC.as_bytes() {
        return None;
    }
    let mut kept = HashMap::new();
    while at < text.len() {
        let end = at + text[at..].iter().position(|&b| b == b'\n')?;
        let line = std::str::from_utf8(&text[at..end]).ok()?;
        let mut fields = line.split('\t');
        let name = fields.next()?;
        let mut number = || fields.next()?.parse::<i64>().ok();
        let (ino, size, secs, nanos) = (number()?, number()?, number()?, number()?);
        let key = Key {
            ino: u64::try_from(ino).ok()?,
            size: u64::try_from(size).ok()?,
            ctime: (secs, nanos),
        };
        let start = end + 1;
        let stop = start.checked_add(usize::try_from(key.size).ok()?)?;
        if stop > text.len() {
            return None;
        }
        kept.insert(name.to_owned(), (key, start..stop));
        at = stop;
    }
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ino: u64, size: u64, secs: i64) -> Key {
        Key {
            ino,
            size,
            ctime: (secs, 123_456_789),
        }
    }

    const LONG_AGO: i64 = 1_700_000_000;

    #[test]
    fn a_saved_read_is_found_by_its_key_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let empty = ReadCache::load(tmp.path());
        let now = SystemTime::now();
        let fresh = vec![
            ("t1".to_owned(), key(7, 5, LONG_AGO), b"one\n\n".to_vec()),
            ("t2".to_owned(), key(8, 3, LONG_AGO), b"two".to_vec()),
        ];
        empty.save(&[], &fresh, now);
        let cache = ReadCache::load(tmp.path());
        assert_eq!(cache.get("t1", &key(7, 5, LONG_AGO)), Some(&b"one\n\n"[..]));
        assert_eq!(cache.get("t2", &key(8, 3, LONG_AGO)), Some(&b"two"[..]));
        for other in [
            key(9, 5, LONG_AGO),
            key(7, 4, LONG_AGO),
            key(7, 5, LONG_AGO + 1),
        ] {
            assert_eq!(cache.get("t1", &other), None, "{other:?}");
        }
        assert_eq!(cache.get("t3", &key(7, 5, LONG_AGO)), None);

        // Kept by the next listing that used it; dropped by one that did not.
        cache.save(&["t2".to_owned()], &[], now);
        let cache = ReadCache::load(tmp.path());
        assert_eq!(cache.get("t1", &key(7, 5, LONG_AGO)), None);
        assert_eq!(cache.get("t2", &key(8, 3, LONG_AGO)), Some(&b"two"[..]));
    }

    #[test]
    fn a_file_changed_just_before_its_read_is_not_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let since = |d: Duration| {
            let t = now.duration_since(SystemTime::UNIX_EPOCH).unwrap() - d;
            (t.as_secs() as i64, i64::from(t.subsec_nanos()))
        };
        let recent = Key {
            ino: 1,
            size: 1,
            ctime: since(Duration::from_millis(500)),
        };
        let settled = Key {
            ino: 2,
            size: 1,
            ctime: since(Duration::from_secs(3)),
        };
        let short = key(3, 2, LONG_AGO); // read short of its size
        ReadCache::load(tmp.path()).save(
            &[],
            &[
                ("recent".into(), recent, b"r".to_vec()),
                ("settled".into(), settled, b"s".to_vec()),
                ("short".into(), short, b"s".to_vec()),
                ("a\tb".into(), settled, b"s".to_vec()),
            ],
            now,
        );
        let cache = ReadCache::load(tmp.path());
        assert_eq!(cache.get("recent", &recent), None);
        assert_eq!(cache.get("settled", &settled), Some(&b"s"[..]));
        assert_eq!(cache.get("short", &short), None);
        assert_eq!(
            cache.get("a\tb", &settled),
            None,
            "not a name the file can hold"
        );
    }

    #[test]
    fn a_cache_file_cut_short_or_foreign_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        ReadCache::load(tmp.path()).save(
            &[],
            &[("t1".into(), key(7, 5, LONG_AGO), b"12345".to_vec())],
            now,
        );
        let whole = fs::read(tmp.path().join(FILE)).unwrap();
        for bad in [
            &whole[..whole.len() - 1],
            &whole[..MAGIC.len() + 3],
            b"farm read-cache 0\n".as_slice(),
            b"\xff\xfe garbage".as_slice(),
        ] {
            fs::write(tmp.path().join(FILE), bad).unwrap();
            let cache = ReadCache::load(tmp.path());
            assert!(cache.kept.is_empty(), "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(cache.get("t1", &key(7, 5, LONG_AGO)), None);
        }
    }
}
