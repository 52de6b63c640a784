//! An acquire whose answer arrives after the grant's local validity has run out.
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use troupe_lease::lease::store::{GrantEnded, GrantedLease, LeaseStore, RenewError};
use troupe_lease::lease::{FencingToken, Lease, LeaseError, LeaseLost, LeaseSettings};

#[derive(Default)]
struct Store {
    /// (owner, token, expires_at)
    grant: Mutex<Option<(String, u64, Instant)>>,
    next: Mutex<u64>,
    /// How long the answer to an acquire of this owner takes after the store granted it.
    answer_delay: Mutex<Vec<(String, Duration)>>,
}

impl LeaseStore for Store {
    type Grant = ();
    async fn try_acquire(
        &self,
        _name: &str,
        owner: &str,
        settings: &LeaseSettings,
        _ended: GrantEnded,
    ) -> Result<Option<(FencingToken, ())>, LeaseError> {
        let now = Instant::now();
        let token = {
            let mut g = self.grant.lock();
            if let Some((o, _, exp)) = g.as_ref()
                && o != owner
                && *exp > now
            {
                return Ok(None);
            }
            let mut next = self.next.lock();
            *next += 1;
            *g = Some((owner.to_owned(), *next, now + settings.ttl()));
            *next
        };
        let delay = self
            .answer_delay
            .lock()
            .iter()
            .find(|(o, _)| o == owner)
            .map(|(_, d)| *d);
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        Ok(Some((FencingToken(token), ())))
    }
    async fn renew(
        &self,
        _: &str,
        owner: &str,
        token: FencingToken,
        _: &(),
        settings: &LeaseSettings,
    ) -> Result<(), RenewError> {
        let now = Instant::now();
        let mut g = self.grant.lock();
        match g.as_mut() {
            Some((o, t, exp)) if o == owner && *t == token.0 && *exp > now => {
                *exp = now + settings.ttl();
                Ok(())
            }
            _ => Err(RenewError::Gone("not held".into())),
        }
    }
    async fn release(
        &self,
        _: &str,
        owner: &str,
        token: FencingToken,
        _: &(),
    ) -> Result<(), LeaseError> {
        let mut g = self.grant.lock();
        if matches!(g.as_ref(), Some((o, t, _)) if o == owner && *t == token.0) {
            *g = None;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_acquire_answered_after_the_ttl_is_not_reported_as_held() {
    let settings = LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(250)).unwrap();
    let store = Arc::new(Store::default());
    store
        .answer_delay
        .lock()
        .push(("a".into(), Duration::from_millis(1500)));
    let a = GrantedLease::new(Arc::clone(&store), "l", "a", settings).unwrap();
    let b = GrantedLease::new(Arc::clone(&store), "l", "b", settings).unwrap();
    let ignore = || Box::new(|_: LeaseLost| {}) as Box<dyn Fn(LeaseLost) + Send + Sync>;
    let slow = tokio::spawn(async move { (a.acquire(ignore()).await, a) });
    // a's grant expires at the store at t = 1 s; b acquires at t = 1.2 s.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let b_token = b.acquire(ignore()).await.unwrap();
    assert!(
        b_token.is_some(),
        "b acquires after a's grant expired at the store"
    );
    let (a_answer, a) = slow.await.unwrap();
    // a's answer arrives at t = 1.5 s, past its local deadline (0.75 s) and past the store TTL.
    assert_eq!(
        a_answer.unwrap(),
        None,
        "a late answer must count as not held (b holds {b_token:?}, a holds() = {})",
        a.holds()
    );
}
