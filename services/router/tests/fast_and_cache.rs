//! The fast router and the routing cache, end to end over gRPC with the real MiniLM model, the
//! real sessions service, Postgres and Redis: a late or failing routing call falls back to the
//! fast router (`fallback_used`); a cached decision skips the routing call (`cache_hit`), never
//! across tenants; and a user's route correction teaches every replica that user's preference.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Options, Suite, as_tenant, chat};
use switchyard_proto::router::v1::{ChatRequest, ChatResponse, RouteMetadata, RouteType, SubmitFeedbackRequest};
use switchyard_router::route::{USE_MCP_AGENT, USE_MULTIAGENT};
use switchyard_testkit::{
    eventually,
    llm::{Recorded, Reply, ScriptedLlm},
};
use tonic::Request;

/// A routing call: the request that offers the routing tools.
fn is_routing(request: &Recorded) -> bool {
    request.tool_names().iter().any(|name| name == USE_MCP_AGENT)
}

fn metadata(response: &ChatResponse) -> &RouteMetadata {
    response.metadata.as_ref().expect("metadata")
}

fn route(response: &ChatResponse) -> RouteType {
    RouteType::try_from(metadata(response).route_type).expect("route")
}

fn as_user<T>(tenant: &str, user: &str, message: T) -> Request<T> {
    let mut request = as_tenant(tenant, message);
    request.metadata_mut().insert("x-user-id", user.parse().expect("ascii"));
    request
}

fn routing_calls(llm: &ScriptedLlm) -> usize {
    llm.requests().iter().filter(|r| is_routing(r)).count()
}

#[tokio::test]
async fn a_late_routing_call_is_overtaken_by_the_fast_router_and_kept_as_the_direct_answer() {
    // The routing call answers directly, but only after 1.5 s.
    let llm = ScriptedLlm::start(|request| {
        if is_routing(request) {
            Reply::text("Hello! I'm doing well, thank you.").delay(Duration::from_millis(1500))
        } else {
            Reply::text("a second call that should not be made")
        }
    })
    .await;
    let suite = Suite::with(
        llm,
        Options {
            fast_router: true,
            configure: Box::new(|config| config.routing_timeout_ms = 200),
            ..Options::default()
        },
    )
    .await;
    let mut client = suite.client().await;
    let response = client.chat(chat("Hello, how are you today?")).await.expect("chat").into_inner();
    let meta = metadata(&response);
    assert_eq!(route(&response), RouteType::Direct);
    assert!(meta.fallback_used, "{meta:?}");
    assert!(!meta.cache_hit);
    assert!(meta.routing_time_ms < 1000, "decided at the timeout, not when the model was back: {meta:?}");
    assert!(meta.degraded.iter().any(|d| d.contains("no decision within 200 ms")), "{:?}", meta.degraded);
    assert!(meta.reasoning.starts_with("fast router: direct"), "{}", meta.reasoning);
    // The routing call already under way is the answer: no second call.
    assert_eq!(response.message.expect("message").content, "Hello! I'm doing well, thank you.");
    assert_eq!(suite.llm.requests().len(), 1);
}

#[tokio::test]
async fn a_failing_routing_call_falls_back_to_the_fast_router_for_a_handler() {
    // Routing calls fail (a 400 is not retried); expert and synthesis calls answer.
    let llm = ScriptedLlm::start(|request| {
        if is_routing(request) {
            Reply::error(400, "tools are not supported by this deployment")
        } else {
            Reply::text("an expert's view")
        }
    })
    .await;
    let suite = Suite::with(llm, Options { fast_router: true, ..Options::default() }).await;
    let mut client = suite.client().await;
    let message = "Analyze the technical architecture and business implications of migrating to microservices";
    let response = client.chat(chat(message)).await.expect("chat").into_inner();
    let meta = metadata(&response);
    assert_eq!(route(&response), RouteType::Multiagent, "{meta:?}");
    assert!(meta.fallback_used);
    assert!(meta.degraded.iter().any(|d| d.contains("routing call failed")), "{:?}", meta.degraded);
    assert!(!meta.expert_role_ids.is_empty(), "experts answered: {meta:?}");
    assert_eq!(response.message.expect("message").content, "an expert's view");
}

#[tokio::test]
async fn without_a_fast_router_a_late_routing_call_is_waited_for() {
    let llm = ScriptedLlm::start(|_| Reply::text("worth the wait").delay(Duration::from_millis(600))).await;
    let suite = Suite::with(
        llm,
        Options { configure: Box::new(|config| config.routing_timeout_ms = 100), ..Options::default() },
    )
    .await;
    let response = suite.client().await.chat(chat("Hello there")).await.expect("chat").into_inner();
    assert!(!metadata(&response).fallback_used);
    assert_eq!(response.message.expect("message").content, "worth the wait");
}

#[tokio::test]
async fn cached_decisions_skip_the_routing_call_within_a_tenant_only() {
    let llm = ScriptedLlm::start(|request| {
        if is_routing(request) {
            Reply::tool_call(USE_MULTIAGENT, r#"{"domains":["technical","business"],"reasoning":"two views"}"#)
        } else {
            Reply::text("a view")
        }
    })
    .await;
    let suite = Suite::with(llm, Options { fast_router: true, redis_cache: true, ..Options::default() }).await;
    let mut client = suite.client().await;
    let message = "Compare the technical and business trade-offs of a monolith and microservices";

    let first = client.chat(as_tenant("acme", chat(message))).await.expect("chat").into_inner();
    assert!(!metadata(&first).cache_hit);
    assert_eq!(routing_calls(&suite.llm), 1);

    // The same message (normalized): an exact hit, from Redis.
    let again = client.chat(as_tenant("acme", chat(&message.to_uppercase()))).await.expect("chat").into_inner();
    let meta = metadata(&again);
    assert!(meta.cache_hit, "{meta:?}");
    assert_eq!(route(&again), RouteType::Multiagent);
    assert_eq!(meta.domains, ["technical", "business"], "the cached decision keeps its domains");
    assert!(meta.reasoning.starts_with("cached decision for the same message"), "{}", meta.reasoning);
    assert_eq!(routing_calls(&suite.llm), 1, "no second routing call");

    // A reworded message: a similar hit, in process.
    let similar = "Compare the technical and business trade-offs of monoliths and microservices";
    let reworded = client.chat(as_tenant("acme", chat(similar))).await.expect("chat").into_inner();
    assert!(metadata(&reworded).cache_hit, "{:?}", metadata(&reworded));
    assert!(metadata(&reworded).reasoning.starts_with("cached decision for a similar message"));
    assert_eq!(routing_calls(&suite.llm), 1);

    // Another tenant never sees acme's decisions.
    let other = client.chat(as_tenant("globex", chat(message))).await.expect("chat").into_inner();
    assert!(!metadata(&other).cache_hit);
    assert_eq!(routing_calls(&suite.llm), 2);

    // A second replica shares the exact entries through Redis.
    let replica = suite.second_replica().await;
    let channel = tonic::transport::Channel::from_shared(replica.url()).expect("url").connect().await.expect("up");
    let mut second = switchyard_proto::router::v1::router_service_client::RouterServiceClient::new(channel);
    let shared = second.chat(as_tenant("acme", chat(message))).await.expect("chat").into_inner();
    assert!(metadata(&shared).cache_hit);
    assert_eq!(routing_calls(&suite.llm), 2);
}

#[tokio::test]
async fn a_correction_teaches_that_users_route_on_every_replica() {
    // The model answers weather questions directly; the user wants them looked up.
    let llm = ScriptedLlm::start(|request| {
        if is_routing(request) { Reply::text("It is probably sunny.") } else { Reply::text("looked it up") }
    })
    .await;
    let suite = Suite::with(
        llm,
        Options {
            fast_router: true,
            redis_cache: true,
            configure: Box::new(|config| config.corrections_refresh = Duration::from_millis(200)),
            ..Options::default()
        },
    )
    .await;
    let mut client = suite.client().await;
    let ask = |text: &str| ChatRequest { message: text.to_owned(), ..Default::default() };

    let answered = client.chat(as_user("acme", "ann", ask("What's the weather in Paris right now?"))).await;
    let answered = answered.expect("chat").into_inner();
    assert_eq!(route(&answered), RouteType::Direct);
    client
        .submit_feedback(as_user(
            "acme",
            "ann",
            SubmitFeedbackRequest {
                response_id: answered.id.clone(),
                helpful: false,
                expected_route: RouteType::McpAgent as i32,
                comment: "look it up".into(),
            },
        ))
        .await
        .expect("feedback");

    // A similar message from ann now takes the corrected route, without a routing call.
    let before = routing_calls(&suite.llm);
    let corrected = client.chat(as_user("acme", "ann", ask("What is the weather in Paris right now?"))).await;
    let corrected = corrected.expect("chat").into_inner();
    let meta = metadata(&corrected);
    assert_eq!(route(&corrected), RouteType::McpAgent, "{meta:?}");
    assert!(meta.cache_hit && meta.reasoning.starts_with("learned from your correction"), "{meta:?}");
    assert_eq!(routing_calls(&suite.llm), before);

    // bob's preference is his own: his question goes to the model, whose decision the
    // correction made the cache forget.
    let bob = client.chat(as_user("acme", "bob", ask("What's the weather in Paris right now?"))).await;
    let bob = bob.expect("chat").into_inner();
    assert_eq!(route(&bob), RouteType::Direct);
    assert!(!metadata(&bob).cache_hit, "{:?}", metadata(&bob));
    assert_eq!(routing_calls(&suite.llm), before + 1);

    // Another replica loads the correction from Postgres.
    let replica = suite.second_replica().await;
    let channel = tonic::transport::Channel::from_shared(replica.url()).expect("url").connect().await.expect("up");
    let second = switchyard_proto::router::v1::router_service_client::RouterServiceClient::new(channel);
    eventually(Duration::from_secs(20), "the second replica applies ann's correction", || {
        let mut second = second.clone();
        async move {
            let reply = second
                .chat(as_user("acme", "ann", ask("Tell me the weather in Paris right now")))
                .await
                .map_err(|status| status.to_string())?
                .into_inner();
            if route(&reply) == RouteType::McpAgent && metadata(&reply).cache_hit {
                Ok(())
            } else {
                Err(format!("{:?}", metadata(&reply)))
            }
        }
    })
    .await;
}

/// The fast router's health component: SERVING once it is loaded, NOT_SERVING with it turned
/// off; the router itself serves either way.
#[tokio::test]
async fn the_fast_router_shows_as_a_health_component() {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    async fn status(suite: &Suite, service: &str) -> Result<ServingStatus, tonic::Status> {
        let mut client = HealthClient::new(suite.channel().await);
        Ok(client.check(HealthCheckRequest { service: service.into() }).await?.into_inner().status())
    }
    let reply = |_: &Recorded| Reply::text("hi");
    let loaded =
        Suite::with(ScriptedLlm::start(reply).await, Options { fast_router: true, ..Options::default() }).await;
    let off = Suite::with(ScriptedLlm::start(reply).await, Options::default()).await;
    for (suite, expected) in [(&loaded, ServingStatus::Serving), (&off, ServingStatus::NotServing)] {
        eventually(Duration::from_secs(10), "the fast router's component reported", || async {
            match status(suite, switchyard_router::FAST_ROUTER_HEALTH).await {
                Ok(seen) if seen == expected => Ok(()),
                Ok(seen) => Err(format!("{seen:?}")),
                Err(status) => Err(status.message().to_owned()),
            }
        })
        .await;
        assert_eq!(status(suite, "").await.expect("the router's own health"), ServingStatus::Serving);
    }
}
