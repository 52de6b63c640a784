//! The registry of message types by manifest, and the resolution of a recipient path to the
//! local actor that takes a remote `M` (directly, or converted into its own message type).

use std::any::TypeId;
use std::sync::Arc;

use super::envelope::WireEnvelope;
use super::{RemoteMessage, Remoting};
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::address::UniqueAddress;
use crate::path::ActorPath;
use crate::system::{ActorSystem, ResolveError};

pub(super) type Deliver = Arc<dyn Fn(&Remoting, &UniqueAddress, WireEnvelope) + Send + Sync>;

/// A local recipient of remote `M`s: an actor taking `M`, or one taking another type that `M`
/// converts into (see [`Remoting::register_into`]).
pub(super) enum Target<M> {
    Direct(ActorRef<M>),
    Converted {
        target: AnyActorRef,
        deliver: ConvertAndTell<M>,
    },
}

/// Delivers a remote `M`, with its sender, to the actor it was resolved for (see
/// [`Remoting::register_into`]).
pub(crate) type ConvertAndTell<M> = Arc<dyn Fn(M, &ActorPath) + Send + Sync>;

impl<M> Clone for Target<M> {
    fn clone(&self) -> Self {
        match self {
            Self::Direct(target) => Self::Direct(target.clone()),
            Self::Converted { target, deliver } => Self::Converted {
                target: target.clone(),
                deliver: Arc::clone(deliver),
            },
        }
    }
}

impl<M: Send + 'static> Target<M> {
    pub(super) fn is_terminated(&self) -> bool {
        match self {
            Self::Direct(target) => target.is_terminated(),
            Self::Converted { target, .. } => target.is_terminated(),
        }
    }

    pub(super) fn tell_from(&self, message: M, sender: &ActorPath) {
        match self {
            Self::Direct(target) => target.tell_from(message, sender),
            Self::Converted { deliver, .. } => deliver(message, sender),
        }
    }
}

/// Finds the conversion of `M` for an actor of some other message type.
type Convert<M> = Arc<dyn Fn(&AnyActorRef) -> Option<Target<M>> + Send + Sync>;

impl Remoting {
    /// Accept messages of type `M` from other nodes, delivered to the local actor at the path
    /// they name. Both sides register the same types.
    pub fn register<M: RemoteMessage>(&self) {
        let deliver: Deliver = Arc::new(
            |remoting: &Remoting, from: &UniqueAddress, envelope: WireEnvelope| {
                remoting.deliver_local::<M>(from, envelope);
            },
        );
        self.registry.write().insert(M::MANIFEST, deliver);
        self.registered_types
            .write()
            .insert(TypeId::of::<M>(), M::MANIFEST);
    }

    /// Like [`Remoting::register`], and also deliver `M` to local actors that take `N`: when a
    /// recipient path resolves to such an actor, `bind` is called once with it and returns how
    /// to deliver each `M` (with its sender, so `ctx.origin()` is kept) — typically converted
    /// into an `N`. For an actor that receives several message types from other nodes (the
    /// singleton manager).
    pub fn register_into<M, N, B>(&self, bind: B)
    where
        M: RemoteMessage,
        N: Send + 'static,
        B: Fn(ActorRef<N>) -> ConvertAndTell<M> + Send + Sync + 'static,
    {
        self.register::<M>();
        let into: Convert<M> = Arc::new(move |target: &AnyActorRef| {
            let typed = target.downcast::<N>()?;
            Some(Target::Converted {
                target: target.clone(),
                deliver: bind(typed),
            })
        });
        let mut conversions = self.conversions.write();
        let mut all: Vec<Convert<M>> = conversions
            .get(&TypeId::of::<M>())
            .and_then(|existing| existing.downcast_ref::<Vec<Convert<M>>>())
            .cloned()
            .unwrap_or_default();
        all.push(into);
        conversions.insert(TypeId::of::<M>(), Arc::new(all));
    }

    /// Whether `M` has been registered.
    #[must_use]
    pub fn is_registered<M: RemoteMessage>(&self) -> bool {
        self.registered_types
            .read()
            .contains_key(&TypeId::of::<M>())
    }

    pub(super) fn resolve_cached<M: RemoteMessage>(
        &self,
        system: &ActorSystem,
        path: &str,
    ) -> Result<Target<M>, ResolveError> {
        let key = (TypeId::of::<M>(), path.to_owned());
        if let Some(cached) = self.resolved.read().get(&key)
            && let Some(target) = cached.downcast_ref::<Target<M>>()
            && !target.is_terminated()
        {
            return Ok(target.clone());
        }
        let target = match system.resolve::<M>(path) {
            Ok(target) => Target::Direct(target),
            Err(error @ ResolveError::WrongMessageType { .. }) => {
                self.converted::<M>(system, path).ok_or(error)?
            }
            Err(error) => return Err(error),
        };
        let mut resolved = self.resolved.write();
        resolved.retain(|_, cached| {
            cached
                .downcast_ref::<Target<M>>()
                .is_none_or(|r| !r.is_terminated())
        });
        resolved.insert(key, Arc::new(target.clone()));
        Ok(target)
    }

    /// The actor at `path` through a conversion registered for `M`, if one fits its type.
    fn converted<M: RemoteMessage>(&self, system: &ActorSystem, path: &str) -> Option<Target<M>> {
        let conversions = self.conversions.read().get(&TypeId::of::<M>())?.clone();
        let conversions = conversions.downcast_ref::<Vec<Convert<M>>>()?;
        let target = system.resolve_any(path).ok()?;
        conversions.iter().find_map(|convert| convert(&target))
    }
}
