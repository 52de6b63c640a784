//! The virtual actor tests' harness: a keyed cart actor that reports every activation's start
//! and stop, and a directory wrapper that can be cut off (a killed node's connection).
//!
//! Include with `#[path = "support/virtual_harness.rs"] mod harness;`.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe::directory::{
    Claim, ClaimOutcome, Directory, DirectoryError, DirectoryFuture, DirectorySnapshot,
    DirectoryWatch, Revision,
};
use troupe::remoting::RemoteMessage;
use troupe::{Actor, ActorError, Address, Context, ReplyTo};

/// The cart's messages.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum CartMsg {
    /// Add `amount` on behalf of sender `from`.
    Add { from: u64, amount: u64 },
    /// Reply with the total this activation has seen.
    Total { reply: ReplyTo<u64> },
    /// Reply with the senders this activation has seen, in arrival order.
    Senders { reply: ReplyTo<Vec<u64>> },
    /// Reply with the node this activation runs on.
    Node { reply: ReplyTo<String> },
}

impl RemoteMessage for CartMsg {
    const MANIFEST: &'static str = "test.virtual.CartMsg";
}

/// An activation's start or stop, as the cart reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Life {
    Started { node: Address, key: String },
    Stopped { node: Address, key: String },
}

/// One activation of one key.
pub(crate) struct Cart {
    pub(crate) node: Address,
    pub(crate) key: String,
    pub(crate) total: u64,
    pub(crate) senders: Vec<u64>,
    pub(crate) lives: mpsc::UnboundedSender<Life>,
}

impl Cart {
    /// The factory of node `node`, reporting to `lives`.
    pub(crate) fn factory(
        node: Address,
        lives: mpsc::UnboundedSender<Life>,
    ) -> impl Fn(&str) -> Cart + Send + Sync + 'static {
        move |key: &str| Cart {
            node: node.clone(),
            key: key.to_owned(),
            total: 0,
            senders: Vec::new(),
            lives: lives.clone(),
        }
    }
}

impl Actor for Cart {
    type Msg = CartMsg;

    async fn pre_start(&mut self, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let _ = self.lives.send(Life::Started {
            node: self.node.clone(),
            key: self.key.clone(),
        });
        Ok(())
    }

    async fn handle(&mut self, msg: CartMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            CartMsg::Add { from, amount } => {
                self.total += amount;
                self.senders.push(from);
            }
            CartMsg::Total { reply } => reply.send(self.total),
            CartMsg::Senders { reply } => reply.send(self.senders.clone()),
            CartMsg::Node { reply } => reply.send(self.node.to_string()),
        }
        Ok(())
    }

    async fn post_stop(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.lives.send(Life::Stopped {
            node: self.node.clone(),
            key: self.key.clone(),
        });
    }
}

/// A node's connection to a shared directory: the real directory until [`Severable::cut`],
/// then every operation fails as an unreachable backend does (a killed process's connection).
#[derive(Debug, Clone)]
pub(crate) struct Severable {
    inner: Arc<dyn Directory>,
    cut: Arc<AtomicBool>,
}

impl Severable {
    pub(crate) fn new(inner: Arc<dyn Directory>) -> Self {
        Self {
            inner,
            cut: Arc::new(AtomicBool::new(false)),
        }
    }

    /// From now on every operation fails.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// `op` runs only while connected (the in-memory directory acts when called, not when
    /// awaited).
    fn gate<T: Send + 'static>(
        &self,
        op: impl FnOnce() -> DirectoryFuture<T>,
    ) -> DirectoryFuture<T> {
        if self.cut.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(DirectoryError::Unavailable(
                "connection cut".to_owned(),
            ))));
        }
        op()
    }
}

impl Directory for Severable {
    fn claim(&self, actor: &str, host: &str) -> DirectoryFuture<ClaimOutcome> {
        self.gate(|| self.inner.claim(actor, host))
    }
    fn lookup(&self, actor: &str) -> DirectoryFuture<Option<Claim>> {
        self.gate(|| self.inner.lookup(actor))
    }
    fn release(&self, actor: &str, host: &str) -> DirectoryFuture<bool> {
        self.gate(|| self.inner.release(actor, host))
    }
    fn evict_host(&self, host: &str) -> DirectoryFuture<Vec<String>> {
        self.gate(|| self.inner.evict_host(host))
    }
    fn snapshot(&self) -> DirectoryFuture<DirectorySnapshot> {
        self.gate(|| self.inner.snapshot())
    }
    fn watch(&self, after: Revision) -> DirectoryFuture<DirectoryWatch> {
        self.gate(|| self.inner.watch(after))
    }
}
