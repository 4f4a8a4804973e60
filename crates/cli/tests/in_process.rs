//! The suite in one process calls its services in process, and keeps the gRPC contract: the
//! caller's tenant and request id reach the server's layers; an invalid request gets the same
//! INVALID_ARGUMENT naming the field as over the network; an expired deadline (the caller's or
//! the server's) ends the call with the same status either way; a streamed turn works, with the
//! router's own calls to sessions in process; a stopped service answers UNAVAILABLE at once.
//! The network baseline is a plain tonic channel to the same port, which the services still
//! listen on.

use std::time::{Duration, Instant};

use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_kit::{Secret, client::connect_lazy, in_process};
use switchyard_llm::{ModelRef, ProviderArgs};
use switchyard_proto::{
    router::v1::{
        ChatRequest, ChatStreamRequest, RouteType, chat_stream_response::Event,
        router_service_client::RouterServiceClient,
    },
    sessions::v1::{CreateSessionRequest, GetSessionRequest, session_service_client::SessionServiceClient},
};
use switchyard_testkit::{
    Served, Shutdown, closed_port,
    llm::{Reply, ScriptedLlm},
    wait_serving,
};
use tonic::{Code, Request, transport::Channel};

const ANSWER: &str = "Paris is the capital of France.";

/// Triggers, sessions and the router (answering from `llm`), in process, served each on its own.
async fn suite(
    llm: &ScriptedLlm,
    configure: impl FnOnce(&mut switchyard_router::RouterConfig) + Send + 'static,
) -> Serving<Served> {
    let base_url = llm.openai_base_url();
    let stack = Stack::builder(DevPorts::loopback())
        .without_gateway(closed_port().url())
        .without_edge()
        .router(move |config| {
            config.providers = ProviderArgs {
                openai_base_url: Some(base_url),
                openai_api_key: Some(Secret::new("sk-test")),
                max_retries: 0,
                ..ProviderArgs::default()
            };
            config.default_model = "openai/gpt-4o-mini".parse::<ModelRef>().expect("model");
            config.no_fast_router = true;
            configure(config);
        })
        .start()
        .await
        .expect("the stack starts");
    let serving = stack.serve_each::<_, Shutdown, _>(Served::spawn);
    wait_serving(&serving.sessions.url(), "switchyard.sessions.v1.SessionService").await;
    wait_serving(&serving.router.url(), "switchyard.router.v1.RouterService").await;
    serving
}

fn network(url: &str) -> Channel {
    Channel::from_shared(url.to_owned()).expect("url").connect_lazy()
}

fn as_tenant<T>(message: T, tenant: &'static str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert("x-tenant-id", tenant.parse().expect("ascii"));
    request
}

fn direct(message: &str) -> ChatRequest {
    ChatRequest { message: message.to_owned(), force_route: RouteType::Direct as i32, ..ChatRequest::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_request_id_reach_the_server_and_invalid_requests_fail_alike() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let suite = suite(&llm, |_| {}).await;
    let sessions_url = suite.sessions.url();
    assert!(in_process::is_served_here(suite.sessions.addr), "sessions is served in process");
    let mut sessions = SessionServiceClient::new(connect_lazy(&sessions_url).expect("url"));

    let mut create = as_tenant(CreateSessionRequest::default(), "acme");
    create.metadata_mut().insert("x-request-id", "in-process-1".parse().expect("ascii"));
    let created = sessions.create_session(create).await.expect("created");
    assert_eq!(
        created.metadata().get("x-request-id").and_then(|v| v.to_str().ok()),
        Some("in-process-1"),
        "the server's request id layer saw the caller's id"
    );
    let session = created.into_inner().session.expect("a session");
    assert_eq!(session.tenant_id, "acme", "the tenant header reached the server");
    let get = || GetSessionRequest { session_id: session.session_id.clone(), include_messages: false };
    let other = sessions.get_session(as_tenant(get(), "globex")).await.expect_err("another tenant's session");
    assert_eq!(other.code(), Code::NotFound, "{other:?}");
    sessions.get_session(as_tenant(get(), "acme")).await.expect("its own tenant reads it");

    // The same invalid request, in process and over the network: the same answer.
    let invalid =
        || as_tenant(GetSessionRequest { session_id: "not a session id".into(), include_messages: false }, "acme");
    let local = sessions.get_session(invalid()).await.expect_err("invalid");
    let remote = SessionServiceClient::new(network(&sessions_url)).get_session(invalid()).await.expect_err("invalid");
    assert_eq!(local.code(), Code::InvalidArgument, "{local:?}");
    assert!(local.message().contains("session_id"), "names the field: {local:?}");
    assert_eq!((local.code(), local.message()), (remote.code(), remote.message()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_works_in_process_and_its_session_is_kept() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let suite = suite(&llm, |_| {}).await;
    assert!(in_process::is_served_here(suite.router.addr), "the router is served in process");
    let mut router = RouterServiceClient::new(connect_lazy(&suite.router.url()).expect("url"));
    let request = ChatStreamRequest {
        message: "What is the capital of France?".into(),
        force_route: RouteType::Direct as i32,
        ..ChatStreamRequest::default()
    };
    let mut stream = router.chat_stream(as_tenant(request, "acme")).await.expect("stream").into_inner();
    let (mut text, mut completed) = (String::new(), false);
    while let Some(event) = stream.message().await.expect("an event") {
        match event.event {
            Some(Event::Delta(delta)) => text.push_str(&delta.content),
            Some(Event::Completed(_)) => completed = true,
            _ => {}
        }
    }
    assert_eq!(text, ANSWER);
    assert!(completed, "the stream ends with its completion");

    // The router's own calls to sessions went in process too: the turn is in the session.
    let chat = router.chat(as_tenant(direct("And of Italy?"), "acme")).await.expect("chat").into_inner();
    let mut sessions = SessionServiceClient::new(connect_lazy(&suite.sessions.url()).expect("url"));
    let session = sessions
        .get_session(as_tenant(GetSessionRequest { session_id: chat.session_id, include_messages: true }, "acme"))
        .await
        .expect("the session")
        .into_inner();
    assert_eq!(session.recent_messages.len(), 2, "the question and the answer: {session:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_deadlines_end_calls_as_over_the_network() {
    // The vendor answers after 3 s; the router's own deadline is 1 s.
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER).delay(Duration::from_secs(3))).await;
    let suite = suite(&llm, |config| config.server.request_timeout = Duration::from_secs(1)).await;
    let url = suite.router.url();
    let mut local = RouterServiceClient::new(connect_lazy(&url).expect("url"));
    let mut remote = RouterServiceClient::new(network(&url));

    // The caller's deadline.
    let with_deadline = || {
        let mut request = as_tenant(direct("hello"), "acme");
        request.set_timeout(Duration::from_millis(200));
        request
    };
    let started = Instant::now();
    let in_process = local.chat(with_deadline()).await.expect_err("past the caller's deadline");
    assert!(started.elapsed() < Duration::from_secs(1), "ended at the caller's deadline: {:?}", started.elapsed());
    let over_network = remote.chat(with_deadline()).await.expect_err("past the caller's deadline");
    assert_eq!(
        (in_process.code(), in_process.message()),
        (over_network.code(), over_network.message()),
        "in process {in_process:?}, over the network {over_network:?}"
    );

    // The server's deadline: DEADLINE_EXCEEDED from its admission layer, either way.
    let in_process = local.chat(as_tenant(direct("hello"), "acme")).await.expect_err("past the server's deadline");
    let over_network = remote.chat(as_tenant(direct("hello"), "acme")).await.expect_err("past the server's deadline");
    assert_eq!(in_process.code(), Code::DeadlineExceeded, "{in_process:?}");
    assert_eq!((in_process.code(), in_process.message()), (over_network.code(), over_network.message()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_service_answers_unavailable_in_process() {
    let llm = ScriptedLlm::start(|_| Reply::text(ANSWER)).await;
    let Serving { sessions, router, .. } = suite(&llm, |_| {}).await;
    let sessions_url = sessions.url();
    let sessions_addr = sessions.addr;
    sessions.stop().await;
    assert!(!in_process::is_served_here(sessions_addr), "a stopped service leaves the process's registry");

    let started = Instant::now();
    let mut client = SessionServiceClient::new(connect_lazy(&sessions_url).expect("url"));
    let mut request = as_tenant(CreateSessionRequest::default(), "acme");
    request.set_timeout(Duration::from_secs(10));
    let refused = client.create_session(request).await.expect_err("sessions is down");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    // The router, calling sessions in process, fails the turn rather than hanging.
    let mut router = RouterServiceClient::new(connect_lazy(&router.url()).expect("url"));
    let mut request = as_tenant(direct("hello"), "acme");
    request.set_timeout(Duration::from_secs(20));
    let failed = router.chat(request).await.expect_err("no sessions");
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert!(started.elapsed() < Duration::from_secs(15), "failed fast: {:?}", started.elapsed());
}
