//! Typed slots for the layers built on top of something (remoting on an actor system, the
//! singleton registry on a cluster), so the thing extended does not name what extends it —
//! Akka's `ExtensionId`, reduced to what the runtime needs.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

/// At most one value of each type, created on first use and shared from then on.
#[derive(Default)]
pub(crate) struct Extensions {
    slots: Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>,
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("count", &self.slots.lock().len())
            .finish()
    }
}

impl Extensions {
    /// The extension of type `E`, if one was installed.
    pub(crate) fn get<E: Send + Sync + 'static>(&self) -> Option<Arc<E>> {
        let slots = self.slots.lock();
        let (_, slot) = slots.iter().find(|(id, _)| *id == TypeId::of::<E>())?;
        Arc::clone(slot).downcast::<E>().ok()
    }

    /// The extension of type `E`, installing the one `make` builds if there is none yet; a
    /// second caller gets the first one.
    pub(crate) fn get_or_insert_with<E: Send + Sync + 'static>(
        &self,
        make: impl FnOnce() -> Arc<E>,
    ) -> Arc<E> {
        let mut slots = self.slots.lock();
        if let Some((_, slot)) = slots.iter().find(|(id, _)| *id == TypeId::of::<E>())
            && let Ok(existing) = Arc::clone(slot).downcast::<E>()
        {
            return existing;
        }
        let made = make();
        slots.push((
            TypeId::of::<E>(),
            Arc::clone(&made) as Arc<dyn Any + Send + Sync>,
        ));
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_gets_one_slot_and_the_first_value_wins() {
        let extensions = Extensions::default();
        assert!(extensions.get::<u32>().is_none());
        assert_eq!(*extensions.get_or_insert_with(|| Arc::new(1u32)), 1);
        assert_eq!(*extensions.get_or_insert_with(|| Arc::new(2u32)), 1);
        assert_eq!(*extensions.get_or_insert_with(|| Arc::new(7u64)), 7);
        assert_eq!(extensions.get::<u32>().as_deref(), Some(&1));
    }
}
