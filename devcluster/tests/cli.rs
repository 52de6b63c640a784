//! The launcher's command line: `--help` lists every option with its default, and input that
//! cannot work is refused before anything starts, with a message that says what is allowed.

use std::net::TcpListener;
use std::process::{Command, Output};

fn troupe_dev(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_troupe-dev"))
        .args(args)
        .output()
        .expect("run troupe-dev")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn help_lists_every_option_with_its_default() {
    let output = troupe_dev(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for option in [
        "--agents",
        "--port",
        "--data-dir",
        "--keep-data",
        "--no-demo",
        "--cluster",
        "--bin-dir",
        "--startup-timeout-secs",
        "--stop-grace-secs",
    ] {
        assert!(
            help.contains(option),
            "{option} missing from --help:\n{help}"
        );
    }
    for default in [
        "[default: 3]",
        "[default: .troupe-dev]",
        "[default: demo]",
        "[default: 60]",
        "[default: 20]",
        "8080 if it is",
    ] {
        assert!(
            help.contains(default),
            "{default} missing from --help:\n{help}"
        );
    }
}

#[test]
fn an_agent_count_out_of_range_is_refused_naming_the_range() {
    let output = troupe_dev(&["--agents", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("1..=16"), "{}", stderr(&output));
}

#[test]
fn missing_binaries_are_refused_saying_how_to_build_them() {
    let output = troupe_dev(&["--bin-dir", "/nonexistent-troupe-bin"]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("troupe-server not found at /nonexistent-troupe-bin/troupe-server")
            && message.contains("cargo build -p troupe-server -p troupe-agent -p troupe-dev"),
        "{message}"
    );
}

#[test]
fn a_port_in_use_is_refused_before_anything_starts() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let data = std::env::temp_dir().join(format!("troupe-dev-cli-{}", std::process::id()));
    // Binaries are looked for first; these are never started.
    std::fs::create_dir_all(&data).unwrap();
    for name in ["troupe-server", "troupe-agent"] {
        std::fs::write(data.join(name), "").unwrap();
    }
    let dir = data.to_str().unwrap();
    let output = troupe_dev(&["--port", &port, "--data-dir", dir, "--bin-dir", dir]);
    let _ = std::fs::remove_dir_all(&data);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(&format!("port {port} on 127.0.0.1 is in use")),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_child_that_dies_at_startup_fails_the_launch_with_its_log_and_exit_code() {
    use std::os::unix::fs::PermissionsExt;

    let dir = std::env::temp_dir().join(format!("troupe-dev-dies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A server that cannot start: it says why on stderr and exits 3.
    let server = dir.join("troupe-server");
    std::fs::write(
        &server,
        "#!/bin/sh\necho \"cannot open the store: disk full\" >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("troupe-agent"), "").unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let path = dir.to_str().unwrap();
    let output = troupe_dev(&["--port", &port, "--data-dir", path, "--bin-dir", path]);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("cannot open the store: disk full")
            && stdout.contains("server exited during startup (exit code 3)"),
        "the log's last lines and the exit code are shown: {stdout}"
    );
}
