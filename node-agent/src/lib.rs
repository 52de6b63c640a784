//! The Troupe node agent: the host process an application pod runs around the runtime
//! (probes, shutdown order and control-plane reporting arrive with later issues).

use troupe::{ActorSystem, SystemError};

/// Start the agent's actor system named `name` on the current tokio runtime.
pub fn start(name: &str) -> Result<ActorSystem, SystemError> {
    ActorSystem::new(name)
}
