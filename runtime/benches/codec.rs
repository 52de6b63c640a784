//! Wire envelope codecs compared: encode + decode time and encoded size of a typical envelope
//! (recipient path, sender path, manifest, 64-byte body) under bincode 2, postcard,
//! MessagePack (rmp-serde) and JSON.
//!
//! Run: `cargo bench -p troupe --bench codec`. Prints one table; the figures behind the choice
//! of postcard are in `docs/architecture.md` ("Remoting: wire format and transport").

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The same shape as `troupe::remoting::WireEnvelope`, redeclared so every codec sees the same
/// serde impl.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Envelope {
    recipient: String,
    sender: Option<String>,
    manifest: String,
    body: Bytes,
}

fn typical() -> Envelope {
    Envelope {
        recipient: "troupe://app@10.0.3.17:2552/user/orders/worker-17".to_owned(),
        sender: Some(
            "troupe://app@10.0.3.12:2552/system/cluster/singleton/manager-Orders".to_owned(),
        ),
        manifest: "orders.v1.PlaceOrder".to_owned(),
        body: Bytes::from((0u8..64).map(|i| i.wrapping_mul(37)).collect::<Vec<_>>()),
    }
}

struct Codec {
    name: &'static str,
    encode: fn(&Envelope) -> Vec<u8>,
    decode: fn(&[u8]) -> Envelope,
}

fn codecs() -> Vec<Codec> {
    vec![
        Codec {
            name: "postcard 1",
            encode: |e| postcard::to_allocvec(e).expect("encode"),
            decode: |b| postcard::from_bytes(b).expect("decode"),
        },
        Codec {
            name: "bincode 2 (serde, standard)",
            encode: |e| {
                bincode::serde::encode_to_vec(e, bincode::config::standard()).expect("encode")
            },
            decode: |b| {
                bincode::serde::decode_from_slice(b, bincode::config::standard())
                    .expect("decode")
                    .0
            },
        },
        Codec {
            name: "rmp-serde 1 (compact)",
            encode: |e| rmp_serde::to_vec(e).expect("encode"),
            decode: |b| rmp_serde::from_slice(b).expect("decode"),
        },
        Codec {
            name: "serde_json 1",
            encode: |e| serde_json::to_vec(e).expect("encode"),
            decode: |b| serde_json::from_slice(b).expect("decode"),
        },
    ]
}

/// Median of `rounds` timings of `iters` calls, in ns per call.
fn measure(rounds: usize, iters: u32, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed()
        })
        .collect();
    samples.sort();
    samples[rounds / 2].as_nanos() as f64 / f64::from(iters)
}

fn main() {
    let envelope = typical();
    let iters = 200_000;
    let rounds = 11;
    println!(
        "| codec | bytes | encode ns/op | decode ns/op | encode+decode ns/op |\n|---|---:|---:|---:|---:|"
    );
    for codec in codecs() {
        let encoded = (codec.encode)(&envelope);
        assert_eq!(
            (codec.decode)(&encoded),
            envelope,
            "{} round trip",
            codec.name
        );
        let encode = measure(rounds, iters, || {
            black_box((codec.encode)(black_box(&envelope)));
        });
        let decode = measure(rounds, iters, || {
            black_box((codec.decode)(black_box(&encoded)));
        });
        let both = measure(rounds, iters, || {
            let bytes = (codec.encode)(black_box(&envelope));
            black_box((codec.decode)(&bytes));
        });
        println!(
            "| {} | {} | {encode:.0} | {decode:.0} | {both:.0} |",
            codec.name,
            encoded.len()
        );
    }
}
