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
