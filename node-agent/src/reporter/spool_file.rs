//! The report spool's file: performs the actions of the pure machine (`spool.rs`) on one file
//! per node in `--report-spool-dir`, and counts what it could not do. Without a directory the
//! same machine runs in memory only: the stop path still delivers in order within the flush
//! timeout, and what it cannot deliver is logged as lost.
//!
//! # Durability
//! An append is written whole and fsynced before the reporter goes on; a rewrite goes to a
//! temporary file that is fsynced and renamed over the spool, then the directory is fsynced,
//! so a kill leaves either the old file or the new one, and at worst a torn last line of an
//! append (skipped and counted at the next start).
//!
//! # When the disk fails
//! A failed write is logged at WARN and counted (`troupe_agent_reporter_spool_write_errors`);
//! the reporter goes on, and the batch stays in memory for delivery by this process.
//!
//! # When the file is damaged
//! A broken spool never stops the agent. At start each problem is logged in one WARN naming
//! the file and what was wrong, and what was given up is counted in the next report's
//! `dropped.spool_batches`: torn or unreadable lines are removed (the file is rewritten with
//! every batch that could be read); a file of another format version, a directory where the
//! file should be, or a file that cannot be read is moved aside to `<file>.bad-<epoch ms>`
//! for the operator, and the spool starts without it (an unreadable non-empty file counts as
//! one batch of unknown content, a directory as none).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::spool::{self, Action, Event, Spool, SpoolLoss};

/// Where and how big the spool is (`--report-spool-dir`, `--report-spool-max-bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolSettings {
    /// The directory (created at start if missing).
    pub dir: PathBuf,
    /// The most bytes one node's spool file may take.
    pub max_bytes: u64,
}

/// The lock file in the spool directory: held (`flock`, exclusive) by the one agent that
/// uses the directory, for as long as its process lives; it holds that agent's pid.
pub const LOCK_FILE: &str = "troupe-agent.lock";

/// Why the spool directory is unusable at start.
#[derive(Debug, thiserror::Error)]
pub enum SpoolDirError {
    /// Not a directory, cannot be created, or files cannot be made in it.
    #[error(
        "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) {dir}: {problem}; give a writable directory \
         (it is created if missing), or leave the flag unset to keep no spool"
    )]
    Unusable {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// Another agent holds the directory's lock.
    #[error(
        "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) {dir} is in use by another troupe-agent \
         ({holder} holds {lock}): one agent per spool directory. Give this agent a directory \
         of its own, or stop the other agent first"
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// Who holds it: `pid <n>`, or why that is not known.
        holder: String,
    },
}

/// The spool directory's lock, held by this process: released when dropped, and by the
/// kernel when the process dies however it dies (a SIGKILL included), so a stale lock never
/// blocks the next start. The file itself stays (removing it would race with the next
/// holder); only the lock on it counts.
#[derive(Debug)]
pub struct SpoolLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl SpoolLock {
    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Create `dir` if missing, check that files can be made in it, and take its lock: a spool
/// that cannot be written, or that another agent uses, is refused at start, not found out at
/// the stop it exists for.
///
/// # Errors
/// `dir` is not a directory, cannot be created or written, or another agent holds its lock
/// (the error names the pid written in the lock file).
pub fn prepare(dir: &Path) -> Result<SpoolLock, SpoolDirError> {
    let unusable = |problem: String| SpoolDirError::Unusable {
        dir: dir.to_owned(),
        problem,
    };
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(metadata) => {
            let what = if metadata.is_file() {
                "a regular file"
            } else {
                "neither a directory nor a regular file"
            };
            return Err(unusable(format!("it is {what}, not a directory")));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|error| {
                unusable(match error.kind() {
                    std::io::ErrorKind::NotADirectory => {
                        format!("cannot create it: a part of the path is not a directory ({error})")
                    }
                    _ => format!("cannot create it ({error})"),
                })
            })?;
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(unusable(format!(
                "cannot create it: a part of the path is not a directory ({error})"
            )));
        }
        Err(error) => return Err(unusable(format!("cannot look at it ({error})"))),
    }
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|error| {
            unusable(format!(
                "cannot create files in it ({error}, creating {})",
                path.display()
            ))
        })?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let holder = match std::fs::read_to_string(&path) {
                Ok(text) => match text.trim().parse::<u32>() {
                    Ok(pid) => format!("pid {pid}"),
                    // Locked but not written yet: the other agent is starting right now.
                    Err(_) => "an agent that is starting (its pid is not written yet)".to_owned(),
                },
                Err(error) => format!("an agent whose pid cannot be read ({error})"),
            };
            return Err(SpoolDirError::Locked {
                dir: dir.to_owned(),
                lock: path,
                holder,
            });
        }
        Err(error) => {
            return Err(unusable(format!(
                "cannot lock {} ({error})",
                path.display()
            )));
        }
    }
    let written = file
        .set_len(0)
        .and_then(|()| std::io::Seek::rewind(&mut file))
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .and_then(|()| file.sync_data());
    written.map_err(|error| {
        unusable(format!(
            "cannot write this agent's pid into {} ({error})",
            path.display()
        ))
    })?;
    Ok(SpoolLock { _file: file, path })
}

/// The spool machine and, when configured, its file.
#[derive(Debug)]
pub struct SpoolFile {
    spool: Spool,
    path: Option<PathBuf>,
    write_errors: u64,
}

impl SpoolFile {
    /// The spool of node `node` of cluster `cluster`: loaded from its file in `settings`' dir,
    /// or in memory only without settings. Answers the losses the load found (a torn or
    /// unreadable line, the loss record an earlier stop left) for the first report.
    #[must_use]
    pub fn open(settings: Option<&SpoolSettings>, cluster: &str, node: &str) -> (Self, SpoolLoss) {
        let Some(settings) = settings else {
            // In memory the bound is the reporter's buffer, which everything here came from.
            let file = Self {
                spool: Spool::new(u64::MAX),
                path: None,
                write_errors: 0,
            };
            return (file, SpoolLoss::default());
        };
        let path = settings.dir.join(spool::file_name(cluster, node));
        let mut file = Self {
            spool: Spool::new(settings.max_bytes),
            path: Some(path.clone()),
            write_errors: 0,
        };
        let mut lost = SpoolLoss::default();
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => {
                // A directory, no permission, an I/O error: move it aside so that this run's
                // spool can be written, and start empty.
                let metadata = std::fs::metadata(&path).ok();
                let directory = metadata.as_ref().is_some_and(std::fs::Metadata::is_dir);
                let problem = if directory {
                    "a directory is where the spool file should be".to_owned()
                } else {
                    format!("it cannot be read ({error})")
                };
                if !directory && metadata.is_some_and(|m| m.len() > 0) {
                    lost.add(file.step(Event::Unreadable));
                }
                // Moved before the log line: the macro skips its fields when WARN is off.
                let moved_to = quarantine(&path);
                tracing::warn!(
                    path = %path.display(),
                    problem = %problem,
                    moved_to = %moved_to,
                    lost_batches = lost.batches,
                    "the report spool file is damaged: started without it (lost batches counted in the next report's dropped.spool_batches)"
                );
                Vec::new()
            }
        };
        let mut damage = None;
        let mut moved_to = None;
        for action in spool::step(&mut file.spool, Event::Loaded(bytes)) {
            match action {
                Action::Lost(loss) => lost.add(loss),
                Action::Damaged(found) => damage = Some(found),
                Action::Quarantine => moved_to = Some(quarantine(&path)),
                other => file.perform_logged(&path, &other),
            }
        }
        if let Some(damage) = damage {
            tracing::warn!(
                path = %path.display(),
                problem = %damage,
                moved_to = moved_to.as_deref().unwrap_or("-"),
                kept_batches = file.spool.len(),
                lost_batches = lost.batches,
                "the report spool file is damaged: kept every batch it could read, gave up the rest (counted in the next report's dropped.spool_batches)"
            );
        } else if !lost.is_empty() {
            tracing::warn!(
                path = %path.display(),
                batches = lost.batches,
                items = lost.items.total(),
                "the report spool lost batches (full, or refused on replay) in an earlier run of this node; counted in the next report"
            );
        }
        if !file.spool.is_empty() {
            tracing::info!(
                batches = file.spool.len(),
                bytes = file.spool.bytes(),
                path = %path.display(),
                "report batches spooled by an earlier run of this node: delivering them first"
            );
        }
        (file, lost)
    }

    /// The machine (read-only).
    #[must_use]
    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    /// The file, when there is one.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes that failed.
    #[must_use]
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// Advance the machine and perform its actions; answers the losses to count now.
    pub fn step(&mut self, event: Event) -> SpoolLoss {
        let mut lost = SpoolLoss::default();
        for action in spool::step(&mut self.spool, event) {
            match action {
                Action::Lost(loss) => lost.add(loss),
                file_action => {
                    if let Some(path) = self.path.clone() {
                        self.perform_logged(&path, &file_action);
                    }
                }
            }
        }
        lost
    }

    fn perform_logged(&mut self, path: &Path, action: &Action) {
        if let Err(error) = perform(path, action) {
            self.write_errors += 1;
            tracing::warn!(path = %path.display(), %error, "cannot write the report spool; its batches stay in memory only");
        }
    }
}

/// Move the damaged `path` aside to `<path>.bad-<epoch ms>`; where it went.
fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".bad-{ms}"));
    let aside = PathBuf::from(aside);
    std::fs::rename(path, &aside)?;
    sync_dir(path)?;
    Ok(aside)
}

/// [`move_aside`], for a log line: where it went, or why it stayed.
fn quarantine(path: &Path) -> String {
    match move_aside(path) {
        Ok(aside) => aside.display().to_string(),
        Err(error) => format!("nowhere: cannot move it ({error})"),
    }
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

fn perform(path: &Path, action: &Action) -> std::io::Result<()> {
    match action {
        Action::Append(text) => {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            file.write_all(text.as_bytes())?;
            file.sync_data()?;
            sync_dir(path)
        }
        Action::Rewrite(text) => {
            let temporary = path.with_extension("jsonl.tmp");
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, path)?;
            sync_dir(path)
        }
        Action::Remove => {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
            sync_dir(path)
        }
        Action::Quarantine => move_aside(path).map(drop),
        Action::Lost(_) | Action::Damaged(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("troupe-spool-file-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn settings(&self) -> SpoolSettings {
            SpoolSettings {
                dir: self.0.clone(),
                max_bytes: 64 * 1024,
            }
        }

        /// The names in it other than the spool file's own.
        fn aside(&self) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(&self.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.contains(".bad-"))
                .collect();
            names.sort();
            names
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn batch(sequence: u64) -> troupe_protocol::ReportBatch {
        troupe_protocol::ReportBatch {
            version: troupe_protocol::PROTOCOL_VERSION,
            identity: troupe_protocol::AgentIdentity {
                cluster: "c".into(),
                node: "127.0.0.1:1".into(),
                incarnation: 1,
                meta: troupe_protocol::AgentMeta::default(),
                cluster_identity: None,
            },
            sequence,
            sent_at_ms: 1,
            events: vec![],
            depth_samples: vec![],
            dropped: troupe_protocol::DroppedCounts::default(),
        }
    }

    /// After a damaged start the spool still works: a batch appended is in the file.
    fn still_writes(file: &mut SpoolFile) {
        file.step(Event::Append(Box::new(batch(9))));
        file.step(Event::Persist);
        assert_eq!(file.write_errors(), 0);
        let text = std::fs::read_to_string(file.path().unwrap()).unwrap();
        assert!(text.starts_with("{\"troupe_report_spool\":1}\n"), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    #[test]
    fn a_directory_where_the_file_should_be_is_moved_aside_and_the_spool_starts_empty() {
        let dir = Dir::new("directory");
        let path = dir.0.join(spool::file_name("c", "127.0.0.1:1"));
        std::fs::create_dir(&path).unwrap();
        let (mut file, lost) = SpoolFile::open(Some(&dir.settings()), "c", "127.0.0.1:1");
        assert!(file.spool().is_empty());
        assert_eq!(lost.batches, 0, "a directory holds no batch");
        assert_eq!(dir.aside().len(), 1, "moved aside for the operator");
        still_writes(&mut file);
    }

    #[test]
    fn a_file_that_cannot_be_read_is_moved_aside_and_the_spool_starts_empty() {
        let dir = Dir::new("unreadable");
        let path = dir.0.join(spool::file_name("c", "127.0.0.1:1"));
        // A link to itself cannot be read, whoever the test runs as.
        std::os::unix::fs::symlink(&path, &path).unwrap();
        let (mut file, _) = SpoolFile::open(Some(&dir.settings()), "c", "127.0.0.1:1");
        assert!(file.spool().is_empty());
        assert_eq!(dir.aside().len(), 1);
        still_writes(&mut file);
    }

    #[test]
    fn a_damaged_file_keeps_what_it_could_read_and_counts_the_rest() {
        let dir = Dir::new("damaged");
        let path = dir.0.join(spool::file_name("c", "127.0.0.1:1"));
        let line = |sequence| serde_json::to_string(&batch(sequence)).unwrap();
        std::fs::write(
            &path,
            format!("{}\nnot json\n{}\n{{\"torn", line(1), line(2)),
        )
        .unwrap();
        let (file, lost) = SpoolFile::open(Some(&dir.settings()), "c", "127.0.0.1:1");
        assert_eq!(file.spool().len(), 2);
        assert_eq!(lost.batches, 2, "the garbage line and the torn tail");
        assert!(dir.aside().is_empty(), "bad lines are removed, not kept");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines().count(),
            3,
            "the header and two batches: {text}"
        );
    }

    #[test]
    fn a_file_of_another_version_is_moved_aside() {
        let dir = Dir::new("version");
        let path = dir.0.join(spool::file_name("c", "127.0.0.1:1"));
        std::fs::write(&path, "{\"troupe_report_spool\":7}\n{}\n{}\n").unwrap();
        let (mut file, lost) = SpoolFile::open(Some(&dir.settings()), "c", "127.0.0.1:1");
        assert!(file.spool().is_empty());
        assert_eq!(lost.batches, 2);
        let aside = dir.aside();
        assert_eq!(aside.len(), 1);
        assert_eq!(
            std::fs::read_to_string(dir.0.join(&aside[0])).unwrap(),
            "{\"troupe_report_spool\":7}\n{}\n{}\n",
            "kept as it was"
        );
        still_writes(&mut file);
    }
}
