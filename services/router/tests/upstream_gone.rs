//! A sessions replica that goes away under a call: the router's caller is told UNAVAILABLE
//! (retry: another replica answers) naming sessions, not the UNKNOWN or INTERNAL tonic's client
//! makes of the broken connection. The replica here is a loopback listener that takes the
//! router's connection and the call's first bytes, then vanishes as a killed process does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use common::{Options, Suite, chat, stream_request};
use switchyard_proto::sessions::v1::{CreateSessionRequest, session_service_client::SessionServiceClient};
use switchyard_testkit::llm::{Reply, ScriptedLlm};
use tokio::io::AsyncReadExt;
use tonic::Code;

/// A "sessions replica" that accepts each connection, reads what the client sends first (the
/// HTTP/2 preface, its settings and the call's headers), and closes it mid-call. Returns its URL
/// and the number of connections it cut.
async fn vanishing_replica() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let cut = Arc::new(AtomicUsize::new(0));
    let counter = cut.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                // Past the 24-byte preface: the client's frames (its call among them) arrived.
                let mut received = Vec::new();
                let mut buffer = [0u8; 4096];
                while received.len() <= 24 {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => received.extend_from_slice(&buffer[..read]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            });
        }
    });
    (url, cut)
}

#[tokio::test]
async fn a_sessions_replica_gone_mid_call_is_unavailable_to_the_routers_caller() {
    let llm = ScriptedLlm::start(|_| Reply::text("never asked")).await;
    let (sessions_url, cut) = vanishing_replica().await;

    // What tonic's client itself makes of it: not UNAVAILABLE, so without the mapping the
    // router would pass on a code that says "do not retry".
    let channel = switchyard_kit::client::connect_lazy(&sessions_url).unwrap();
    let raw = SessionServiceClient::new(channel)
        .create_session(CreateSessionRequest::default())
        .await
        .expect_err("the replica vanishes");
    assert!(matches!(raw.code(), Code::Unknown | Code::Internal | Code::Cancelled), "{raw:?}");
    assert!(switchyard_kit::status::broken_connection(&raw), "{raw:?}");
    let options =
        Options { configure: Box::new(move |config| config.sessions_url = sessions_url), ..Options::default() };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;

    let status = client.chat(chat("hello")).await.expect_err("sessions is gone");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("sessions"), "the message names the upstream: {status:?}");
    assert!(cut.load(Ordering::SeqCst) >= 1, "the call reached the replica before it vanished");

    // A streamed turn opens its session before the stream: the same status, before any event.
    let status = match client.chat_stream(stream_request("hello")).await {
        Err(status) => status,
        Ok(stream) => stream.into_inner().message().await.expect_err("no event from a turn without a session"),
    };
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("sessions"), "{status:?}");
    assert!(suite.llm.requests().is_empty(), "no model was asked without a session");
}
