//! Typed tell and ask: ordering, typed replies, timeouts and the other ways an ask ends.

#[path = "support/helpers.rs"]
mod helpers;

use std::future::IntoFuture;
use std::time::Duration;

use helpers::{Blocker, gate, next_event, within};
use tokio::time::Instant;
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, AskError, Context, DEFAULT_ASK_TIMEOUT, DeadLetter,
    DeadLetterReason, Props, ReplyTo,
};

#[derive(Default)]
struct Counter {
    seen: Vec<u32>,
    held: Vec<ReplyTo<u32>>,
}

enum CounterMsg {
    Add(u32),
    Seen(ReplyTo<Vec<u32>>),
    Double {
        n: u32,
        reply: ReplyTo<u64>,
    },
    /// Keep the reply channel and never answer.
    Ignore(ReplyTo<u32>),
    /// Drop the reply channel without answering.
    Drop(ReplyTo<u32>),
    Block(Blocker),
}

impl Actor for Counter {
    type Msg = CounterMsg;

    async fn handle(
        &mut self,
        msg: CounterMsg,
        _ctx: &mut Context<Self>,
    ) -> Result<(), ActorError> {
        match msg {
            CounterMsg::Add(n) => self.seen.push(n),
            CounterMsg::Seen(reply) => reply.send(self.seen.clone()),
            CounterMsg::Double { n, reply } => reply.send(u64::from(n) * 2),
            CounterMsg::Ignore(reply) => self.held.push(reply),
            CounterMsg::Drop(reply) => drop(reply),
            CounterMsg::Block(blocker) => blocker.block().await,
        }
        Ok(())
    }
}

fn counter(system: &ActorSystem) -> ActorRef<CounterMsg> {
    system
        .spawn("counter", Props::new(Counter::default))
        .unwrap()
}

/// Asks another actor from inside its own handler.
struct Proxy {
    target: ActorRef<CounterMsg>,
}

enum ProxyMsg {
    Relay { n: u32, reply: ReplyTo<u64> },
}

impl Actor for Proxy {
    type Msg = ProxyMsg;

    async fn handle(&mut self, msg: ProxyMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let ProxyMsg::Relay { n, reply } = msg;
        let doubled = self
            .target
            .ask(|reply| CounterMsg::Double { n, reply })
            .await?;
        reply.send(doubled + 1);
        Ok(())
    }
}

#[tokio::test]
async fn tell_delivers_messages_from_one_sender_in_send_order() {
    let system = ActorSystem::new("ask").unwrap();
    let counter = counter(&system);
    for n in 0..200 {
        counter.tell(CounterMsg::Add(n));
    }

    let seen = counter.ask(CounterMsg::Seen).await.unwrap();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
    system.shutdown().await;
}

#[tokio::test]
async fn ask_returns_a_reply_of_the_requested_type() {
    let system = ActorSystem::new("ask").unwrap();
    let counter = counter(&system);

    let doubled: u64 = counter
        .ask(|reply| CounterMsg::Double { n: 21, reply })
        .await
        .unwrap();
    assert_eq!(doubled, 42);
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn ask_times_out_with_a_typed_timeout_error_naming_recipient_and_timeout() {
    let system = ActorSystem::new("ask").unwrap();
    let counter = counter(&system);
    let started = Instant::now();

    let err = counter
        .ask(CounterMsg::Ignore)
        .timeout(Duration::from_millis(250))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        AskError::Timeout {
            recipient: counter.path().clone(),
            after: Duration::from_millis(250),
        }
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    let message = err.to_string();
    assert!(
        message.contains("timed out") && message.contains("troupe://ask/user/counter"),
        "{message}"
    );
    // The actor is unaffected by an asker giving up.
    let doubled = counter
        .ask(|reply| CounterMsg::Double { n: 2, reply })
        .await
        .unwrap();
    assert_eq!(doubled, 4);
    system.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn ask_without_an_explicit_timeout_gives_up_after_the_default_timeout() {
    let system = ActorSystem::new("ask").unwrap();
    let counter = counter(&system);
    let started = Instant::now();

    let err = counter.ask(CounterMsg::Ignore).await.unwrap_err();
    assert_eq!(
        err,
        AskError::Timeout {
            recipient: counter.path().clone(),
            after: DEFAULT_ASK_TIMEOUT,
        }
    );
    assert_eq!(DEFAULT_ASK_TIMEOUT, Duration::from_secs(5));
    assert!(started.elapsed() >= DEFAULT_ASK_TIMEOUT);
    system.shutdown().await;
}

#[tokio::test]
async fn ask_fails_with_no_reply_when_the_actor_drops_the_reply_channel() {
    let system = ActorSystem::new("ask").unwrap();
    let counter = counter(&system);

    let err = counter.ask(CounterMsg::Drop).await.unwrap_err();
    assert_eq!(
        err,
        AskError::NoReply {
            recipient: counter.path().clone()
        }
    );
    system.shutdown().await;
}

#[tokio::test]
async fn ask_to_a_stopped_actor_fails_at_once_as_undeliverable_and_is_dead_lettered() {
    let system = ActorSystem::new("ask").unwrap();
    let mut dead_letters = system.event_stream().subscribe::<DeadLetter>();
    let counter = counter(&system);
    counter.stop();
    within("the counter to terminate", counter.terminated()).await;

    let err = counter
        .ask(|reply| CounterMsg::Double { n: 1, reply })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        AskError::Undeliverable {
            recipient: counter.path().clone(),
            reason: DeadLetterReason::RecipientStopped,
        }
    );
    let dead = next_event(&mut dead_letters).await;
    assert_eq!(dead.recipient, *counter.path());
    assert_eq!(dead.reason, DeadLetterReason::RecipientStopped);
    assert_eq!(dead.message_type, std::any::type_name::<CounterMsg>());
    system.shutdown().await;
}

#[tokio::test]
async fn an_ask_queued_when_the_actor_is_stopped_ends_with_no_reply_instead_of_hanging() {
    let system = ActorSystem::new("ask").unwrap();
    let counter = counter(&system);
    let (mut gate, blocker) = gate();
    counter.tell(CounterMsg::Block(blocker));
    gate.entered().await;

    // Enqueues the question now, behind the blocking message.
    let pending = counter
        .ask(|reply| CounterMsg::Double { n: 1, reply })
        .into_future();
    counter.stop();
    gate.open();

    let err = within("the queued ask to end", pending).await.unwrap_err();
    assert_eq!(
        err,
        AskError::NoReply {
            recipient: counter.path().clone()
        }
    );
    system.shutdown().await;
}

#[tokio::test]
async fn actors_can_ask_other_actors_from_inside_a_handler() {
    let system = ActorSystem::new("ask").unwrap();
    let target = counter(&system);
    let proxy = system
        .spawn(
            "proxy",
            Props::new(move || Proxy {
                target: target.clone(),
            }),
        )
        .unwrap();

    let answer = proxy
        .ask(|reply| ProxyMsg::Relay { n: 20, reply })
        .await
        .unwrap();
    assert_eq!(answer, 41);
    system.shutdown().await;
}
