//! Rendezvous (highest-random-weight) hashing with a hash that is stable across processes,
//! platforms and versions, so every node pins a key to the same routee.
//!
//! # Why rendezvous
//! Each key goes to the routee with the highest `score(key, routee)`. Adding a routee moves only
//! the keys it now wins (about 1/N of them); removing one moves only the keys it held. No ring,
//! no virtual nodes, and no state beyond the routee list.

/// FNV-1a over the bytes, finished with a 64-bit avalanche mix. Stable forever: changing it would
/// re-pin every key in every deployed cluster.
#[must_use]
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(hash)
}

fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The weight of a routee whose [`stable_hash`] is `routee_hash` for a key whose hash is
/// `key_hash`.
#[must_use]
pub(crate) fn rendezvous_score_hashed(key_hash: u64, routee_hash: u64) -> u64 {
    mix(key_hash ^ routee_hash.rotate_left(29))
}

/// The index of the routee that wins `key`, or `None` when there are no routees. Ties (which
/// need a 64-bit collision) go to the routee whose id sorts first.
#[cfg(test)]
#[must_use]
pub(crate) fn rendezvous_pick<'a, I>(key: &[u8], routees: I) -> Option<usize>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    rendezvous_pick_hashed(
        key,
        routees
            .into_iter()
            .map(|routee| (stable_hash(routee), routee)),
    )
}

/// [`rendezvous_pick`] over `(stable_hash(id), id)` pairs, for callers that keep each routee's
/// hash instead of hashing its id for every key.
#[must_use]
pub(crate) fn rendezvous_pick_hashed<'a, I>(key: &[u8], routees: I) -> Option<usize>
where
    I: IntoIterator<Item = (u64, &'a [u8])>,
{
    let key_hash = stable_hash(key);
    let mut best: Option<(u64, &[u8], usize)> = None;
    for (index, (routee_hash, routee)) in routees.into_iter().enumerate() {
        let score = rendezvous_score_hashed(key_hash, routee_hash);
        let better = match best {
            None => true,
            Some((best_score, best_id, _)) => {
                score > best_score || (score == best_score && routee < best_id)
            }
        };
        if better {
            best = Some((score, routee, index));
        }
    }
    best.map(|(_, _, index)| index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("troupe://app@10.0.0.{i}:2552/user/worker"))
            .collect()
    }

    fn owner(key: &str, routees: &[String]) -> String {
        let index = rendezvous_pick(key.as_bytes(), routees.iter().map(|r| r.as_bytes())).unwrap();
        routees[index].clone()
    }

    #[test]
    fn the_hash_is_pinned_to_known_values() {
        // If this fails, keys would move in every running cluster on upgrade.
        assert_eq!(stable_hash(b""), mix(0xcbf2_9ce4_8422_2325));
        assert_eq!(stable_hash(b"user-42"), stable_hash(b"user-42"));
        assert_ne!(stable_hash(b"user-42"), stable_hash(b"user-43"));
    }

    #[test]
    fn no_routees_means_no_pick() {
        assert_eq!(rendezvous_pick(b"k", std::iter::empty()), None);
    }

    proptest! {
        #[test]
        fn a_key_stays_on_one_routee_for_a_fixed_set(n in 1usize..20, key in "[a-z0-9]{1,16}") {
            let routees = ids(n);
            let first = owner(&key, &routees);
            let mut reversed = routees.clone();
            reversed.reverse();
            prop_assert_eq!(&first, &owner(&key, &routees));
            // The order the routees are listed in does not matter.
            prop_assert_eq!(&first, &owner(&key, &reversed));
        }

        #[test]
        fn adding_a_routee_moves_about_one_nth_of_keys_and_only_to_it(n in 2usize..16) {
            let before = ids(n);
            let after = ids(n + 1);
            let added = after[n].clone();
            let keys: Vec<String> = (0..4_000).map(|i| format!("key-{i}")).collect();
            let mut moved = 0usize;
            for key in &keys {
                let (old, new) = (owner(key, &before), owner(key, &after));
                if old != new {
                    prop_assert_eq!(&new, &added, "a key may only move to the new routee");
                    moved += 1;
                }
            }
            let expected = keys.len() as f64 / (n + 1) as f64;
            let ratio = moved as f64 / expected;
            prop_assert!((0.75..1.25).contains(&ratio), "moved {moved}, expected about {expected:.0}");
        }

        #[test]
        fn removing_a_routee_moves_only_its_keys(n in 2usize..16, removed in 0usize..16) {
            let removed = removed % n;
            let before = ids(n);
            let mut after = before.clone();
            let gone = after.remove(removed);
            let keys: Vec<String> = (0..4_000).map(|i| format!("key-{i}")).collect();
            let mut moved = 0usize;
            for key in &keys {
                let old = owner(key, &before);
                if old != owner(key, &after) {
                    prop_assert_eq!(&old, &gone, "only keys of the removed routee move");
                    moved += 1;
                }
            }
            let expected = keys.len() as f64 / n as f64;
            let ratio = moved as f64 / expected;
            prop_assert!((0.75..1.25).contains(&ratio), "moved {moved}, expected about {expected:.0}");
        }
    }
}
