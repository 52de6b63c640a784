//! Two actors bounce a ball back and forth; prints round trips per second, ask latency and
//! spawn rate on this machine. Run with `cargo run --release --example ping_pong`.

use std::time::{Duration, Instant};

use troupe::{Actor, ActorError, ActorRef, ActorSystem, Context, Props, ReplyTo};

/// One player. Each `Ball` it receives goes back to the other player until `remaining` is 0.
struct Player {
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

enum PlayerMsg {
    /// Learn who to play with.
    Partner(ActorRef<PlayerMsg>),
    /// A ball with this many hits left.
    Ball { remaining: u64 },
    /// Reply with nothing, at once (for ask latency).
    Echo { reply: ReplyTo<()> },
}

struct Game {
    partner: Option<ActorRef<PlayerMsg>>,
    player: Player,
}

impl Actor for Game {
    type Msg = PlayerMsg;

    async fn handle(&mut self, msg: PlayerMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            PlayerMsg::Partner(partner) => self.partner = Some(partner),
            PlayerMsg::Ball { remaining: 0 } => {
                if let Some(done) = self.player.done.take() {
                    let _ = done.send(());
                }
            }
            PlayerMsg::Ball { remaining } => {
                if let Some(partner) = &self.partner {
                    partner.tell(PlayerMsg::Ball {
                        remaining: remaining - 1,
                    });
                }
            }
            PlayerMsg::Echo { reply } => reply.send(()),
        }
        Ok(())
    }
}

struct Idle;

impl Actor for Idle {
    type Msg = ();

    async fn handle(&mut self, _msg: (), _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }
}

async fn ping_pong(system: &ActorSystem, hits: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let mut done = Some(done_tx);
    let ping = system.spawn(
        "ping",
        Props::new(move || Game {
            partner: None,
            player: Player { done: done.take() },
        }),
    )?;
    let pong = system.spawn(
        "pong",
        Props::new(|| Game {
            partner: None,
            player: Player { done: None },
        }),
    )?;
    ping.tell(PlayerMsg::Partner(pong.clone()));
    pong.tell(PlayerMsg::Partner(ping.clone()));
    let start = Instant::now();
    // Two hits make one round trip.
    ping.tell(PlayerMsg::Ball {
        remaining: hits * 2,
    });
    done_rx.await?;
    let elapsed = start.elapsed();
    ping.stop();
    pong.stop();
    ping.terminated().await;
    pong.terminated().await;
    Ok(hits as f64 / elapsed.as_secs_f64())
}

async fn ask_latency(
    system: &ActorSystem,
    asks: usize,
) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    let echo = system.spawn(
        "echo",
        Props::new(|| Game {
            partner: None,
            player: Player { done: None },
        }),
    )?;
    let mut samples = Vec::with_capacity(asks);
    for _ in 0..asks {
        let start = Instant::now();
        echo.ask(|reply| PlayerMsg::Echo { reply }).await?;
        samples.push(start.elapsed());
    }
    samples.sort();
    echo.stop();
    echo.terminated().await;
    Ok((samples[asks / 2], samples[asks * 99 / 100]))
}

async fn spawn_rate(system: &ActorSystem, count: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut actors = Vec::with_capacity(count);
    for i in 0..count {
        actors.push(system.spawn(&format!("idle-{i}"), Props::new(|| Idle))?);
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    for actor in &actors {
        actor.stop();
    }
    for actor in &actors {
        actor.terminated().await;
    }
    Ok(rate)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let system = ActorSystem::new("ping-pong")?;
        let round_trips = ping_pong(&system, 2_000_000).await?;
        let (p50, p99) = ask_latency(&system, 100_000).await?;
        let spawned = spawn_rate(&system, 100_000).await?;
        system.shutdown().await;
        println!("Troupe ping-pong on one tokio thread");
        println!("  round trips between two actors : {:>12.0} /s", round_trips);
        println!("  ask latency p50 / p99          : {:>8.2} / {:.2} µs", p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6);
        println!("  spawn (100k idle actors)       : {:>12.0} actors/s", spawned);
        println!("Full peer comparison: cargo bench -p troupe-bench --bench peers (see docs/benchmarks.md)");
        Ok(())
    })
}
