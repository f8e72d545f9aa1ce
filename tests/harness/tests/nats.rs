//! The nats-server supervisor runs a real server that tests can stop and restart.

use std::time::Duration;

use async_nats::jetstream;
use futures_util::StreamExt;
use kube2nats_harness::nats::{NatsAuth, NatsOptions, NatsServer};

const PROMPT: Duration = Duration::from_secs(5);

async fn nats() -> NatsServer {
    NatsServer::start().await.expect("nats-server starts")
}

/// Messages published are received by a subscriber.
#[tokio::test]
async fn publish_subscribe_round_trip() {
    let server = nats().await;
    assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut sub = client.subscribe("kube.>").await.expect("subscribe");
    client
        .publish("kube.core.v1.pods.default.web.added", "hello".into())
        .await
        .expect("publish");
    client.flush().await.expect("flush");
    let msg = tokio::time::timeout(PROMPT, sub.next())
        .await
        .expect("message arrives promptly")
        .expect("subscription open");
    assert_eq!(msg.subject.as_str(), "kube.core.v1.pods.default.web.added");
    assert_eq!(msg.payload.as_ref(), b"hello");
}

/// Stopping the server disconnects its clients.
#[tokio::test]
async fn stop_disconnects_clients() {
    let mut server = nats().await;
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event.to_string());
            }
        })
        .connect(server.url())
        .await
        .expect("connect");
    client.flush().await.expect("flush");
    server.stop().await;
    let disconnected = tokio::time::timeout(PROMPT, async {
        while let Some(event) = events.recv().await {
            if event == "disconnected" {
                return true;
            }
        }
        false
    })
    .await
    .expect("disconnect noticed promptly");
    assert!(disconnected);
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", server.port()))
        .await
        .is_err());
}

/// A JetStream stream and its messages survive a restart on the same port.
#[tokio::test]
async fn restart_keeps_jetstream_data() {
    let mut server = nats().await;
    let port = server.port();
    {
        let js = jetstream::new(async_nats::connect(server.url()).await.expect("connect"));
        js.create_stream(jetstream::stream::Config {
            name: "KUBE".into(),
            subjects: vec!["kube.>".into()],
            ..Default::default()
        })
        .await
        .expect("create stream");
        for i in 0..3 {
            js.publish(format!("kube.test.{i}"), "x".into())
                .await
                .expect("publish")
                .await
                .expect("ack");
        }
    }
    server.restart().await.expect("restart");
    assert_eq!(server.port(), port);
    let js = jetstream::new(async_nats::connect(server.url()).await.expect("reconnect"));
    let stream = js.get_stream("KUBE").await.expect("stream survived");
    let info = stream.get_info().await.expect("stream info");
    assert_eq!(info.state.messages, 3);
}

/// Token auth refuses a wrong token and accepts the right one.
#[tokio::test]
async fn token_auth_rejects_a_wrong_token() {
    let server = NatsServer::start_with(NatsOptions {
        jetstream: false,
        auth: NatsAuth::Token("s3cret".into()),
        tls: false,
        max_payload: None,
    })
    .await
    .expect("nats-server starts");
    let wrong = async_nats::ConnectOptions::with_token("wrong".into())
        .connect(server.url())
        .await;
    assert!(wrong.is_err(), "a wrong token is refused");
    let right = async_nats::ConnectOptions::with_token("s3cret".into())
        .connect(server.url())
        .await
        .expect("the right token is accepted");
    right.flush().await.expect("flush");
}

/// User and password auth works through the generated config.
#[tokio::test]
async fn user_password_auth() {
    let server = NatsServer::start_with(NatsOptions {
        jetstream: false,
        auth: NatsAuth::UserPassword("kube2nats".into(), "p\"w d".into()),
        tls: false,
        max_payload: None,
    })
    .await
    .expect("nats-server starts");
    assert!(
        async_nats::ConnectOptions::with_user_and_password("kube2nats".into(), "nope".into())
            .connect(server.url())
            .await
            .is_err()
    );
    async_nats::ConnectOptions::with_user_and_password("kube2nats".into(), "p\"w d".into())
        .connect(server.url())
        .await
        .expect("right password accepted");
}
