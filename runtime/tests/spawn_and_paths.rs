//! Spawning under `/user`, `/system` and a parent; name validation; resolving refs from paths.

#[path = "support/helpers.rs"]
mod helpers;

use helpers::{Blocker, gate, within};
use tokio::sync::mpsc;
use troupe::{
    Actor, ActorError, ActorRef, ActorSystem, Context, InvalidName, Props, ReplyTo, ResolveError,
    SpawnError, SystemError,
};

struct Echo;

enum EchoMsg {
    Echo {
        text: String,
        reply: ReplyTo<String>,
    },
    Note {
        text: String,
        to: mpsc::UnboundedSender<String>,
    },
    Block(Blocker),
}

impl Actor for Echo {
    type Msg = EchoMsg;

    async fn handle(&mut self, msg: EchoMsg, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            EchoMsg::Echo { text, reply } => reply.send(text),
            EchoMsg::Note { text, to } => {
                let _ = to.send(text);
            }
            EchoMsg::Block(blocker) => blocker.block().await,
        }
        Ok(())
    }
}

fn echo() -> Props<Echo> {
    Props::new(|| Echo)
}

async fn echo_text(actor: &ActorRef<EchoMsg>, text: &str) -> String {
    actor
        .ask(|reply| EchoMsg::Echo {
            text: text.to_owned(),
            reply,
        })
        .await
        .expect("echo answers")
}

/// Spawns children on request.
struct Parent;

enum ParentMsg {
    Spawn {
        name: String,
        reply: ReplyTo<Result<ActorRef<EchoMsg>, SpawnError>>,
    },
}

impl Actor for Parent {
    type Msg = ParentMsg;

    async fn handle(&mut self, msg: ParentMsg, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let ParentMsg::Spawn { name, reply } = msg;
        reply.send(ctx.spawn(&name, echo()));
        Ok(())
    }
}

async fn spawn_child(
    parent: &ActorRef<ParentMsg>,
    name: &str,
) -> Result<ActorRef<EchoMsg>, SpawnError> {
    parent
        .ask(|reply| ParentMsg::Spawn {
            name: name.to_owned(),
            reply,
        })
        .await
        .expect("parent answers")
}

#[tokio::test]
async fn spawn_places_actors_under_the_user_and_system_guardians() {
    let system = ActorSystem::new("paths").unwrap();
    let user = system.spawn("echo", echo()).unwrap();
    let internal = system.spawn_system("echo", echo()).unwrap();

    assert_eq!(user.path().to_string(), "troupe://paths/user/echo");
    assert_eq!(user.path().elements(), "/user/echo");
    assert_eq!(user.path().name(), "echo");
    assert_eq!(user.path().system(), "paths");
    assert_eq!(internal.path().to_string(), "troupe://paths/system/echo");
    assert_ne!(user.id(), internal.id());
    assert_eq!(echo_text(&user, "from user").await, "from user");
    assert_eq!(echo_text(&internal, "from system").await, "from system");
    system.shutdown().await;
}

#[tokio::test]
async fn ctx_spawn_places_the_child_under_its_parent() {
    let system = ActorSystem::new("paths").unwrap();
    let parent = system.spawn("parent", Props::new(|| Parent)).unwrap();
    let child = spawn_child(&parent, "kid").await.unwrap();

    assert_eq!(child.path().to_string(), "troupe://paths/user/parent/kid");
    assert_eq!(echo_text(&child, "hi").await, "hi");
    system.shutdown().await;
}

#[tokio::test]
async fn an_empty_name_is_rejected_as_empty() {
    let system = ActorSystem::new("paths").unwrap();
    let err = system.spawn("", echo()).unwrap_err();

    assert_eq!(err, SpawnError::InvalidName(InvalidName::Empty));
    assert!(err.to_string().contains("must not be empty"), "{err}");
    let err = system.spawn_system("", echo()).unwrap_err();
    assert_eq!(err, SpawnError::InvalidName(InvalidName::Empty));
    system.shutdown().await;
}

#[tokio::test]
async fn a_name_containing_a_slash_is_rejected_naming_the_character() {
    let system = ActorSystem::new("paths").unwrap();
    let err = system.spawn("a/b", echo()).unwrap_err();

    assert_eq!(
        err,
        SpawnError::InvalidName(InvalidName::ReservedCharacter {
            name: "a/b".into(),
            found: '/',
        })
    );
    let message = err.to_string();
    assert!(
        message.contains("\"a/b\"") && message.contains("'/'"),
        "{message}"
    );
    // The same rule applies to children spawned from a context.
    let parent = system.spawn("parent", Props::new(|| Parent)).unwrap();
    let err = spawn_child(&parent, "x/y").await.unwrap_err();
    assert!(matches!(
        err,
        SpawnError::InvalidName(InvalidName::ReservedCharacter { found: '/', .. })
    ));
    system.shutdown().await;
}

#[tokio::test]
async fn a_name_taken_by_a_live_sibling_is_rejected_naming_parent_and_name() {
    let system = ActorSystem::new("paths").unwrap();
    let first = system.spawn("worker", echo()).unwrap();
    let err = system.spawn("worker", echo()).unwrap_err();

    let SpawnError::NameTaken { parent, name } = &err else {
        panic!("expected NameTaken, got {err:?}");
    };
    assert_eq!(parent.to_string(), "troupe://paths/user");
    assert_eq!(name, "worker");
    let message = err.to_string();
    assert!(
        message.contains("troupe://paths/user") && message.contains("\"worker\""),
        "{message}"
    );
    // The first actor is untouched.
    assert_eq!(echo_text(&first, "still here").await, "still here");
    system.shutdown().await;
}

#[tokio::test]
async fn a_child_name_taken_under_one_parent_is_free_under_another() {
    let system = ActorSystem::new("paths").unwrap();
    let a = system.spawn("a", Props::new(|| Parent)).unwrap();
    let b = system.spawn("b", Props::new(|| Parent)).unwrap();
    spawn_child(&a, "kid").await.unwrap();

    let err = spawn_child(&a, "kid").await.unwrap_err();
    assert!(
        matches!(&err, SpawnError::NameTaken { parent, name } if parent.to_string() == "troupe://paths/user/a" && name == "kid"),
        "{err:?}"
    );
    let other = spawn_child(&b, "kid").await.unwrap();
    assert_eq!(other.path().to_string(), "troupe://paths/user/b/kid");
    system.shutdown().await;
}

#[tokio::test]
async fn a_name_is_free_again_once_the_sibling_has_terminated() {
    let system = ActorSystem::new("paths").unwrap();
    let first = system.spawn("worker", echo()).unwrap();
    first.stop();
    within("the first worker to terminate", first.terminated()).await;

    let second = system.spawn("worker", echo()).unwrap();
    assert_eq!(second.path(), first.path());
    assert_ne!(second.id(), first.id());
    assert_eq!(echo_text(&second, "new").await, "new");
    system.shutdown().await;
}

#[tokio::test]
async fn a_name_stays_taken_until_the_stopping_sibling_has_terminated() {
    let system = ActorSystem::new("paths").unwrap();
    let first = system.spawn("worker", echo()).unwrap();
    let (mut gate, blocker) = gate();
    first.tell(EchoMsg::Block(blocker));
    gate.entered().await;
    first.stop();

    // Still inside its handler: stopping, not terminated.
    assert!(matches!(
        system.spawn("worker", echo()),
        Err(SpawnError::NameTaken { .. })
    ));
    gate.open();
    within("the first worker to terminate", first.terminated()).await;
    system.spawn("worker", echo()).unwrap();
    system.shutdown().await;
}

#[tokio::test]
async fn resolve_finds_live_actors_by_short_and_full_path() {
    let system = ActorSystem::new("paths").unwrap();
    let echo_ref = system.spawn("echo", echo()).unwrap();
    let internal = system.spawn_system("helper", echo()).unwrap();
    let parent = system.spawn("parent", Props::new(|| Parent)).unwrap();
    let kid = spawn_child(&parent, "kid").await.unwrap();

    assert_eq!(system.resolve::<EchoMsg>("/user/echo").unwrap(), echo_ref);
    assert_eq!(
        system
            .resolve::<EchoMsg>("troupe://paths/user/echo")
            .unwrap(),
        echo_ref
    );
    assert_eq!(
        system.resolve::<EchoMsg>("/system/helper").unwrap(),
        internal
    );
    assert_eq!(system.resolve::<EchoMsg>("/user/parent/kid").unwrap(), kid);
    assert_eq!(system.resolve::<ParentMsg>("/user/parent").unwrap(), parent);
    let any = system.resolve_any("/user/parent/kid").unwrap();
    assert_eq!(any.id(), kid.id());
    assert_eq!(any.message_type(), std::any::type_name::<EchoMsg>());
    assert_eq!(any.downcast::<EchoMsg>(), Some(kid.clone()));
    // A resolved ref is a working ref.
    let resolved = system.resolve::<EchoMsg>("/user/parent/kid").unwrap();
    assert_eq!(echo_text(&resolved, "resolved").await, "resolved");
    system.shutdown().await;
}

#[tokio::test]
async fn resolve_with_the_wrong_message_type_names_both_types() {
    let system = ActorSystem::new("paths").unwrap();
    system.spawn("echo", echo()).unwrap();
    let err = system.resolve::<u32>("/user/echo").unwrap_err();

    assert_eq!(
        err,
        ResolveError::WrongMessageType {
            path: "troupe://paths/user/echo".into(),
            expected: "u32",
            actual: std::any::type_name::<EchoMsg>(),
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("u32") && message.contains("EchoMsg"),
        "{message}"
    );
    system.shutdown().await;
}

#[tokio::test]
async fn resolve_reports_not_found_for_missing_and_terminated_actors() {
    let system = ActorSystem::new("paths").unwrap();
    let echo_ref = system.spawn("echo", echo()).unwrap();

    for path in [
        "/user/nobody",
        "/user/echo/deeper",
        "/elsewhere/echo",
        "troupe://paths/user/nobody",
    ] {
        assert_eq!(
            system.resolve_any(path).unwrap_err(),
            ResolveError::NotFound { path: path.into() },
            "{path}"
        );
    }
    echo_ref.stop();
    within("echo to terminate", echo_ref.terminated()).await;
    let err = system.resolve::<EchoMsg>("/user/echo").unwrap_err();
    assert_eq!(
        err,
        ResolveError::NotFound {
            path: "/user/echo".into()
        }
    );
    assert!(err.to_string().contains("no live actor"), "{err}");
    system.shutdown().await;
}

#[tokio::test]
async fn resolve_rejects_malformed_paths_and_paths_of_other_systems() {
    let system = ActorSystem::new("paths").unwrap();
    system.spawn("echo", echo()).unwrap();

    for path in ["user/echo", "/user//echo", ""] {
        assert_eq!(
            system.resolve_any(path).unwrap_err(),
            ResolveError::Malformed { path: path.into() },
            "{path:?}"
        );
    }
    let err = system.resolve_any("troupe://other/user/echo").unwrap_err();
    assert_eq!(
        err,
        ResolveError::OtherSystem {
            path: "troupe://other/user/echo".into(),
            system: "other".into(),
            this: "paths".into(),
        }
    );
    system.shutdown().await;
}

#[tokio::test]
async fn tell_path_delivers_to_the_live_actor_at_that_path() {
    let system = ActorSystem::new("paths").unwrap();
    system.spawn("echo", echo()).unwrap();
    let (to, mut notes) = mpsc::unbounded_channel();

    system.tell_path(
        "/user/echo",
        EchoMsg::Note {
            text: "by path".into(),
            to,
        },
    );
    assert_eq!(
        within("the note", notes.recv()).await.as_deref(),
        Some("by path")
    );
    system.shutdown().await;
}

#[tokio::test]
async fn spawning_after_shutdown_fails_with_parent_stopped() {
    let system = ActorSystem::new("paths").unwrap();
    system.shutdown().await;

    let err = system.spawn("late", echo()).unwrap_err();
    assert!(
        matches!(&err, SpawnError::ParentStopped { parent, name } if parent.to_string() == "troupe://paths/user" && name == "late"),
        "{err:?}"
    );
    assert!(matches!(
        system.spawn_system("late", echo()),
        Err(SpawnError::ParentStopped { .. })
    ));
    // Name validation still comes first.
    assert_eq!(
        system.spawn("", echo()).unwrap_err(),
        SpawnError::InvalidName(InvalidName::Empty)
    );
}

#[tokio::test]
async fn system_names_are_validated() {
    for name in ["", "has space", "slash/name", &"x".repeat(65)] {
        assert_eq!(
            ActorSystem::new(name).unwrap_err(),
            SystemError::InvalidName { name: name.into() },
            "{name:?}"
        );
    }
    let system = ActorSystem::new("ok-name_1").unwrap();
    assert_eq!(system.name(), "ok-name_1");
    system.shutdown().await;
}

#[test]
fn creating_a_system_outside_a_tokio_runtime_is_a_clear_error() {
    let err = ActorSystem::new("nort").unwrap_err();
    assert_eq!(err, SystemError::NoRuntime);
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}
