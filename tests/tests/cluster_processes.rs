//! Three `troupe-agent` processes on 127.0.0.1 form a cluster over TCP; a SIGKILLed one is seen
//! unreachable, then removed, by the other two; a SIGTERMed one leaves gracefully.

use std::time::{Duration, Instant};

use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e cluster secret, long enough";
const WAIT: Duration = Duration::from_secs(30);

fn agent_args(port: u16, seed: u16) -> Vec<String> {
    vec![
        "--system".into(),
        "e2e".into(),
        "--bind".into(),
        format!("127.0.0.1:{port}"),
        "--seed".into(),
        format!("troupe://e2e@127.0.0.1:{seed}"),
        "--secret".into(),
        SECRET.into(),
        "--down-after-ms".into(),
        "3000".into(),
        "--events-json".into(),
        // Three agents share this machine: each gets a free management port.
        "--management-bind".into(),
        "127.0.0.1:0".into(),
    ]
}

fn is_event(line: &serde_json::Value, kind: &str, port: u16) -> bool {
    line["event"] == kind && line["member"]["address"] == format!("troupe://e2e@127.0.0.1:{port}")
}

async fn three_agents() -> (Vec<Process>, Vec<u16>) {
    let agent = binary("troupe-agent");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut agents: Vec<Process> = ports
        .iter()
        .map(|&p| Process::start(&agent, &agent_args(p, ports[0])))
        .collect();
    for agent in &mut agents {
        for &port in &ports {
            agent
                .wait_for(WAIT, &format!("MemberUp of {port}"), |l| {
                    is_event(l, "MemberUp", port)
                })
                .await;
        }
    }
    (agents, ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_agent_is_seen_unreachable_then_removed_by_the_other_two() {
    let (mut agents, ports) = three_agents().await;
    let victim = ports[2];
    let killed_at = Instant::now();
    agents[2].kill().await;
    for agent in &mut agents[..2] {
        agent
            .wait_for(WAIT, "MemberUnreachable of the killed agent", |l| {
                is_event(l, "MemberUnreachable", victim)
            })
            .await;
    }
    let unreachable_after = killed_at.elapsed();
    for agent in &mut agents[..2] {
        agent
            .wait_for(WAIT, "MemberRemoved of the killed agent", |l| {
                is_event(l, "MemberRemoved", victim)
            })
            .await;
    }
    let removed_after = killed_at.elapsed();
    eprintln!(
        "SIGKILL → MemberUnreachable on both peers: {unreachable_after:?}; → MemberRemoved: {removed_after:?}"
    );
    assert!(
        unreachable_after < Duration::from_secs(10),
        "{unreachable_after:?}"
    );
    for agent in &mut agents[..2] {
        agent.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_agent_leaves_gracefully_and_exits_zero() {
    let (mut agents, ports) = three_agents().await;
    let status = agents[1].terminate(WAIT).await;
    assert!(status.success(), "agent exit status {status:?}");
    for index in [0, 2] {
        let agent = &mut agents[index];
        agent
            .wait_for(WAIT, "MemberLeft of the terminated agent", |l| {
                is_event(l, "MemberLeft", ports[1])
            })
            .await;
        agent
            .wait_for(WAIT, "MemberRemoved of the terminated agent", |l| {
                is_event(l, "MemberRemoved", ports[1])
            })
            .await;
    }
    // It left; it was never unreachable.
    for agent in [&agents[0], &agents[2]] {
        assert!(
            !agent
                .seen
                .iter()
                .any(|l| is_event(l, "MemberUnreachable", ports[1]))
        );
    }
    for agent in &mut agents {
        agent.kill().await;
    }
}
