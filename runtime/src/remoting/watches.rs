//! Remote death watch: local watchers of remote actors, remote watchers of local actors (one
//! proxy per watching node), remote stop and poison pill, and nodes that left.

use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};

use super::{Remoting, SYSTEM_CHANNEL};
use crate::address::{Address, UniqueAddress};
use crate::cell::{ActorId, SystemMsg, Watcher};
use crate::death_watch::Terminated;
use crate::path::ActorPath;

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum RemoteSystemMsg {
    Watch { path: String },
    Unwatch { path: String },
    Stop { path: String },
    PoisonPill { path: String },
    Terminated { path: String },
}

/// The refs on this node that watch one remote actor (each tells its own watchers).
pub(super) type WatchingCells = Vec<Weak<dyn Watcher>>;

impl Remoting {
    fn send_system(&self, to: &Address, message: &RemoteSystemMsg) -> bool {
        let Ok(payload) = postcard::to_allocvec(message) else {
            return false;
        };
        self.send_frame(to, Self::frame(SYSTEM_CHANNEL, &payload))
    }

    /// A local ref starts watching the remote actor it stands for.
    pub(super) fn watch_remote(&self, address: &Address, path: &str, cell: Weak<dyn Watcher>) {
        let first = {
            let mut watched = self.watched.lock();
            let entry = watched
                .entry((address.clone(), path.to_owned()))
                .or_default();
            entry.retain(|c| c.strong_count() > 0);
            let first = entry.is_empty();
            entry.push(cell);
            first
        };
        if first
            && !self.send_system(
                address,
                &RemoteSystemMsg::Watch {
                    path: path.to_owned(),
                },
            )
        {
            // Cannot even ask: treat the actor as gone rather than watch forever.
            self.remote_terminated(address, path);
        }
    }

    pub(super) fn stop_remote(&self, address: &Address, path: &str, poison_pill: bool) {
        let message = if poison_pill {
            RemoteSystemMsg::PoisonPill {
                path: path.to_owned(),
            }
        } else {
            RemoteSystemMsg::Stop {
                path: path.to_owned(),
            }
        };
        self.send_system(address, &message);
    }

    pub(super) fn remote_terminated(&self, address: &Address, path: &str) {
        let cells = self
            .watched
            .lock()
            .remove(&(address.clone(), path.to_owned()));
        let Some(cells) = cells else { return };
        let elements = path.to_owned();
        for cell in cells.into_iter().filter_map(|c| c.upgrade()) {
            cell.notify_terminated(Terminated {
                path: ActorPath::remote(address, &elements),
                id: cell.watcher_id(),
            });
        }
    }

    /// A node left the cluster: every actor watched there has terminated.
    pub fn node_removed(&self, address: &Address) {
        let paths: Vec<String> = self
            .watched
            .lock()
            .keys()
            .filter(|(a, _)| a == address)
            .map(|(_, p)| p.clone())
            .collect();
        for path in paths {
            self.remote_terminated(address, &path);
        }
        self.watcher_proxies
            .lock()
            .retain(|node, _| &node.address != address);
    }

    pub(super) fn on_system_message(&self, from: &UniqueAddress, message: RemoteSystemMsg) {
        let Some(system) = self.system() else { return };
        match message {
            RemoteSystemMsg::Watch { path } => {
                let proxy = Arc::clone(
                    self.watcher_proxies
                        .lock()
                        .entry(from.clone())
                        .or_insert_with(|| {
                            Arc::new(WatcherProxy::new(self.this.clone(), from.address.clone()))
                        }),
                );
                match system.resolve_any(&path) {
                    Ok(target) => {
                        if target
                            .cell
                            .send_system(SystemMsg::Watch(proxy as Arc<dyn Watcher>))
                            .is_err()
                        {
                            self.send_system(&from.address, &RemoteSystemMsg::Terminated { path });
                        }
                    }
                    Err(_) => {
                        self.send_system(&from.address, &RemoteSystemMsg::Terminated { path });
                    }
                }
            }
            RemoteSystemMsg::Unwatch { path } => {
                let proxy = self.watcher_proxies.lock().get(from).cloned();
                if let (Some(proxy), Ok(target)) = (proxy, system.resolve_any(&path)) {
                    let _ = target.cell.send_system(SystemMsg::Unwatch(proxy.id));
                }
            }
            RemoteSystemMsg::Stop { path } => {
                if let Ok(target) = system.resolve_any(&path) {
                    target.stop();
                }
            }
            RemoteSystemMsg::PoisonPill { path } => {
                if let Ok(target) = system.resolve_any(&path) {
                    target.poison_pill();
                }
            }
            RemoteSystemMsg::Terminated { path } => self.remote_terminated(&from.address, &path),
        }
    }
}

/// Stands on this node for a remote node watching a local actor: a `Terminated` it receives is
/// forwarded to that node.
pub(super) struct WatcherProxy {
    pub(super) id: ActorId,
    remoting: Weak<Remoting>,
    node: Address,
}

impl WatcherProxy {
    pub(super) fn new(remoting: Weak<Remoting>, node: Address) -> Self {
        Self {
            id: ActorId::next(),
            remoting,
            node,
        }
    }
}

impl Watcher for WatcherProxy {
    fn watcher_id(&self) -> ActorId {
        self.id
    }

    fn notify_terminated(&self, terminated: Terminated) {
        if let Some(remoting) = self.remoting.upgrade() {
            remoting.send_system(
                &self.node,
                &RemoteSystemMsg::Terminated {
                    path: terminated.path.elements().to_owned(),
                },
            );
        }
    }
}
