//! A turn still streaming when the router's shutdown grace runs out: the caller gets
//! UNAVAILABLE saying the server is shutting down (not a bare EOF), the decision is in the
//! analytics (real Postgres) marked interrupted, and the session has the user's message and the
//! answer as far as it went. And a turn whose client left before its recording ended is
//! recorded before the router exits.

mod common;

use std::time::Duration;

use common::{AnsweredWhileCut, Options, Suite, answer_while_sessions_cut, stream_request};
use switchyard_proto::{
    router::v1::chat_stream_response::Event,
    sessions::v1::{GetSessionRequest, session_service_client::SessionServiceClient},
};
use switchyard_testkit::{
    database_url,
    llm::{Reply, ScriptedLlm},
};
use tonic::Code;

/// An answer that takes far longer than the grace: a word every 200 ms.
fn slow_answer() -> Reply {
    Reply::text("Refinancing replaces your mortgage with a new loan at today's rate. ".repeat(20))
        .chunk_size(8)
        .chunk_delay(Duration::from_millis(200))
}

#[tokio::test]
async fn a_stream_cut_by_shutdown_ends_unavailable_and_its_turn_is_recorded_as_interrupted() {
    let llm = ScriptedLlm::start(|_| slow_answer()).await;
    let options = Options {
        configure: Box::new(|config| config.server.shutdown_grace = Duration::from_secs(2)),
        ..Options::default()
    };
    let suite = Suite::with(llm, options).await;
    let mut client = suite.client().await;
    let mut stream =
        client.chat_stream(stream_request("how does refinancing work?")).await.expect("opens").into_inner();

    // The route is decided and the answer has begun when the router is told to stop.
    let mut response_id = String::new();
    let mut session_id = String::new();
    let mut answered = String::new();
    while answered.len() < 16 {
        match stream.message().await.expect("stream item").expect("the stream goes on").event {
            Some(Event::Route(route)) => (response_id, session_id) = (route.id, route.session_id),
            Some(Event::Delta(delta)) => answered.push_str(&delta.content),
            other => panic!("unexpected event before the stop: {other:?}"),
        }
    }
    assert!(response_id.starts_with("chat-"), "the route came first");
    let Suite { router, sessions, schema, .. } = suite;
    let stopping = tokio::spawn(router.stop());

    let status = loop {
        match stream.message().await {
            Ok(Some(item)) => match item.event {
                Some(Event::Delta(delta)) => answered.push_str(&delta.content),
                other => panic!("only more of the answer may come before the end: {other:?}"),
            },
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("shutting down"), "{status:?}");
    stopping.await.expect("stop task");

    // The decision, written by the drain at exit.
    let pool = switchyard_kit::postgres::connect_in_schema(&database_url(), schema.name(), 1)
        .await
        .unwrap_or_else(|err| panic!("postgres at {} (set DATABASE_URL): {err}", database_url()));
    let row: Option<(bool, String, String)> =
        sqlx::query_as("SELECT interrupted, route, session_id FROM routing_decisions WHERE id = $1")
            .bind(&response_id)
            .fetch_optional(&pool)
            .await
            .expect("query");
    assert_eq!(row, Some((true, "direct".to_owned(), session_id.clone())), "the decision is recorded interrupted");

    // The session counted one turn and has its two messages: the question and the partial answer.
    let channel =
        tonic::transport::Channel::from_shared(sessions.url()).expect("url").connect().await.expect("sessions");
    let got = SessionServiceClient::new(channel)
        .get_session(GetSessionRequest { session_id, include_messages: true })
        .await
        .expect("the session")
        .into_inner();
    assert_eq!(got.session.expect("session").turn_count, 1);
    let messages: Vec<&str> = got.recent_messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(messages, ["how does refinancing work?", answered.as_str()]);
}

/// A client that leaves once it has the answer leaves the turn's recording running on its own;
/// a shutdown right then waits for it (sessions out of reach meanwhile), so the process never
/// exits with an answered turn missing from its conversation.
#[tokio::test]
async fn shutdown_waits_for_the_recording_of_a_turn_whose_client_left() {
    let answer = "Compare the APRs first, then the fees.";
    // Sessions goes out of reach before the turn is recorded: the recording retries.
    let AnsweredWhileCut { suite, proxy, router, session_id, stream } =
        answer_while_sessions_cut("Should I refinance?", answer).await;
    // The vendor's last event comes a chunk later; the client is gone by the time the turn
    // records, and the router is told to stop.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    let stopping = tokio::spawn(router.stop());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!stopping.is_finished(), "the router waits for the turn's recording before it exits");
    proxy.restore();
    stopping.await.expect("stop task");

    // Recorded by the time the router exited: read once, no waiting.
    let got = SessionServiceClient::new(suite.sessions_channel().await)
        .get_session(GetSessionRequest { session_id, include_messages: true })
        .await
        .expect("the session")
        .into_inner();
    let messages: Vec<&str> = got.recent_messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(messages, ["Should I refinance?", answer]);
}
