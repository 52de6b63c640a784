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
//! the reporter goes on, and the batch stays in memory for delivery by this process. A spool
//! that cannot be read at start is logged and started empty: a broken spool never stops the
//! agent.

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

/// Why the spool directory is unusable at start.
#[derive(Debug, thiserror::Error)]
#[error(
    "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) {dir}: {source}; give a writable directory \
     (it is created if missing), or leave the flag unset to keep no spool"
)]
pub struct SpoolDirError {
    /// The directory.
    pub dir: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Create `dir` if missing and check that files can be made in it: a spool that cannot be
/// written is refused at start, not found out at the stop it exists for.
pub fn prepare(dir: &Path) -> Result<(), SpoolDirError> {
    let error = |source| SpoolDirError {
        dir: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(error)?;
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(error)?;
    std::fs::remove_file(&probe).map_err(error)
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
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the report spool; starting with an empty one");
                Vec::new()
            }
        };
        let mut file = Self {
            spool: Spool::new(settings.max_bytes),
            path: Some(path),
            write_errors: 0,
        };
        let lost = file.step(Event::Loaded(bytes));
        if !file.spool.is_empty() {
            tracing::info!(
                batches = file.spool.len(),
                bytes = file.spool.bytes(),
                path = %file.path().map(Path::display).map(|p| p.to_string()).unwrap_or_default(),
                "report batches spooled by an earlier run of this node: delivering them first"
            );
        }
        if !lost.is_empty() {
            tracing::warn!(
                batches = lost.batches,
                items = lost.items.total(),
                "the report spool lost batches (full, refused, or torn/unreadable in the file); counted in the next report"
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
                    let Some(path) = self.path.clone() else {
                        continue;
                    };
                    if let Err(error) = perform(&path, &file_action) {
                        self.write_errors += 1;
                        tracing::warn!(path = %path.display(), %error, "cannot write the report spool; its batches stay in memory only");
                    }
                }
            }
        }
        lost
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
        Action::Lost(_) => Ok(()),
    }
}
