//! [`SingletonKey`]: the name and role a singleton is known by on every node.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// Names a singleton that accepts messages of type `M`, and the role its host must carry.
///
/// The role belongs on the key, not only in the start options: a node that only calls
/// [`crate::singleton::ClusterSingleton::proxy`] has the key and nothing else, and its proxy
/// must resolve the same host as the managers. Start options may still override it
/// ([`crate::singleton::StartSingletonOptions::with_role`]) where a deployment needs its own
/// answer.
///
/// ```
/// use troupe::singleton::SingletonKey;
/// # #[derive(serde::Serialize, serde::Deserialize)] enum IngressCommand { Drain }
///
/// let ingress = SingletonKey::of::<IngressCommand>("ingress", "edge");
/// let scheduler = SingletonKey::of::<IngressCommand>("job-scheduler", None);
/// assert_eq!(ingress.role(), Some("edge"));
/// assert_eq!(scheduler.role(), None);
/// ```
pub struct SingletonKey<M> {
    type_name: Arc<str>,
    role: Option<Arc<str>>,
    _message: PhantomData<fn(M)>,
}

impl SingletonKey<()> {
    /// The singleton named `type_name` that takes messages of type `M`, hosted by members
    /// carrying `role` (any member when `None`): `SingletonKey::of::<Command>("ingress", "edge")`.
    /// `type_name` names the instance actor and its manager, so it must be a valid actor name;
    /// `start` and `proxy` check it.
    pub fn of<'a, M>(type_name: &str, role: impl Into<Option<&'a str>>) -> SingletonKey<M> {
        SingletonKey {
            type_name: Arc::from(type_name),
            role: role.into().map(Arc::from),
            _message: PhantomData,
        }
    }
}

impl<M> SingletonKey<M> {
    /// The singleton's name.
    #[must_use]
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The role its host must carry.
    #[must_use]
    pub fn role(&self) -> Option<&str> {
        self.role.as_deref()
    }

    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.type_name)
    }
}

impl<M> Clone for SingletonKey<M> {
    fn clone(&self) -> Self {
        Self {
            type_name: Arc::clone(&self.type_name),
            role: self.role.clone(),
            _message: PhantomData,
        }
    }
}

impl<M> PartialEq for SingletonKey<M> {
    fn eq(&self, other: &Self) -> bool {
        self.type_name == other.type_name && self.role == other.role
    }
}

impl<M> Eq for SingletonKey<M> {}

impl<M> fmt::Debug for SingletonKey<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingletonKey")
            .field("type_name", &self.type_name)
            .field("role", &self.role)
            .field("message", &std::any::type_name::<M>())
            .finish()
    }
}
