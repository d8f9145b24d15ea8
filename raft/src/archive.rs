//! Where a node keeps the archives of the shows its groups archived, one file per show, and the
//! archive segments of records compacted out of live shows, one file per compaction: in one
//! directory, each written before the entry that removes its records is applied here.
//!
//! Owns the file names and the durable write (a temporary file synced, renamed into place, and
//! the directory synced). Never decides whether a show may be archived (the state machine
//! does) and never reads an archive's records (the node does, with `statemachine::read_archive`).
//! Every replica that applies an `ArchiveShow` entry writes the same bytes; a replica that
//! catches up past that entry through a snapshot has no copy of the archive.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use statemachine::ShowId;

/// A directory of show archives.
#[derive(Clone, Debug)]
pub struct ArchiveDir {
    path: PathBuf,
}

impl ArchiveDir {
    /// The archive directory at `path`, created if missing.
    ///
    /// # Errors
    ///
    /// If the directory cannot be created.
    pub fn open(path: impl Into<PathBuf>) -> io::Result<ArchiveDir> {
        let path = path.into();
        fs::create_dir_all(&path)?;
        Ok(ArchiveDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file of `show`'s archive.
    pub fn file_of(&self, show: ShowId) -> PathBuf {
        self.path.join(format!("show-{}.jsonl", show.0))
    }

    /// The file of the archive segment of `show`'s records compacted by the entry at `index`.
    pub fn segment_of(&self, show: ShowId, index: u64) -> PathBuf {
        self.path.join(format!("show-{}.compacted-{index:020}.jsonl", show.0))
    }

    /// Every archive segment of `show` this replica has, oldest first.
    ///
    /// # Errors
    ///
    /// If the directory or a segment cannot be read.
    pub fn segments(&self, show: ShowId) -> io::Result<Vec<Vec<u8>>> {
        let prefix = format!("show-{}.compacted-", show.0);
        let mut names: Vec<PathBuf> = fs::read_dir(&self.path)?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(".jsonl"))
            })
            .collect();
        names.sort();
        names.into_iter().map(fs::read).collect()
    }

    /// Reads `show`'s archive, if this replica has it.
    ///
    /// # Errors
    ///
    /// If the file exists but cannot be read.
    pub fn read(&self, show: ShowId) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.file_of(show)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Writes `show`'s archive durably: whole or not at all, even across a crash.
    ///
    /// # Errors
    ///
    /// If any write, sync or rename fails.
    pub fn write(&self, show: ShowId, bytes: &[u8]) -> io::Result<()> {
        self.write_file(&self.file_of(show), bytes)
    }

    /// Writes the segment of `show`'s records compacted by the entry at `index`, durably.
    ///
    /// # Errors
    ///
    /// If any write, sync or rename fails.
    pub fn write_segment(&self, show: ShowId, index: u64, bytes: &[u8]) -> io::Result<()> {
        self.write_file(&self.segment_of(show, index), bytes)
    }

    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let part = path.with_extension("jsonl.part");
        let mut file = File::create(&part)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&part, path)?;
        File::open(&self.path)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_is_written_whole_and_read_back() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let archives = ArchiveDir::open(dir.path().join("archive")).expect("opened");
        assert_eq!(archives.read(ShowId(7)).expect("read"), None);
        archives.write(ShowId(7), b"{\"header\":{}}\n").expect("written");
        archives.write(ShowId(7), b"again\n").expect("rewritten");
        assert_eq!(archives.read(ShowId(7)).expect("read").as_deref(), Some(&b"again\n"[..]));
        let names: Vec<_> = fs::read_dir(archives.path())
            .expect("listed")
            .map(|entry| entry.expect("an entry").file_name())
            .collect();
        assert_eq!(names, ["show-7.jsonl"], "no temporary file is left");
        archives.write_segment(ShowId(7), 12, b"second\n").expect("a segment");
        archives.write_segment(ShowId(7), 3, b"first\n").expect("a segment");
        archives.write_segment(ShowId(71), 1, b"another show's\n").expect("a segment");
        let segments = archives.segments(ShowId(7)).expect("read");
        assert_eq!(segments, [b"first\n".to_vec(), b"second\n".to_vec()], "in log order");
    }
}
