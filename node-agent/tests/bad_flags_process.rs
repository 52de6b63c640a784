//! The real `troupe-agent` binary refuses bad input at start, before it binds or joins
//! anything: exit code 1 and one message on stderr that names both contradictory flags (or the
//! flag whose endpoint is missing) and what is allowed; an unknown value lists the allowed ones,
//! from the command line and from the environment alike. Nothing listens afterwards.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "bad flags test secret, long enough";

/// Run the agent with `args` and `env`; its exit code and stderr (bounded in time).
fn refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    refused_as(args, env, |_| {})
}

/// [`refused`], with `configure` applied to the command (its user, its working directory).
fn refused_as(
    args: &[&str],
    env: &[(&str, &str)],
    configure: impl FnOnce(&mut Command),
) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_troupe-agent"));
    command
        .args(["--secret", SECRET, "--management-bind", "127.0.0.1:0"])
        .args(["--bind", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for key in [
        "TROUPE_MEMBERSHIP",
        "TROUPE_SEEDS",
        "TROUPE_SINGLETON_LEASE",
        "TROUPE_DIRECTORY",
        "TROUPE_DOWNING",
        "TROUPE_ETCD_ENDPOINTS",
        "TROUPE_KUBE_API_URL",
        "TROUPE_CONTROL_PLANE_URL",
        "TROUPE_REPORT_SPOOL_DIR",
        "TROUPE_REPORT_SPOOL_MAX_BYTES",
    ] {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
    configure(&mut command);
    let mut child = command.spawn().expect("start troupe-agent");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for troupe-agent") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("troupe-agent {args:?} did not refuse to start: it kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

fn assert_names(stderr: &str, words: &[&str]) {
    for word in words {
        assert!(stderr.contains(word), "{word:?} not in: {stderr}");
    }
}

#[test]
fn contradictory_flags_are_refused_at_start_naming_both_flags() {
    let seed = "troupe://troupe@127.0.0.1:2552";
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["--membership", "kubernetes", "--seed", seed],
            &["--membership kubernetes", "--seed", "--membership gossip"],
        ),
        (
            &["--membership", "kubernetes", "--downing", "auto-down"],
            &["--downing", "--membership gossip"],
        ),
        (
            &["--seed", seed, "--kube-api-url", "http://127.0.0.1:8001"],
            &["--kube-api-url", "--membership kubernetes"],
        ),
        (
            &["--seed", seed, "--etcd-endpoints", "http://127.0.0.1:2379"],
            &["--etcd-endpoints", "--singleton-lease etcd"],
        ),
    ];
    for (args, words) in cases {
        let (code, stderr) = refused(args, &[]);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert_names(&stderr, words);
    }
    // The same contradiction through the environment (as the Helm chart sets it).
    let (code, stderr) = refused(
        &[],
        &[
            ("TROUPE_MEMBERSHIP", "etcd"),
            ("TROUPE_ETCD_ENDPOINTS", "http://e:2379"),
            ("TROUPE_SEEDS", seed),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(&stderr, &["--membership etcd", "--seed", "TROUPE_SEEDS"]);
}

#[test]
fn a_lease_backend_without_its_endpoint_is_refused_at_start_naming_the_missing_flag() {
    let seed = "troupe://troupe@127.0.0.1:2552";
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["--membership", "etcd"],
            &["--membership etcd", "--etcd-endpoints"],
        ),
        (
            &["--seed", seed, "--singleton-lease", "etcd"],
            &["--singleton-lease etcd", "--etcd-endpoints"],
        ),
        (
            &["--seed", seed, "--singleton-lease", "postgres"],
            &[
                "--singleton-lease postgres",
                "--singleton-lease-database-url",
            ],
        ),
        (
            &["--seed", seed, "--singleton-lease", "control-plane"],
            &["--singleton-lease control-plane", "--control-plane"],
        ),
    ];
    for (args, words) in cases {
        let (code, stderr) = refused(args, &[]);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert_names(&stderr, words);
    }
}

#[test]
fn unknown_values_are_refused_at_start_listing_the_allowed_ones() {
    let cases: [(&str, &str, &str); 4] = [
        ("--membership", "zookeeper", "gossip, kubernetes, etcd"),
        (
            "--singleton-lease",
            "redis",
            "none, kubernetes, etcd, postgres, control-plane",
        ),
        (
            "--directory",
            "consul",
            "none, etcd, postgres, control-plane",
        ),
        ("--downing", "oldest", "keep-majority, auto-down"),
    ];
    for (flag, value, allowed) in cases {
        let (code, stderr) = refused(&[flag, value], &[]);
        assert_eq!(code, Some(1), "{flag} {value}: {stderr}");
        assert_names(&stderr, &[value, allowed]);
    }
    let (code, stderr) = refused(&[], &[("TROUPE_MEMBERSHIP", "zookeeper")]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(&stderr, &["zookeeper", "gossip, kubernetes, etcd"]);
}

/// A fresh directory under the system's temporary one, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("troupe-bad-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The agent with a control plane (never contacted: the start is refused first) and `dir`
/// as its spool; its exit code and stderr.
fn refused_spool(dir: &Path, configure: impl FnOnce(&mut Command)) -> (Option<i32>, String) {
    let dir = dir.to_str().expect("utf-8 path");
    let seed = "troupe://troupe@127.0.0.1:2552";
    refused_as(
        &[
            "--seed",
            seed,
            "--control-plane",
            "http://127.0.0.1:9",
            "--report-spool-dir",
            dir,
        ],
        &[],
        configure,
    )
}

/// What every refusal of the spool directory says is allowed.
const SPOOL_ALLOWED: &str =
    "give a writable directory (it is created if missing), or leave the flag unset";

#[test]
fn a_spool_dir_that_is_a_file_or_under_one_is_refused_at_start_naming_the_path() {
    let scratch = Scratch::new("file");
    let file = scratch.0.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let (code, stderr) = refused_spool(&file, |_| {});
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(
        &stderr,
        &[
            "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR)",
            file.to_str().unwrap(),
            "it is a regular file, not a directory",
            SPOOL_ALLOWED,
        ],
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"not a directory",
        "left alone"
    );

    let under = file.join("spool");
    let (code, stderr) = refused_spool(&under, |_| {});
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(
        &stderr,
        &[
            under.to_str().unwrap(),
            "cannot create it: a part of the path is not a directory",
            SPOOL_ALLOWED,
        ],
    );
}

#[test]
fn a_spool_dir_that_cannot_be_written_is_refused_at_start_naming_the_path() {
    let scratch = Scratch::new("read-only");
    let dir = scratch.0.join("spool");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    // The permission bits bind everyone but root: as root, the agent runs as nobody.
    let root = rustix::process::geteuid().is_root();
    let (code, stderr) = refused_spool(&dir, |command| {
        if root {
            command.uid(65_534).gid(65_534);
        }
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(
        &stderr,
        &[
            dir.to_str().unwrap(),
            "cannot create files in it (Permission denied",
            "troupe-agent.lock",
            SPOOL_ALLOWED,
        ],
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing made in it"
    );

    // A directory that cannot be created (its parent is read-only) likewise.
    let missing = dir.join("missing");
    let (code, stderr) = refused_spool(&missing, |command| {
        if root {
            command.uid(65_534).gid(65_534);
        }
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(
        &stderr,
        &[
            missing.to_str().unwrap(),
            "cannot create it (Permission denied",
            SPOOL_ALLOWED,
        ],
    );
}

#[test]
fn a_relative_spool_dir_is_refused_at_start_asking_for_an_absolute_one() {
    let scratch = Scratch::new("relative");
    let within = scratch.0.clone();
    let (code, stderr) = refused_spool(Path::new("spool"), |command| {
        command.current_dir(&within);
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(
        &stderr,
        &[
            "--report-spool-dir (TROUPE_REPORT_SPOOL_DIR) spool is a relative path",
            "give an absolute one",
        ],
    );
    assert!(!scratch.0.join("spool").exists(), "nothing created");
    // From the environment too.
    let (code, stderr) = refused_as(
        &["--seed", "troupe://troupe@127.0.0.1:2552"],
        &[
            ("TROUPE_CONTROL_PLANE_URL", "http://127.0.0.1:9"),
            ("TROUPE_REPORT_SPOOL_DIR", "var/spool"),
        ],
        |command| {
            command.current_dir(&within);
        },
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_names(&stderr, &["var/spool is a relative path"]);
}
