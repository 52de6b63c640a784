//! `troupe-agent-next`: the agent built one wire-protocol version ahead (feature `wire-next`),
//! for the mixed-version rolling-upgrade test only: exactly the program in `src/main.rs`.

#[path = "../main.rs"]
mod agent;

fn main() {
    agent::main();
}
