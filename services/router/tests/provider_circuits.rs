//! Two router replicas with `REDIS_URL` share their providers' circuits: the turns of one open
//! OpenAI's circuit, and the other replica's next turn goes straight to the fallback model
//! without a request to the sick vendor, though it never saw OpenAI fail itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Options, Suite, chat};
use switchyard_kit::Secret;
use switchyard_router::RouterConfig;
use switchyard_testkit::{
    KeyPrefix, eventually,
    llm::{Reply, ScriptedLlm, Wire},
    redis_url,
};

const SYNC_INTERVAL: Duration = Duration::from_millis(100);
const FALLBACK: &str = "anthropic/claude-3-5-haiku-latest";

fn openai_requests(llm: &ScriptedLlm) -> usize {
    llm.requests().iter().filter(|request| request.wire == Wire::OpenAi).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_circuit_one_replica_opens_is_open_on_the_other_too() {
    let llm = ScriptedLlm::start(|request| match request.wire {
        Wire::OpenAi => Reply::error(503, "The engine is currently overloaded"),
        Wire::Anthropic => Reply::text("the fallback model answered"),
    })
    .await;
    // The router's Redis is the test Redis, under a prefix of this test's (deleted after it).
    let prefix = KeyPrefix::new("router-circuits");
    let redis_prefix = prefix.as_str().to_owned();
    let configure = Box::new(move |config: &mut RouterConfig| {
        config.stores.redis_url = Some(Secret::new(redis_url()));
        config.stores.redis_prefix = redis_prefix;
        config.stores.in_memory = false;
        config.circuit_failures = 2;
        config.circuit_cooldown = Duration::from_secs(60);
        config.circuit_sync_interval = SYNC_INTERVAL;
    });
    let options = Options { fallback_models: vec![FALLBACK], configure, ..Options::default() };
    let suite = Suite::with(llm, options).await;
    let second = suite.second_replica().await;

    // Two turns on the first replica: each routing call fails on OpenAI (tried twice) and the
    // fallback answers; the second failure in a row opens the circuit.
    let mut first = suite.client().await;
    for _ in 0..2 {
        let response = first.chat(chat("Hello")).await.expect("chat").into_inner();
        assert_eq!(response.model, FALLBACK);
    }
    assert_eq!(openai_requests(&suite.llm), 4);
    let response = first.chat(chat("Hello")).await.expect("chat").into_inner();
    assert_eq!(response.model, FALLBACK);
    assert_eq!(openai_requests(&suite.llm), 4, "the first replica's circuit is open");

    // The opening is in Redis, under the router's prefix.
    let key = format!("{prefix}:{{circuit:openai}}");
    let client = redis::Client::open(redis_url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.expect("redis (set REDIS_URL)");
    let record: String = eventually(Duration::from_secs(5), "the open circuit written to Redis", || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move {
            let record: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut conn).await.unwrap();
            record.filter(|record| record.contains(" open "))
        }
    })
    .await;
    assert_eq!(record.split(' ').count(), 3, "`<at> open <until>`: {record}");

    // The second replica reads it within its sync interval; waited out generously, as the
    // replica offers nothing to ask. Its turn then skips OpenAI without a request.
    tokio::time::sleep(SYNC_INTERVAL * 5).await;
    let channel = tonic::transport::Channel::from_shared(second.url()).unwrap().connect().await.unwrap();
    let mut other = switchyard_proto::router::v1::router_service_client::RouterServiceClient::new(channel);
    for _ in 0..2 {
        let response = other.chat(chat("Hello")).await.expect("chat").into_inner();
        assert_eq!(response.message.expect("message").content, "the fallback model answered");
        assert_eq!(response.model, FALLBACK);
    }
    assert_eq!(openai_requests(&suite.llm), 4, "the second replica sent nothing to the sick vendor");
}
