//! The real `troupe-agent` binary refuses bad input at start, before it binds or joins
//! anything: exit code 1 and one message on stderr that names both contradictory flags (or the
//! flag whose endpoint is missing) and what is allowed; an unknown value lists the allowed ones,
//! from the command line and from the environment alike. Nothing listens afterwards.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "bad flags test secret, long enough";

/// Run the agent with `args` and `env`; its exit code and stderr (bounded in time).
fn refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
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
    ] {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
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
