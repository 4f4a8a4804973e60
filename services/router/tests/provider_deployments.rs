//! A provider configured with two base URLs (two deployments) behind the router: the failing
//! one is cooled down and the healthy one answers every turn, and the router's `/metrics`
//! shows each deployment's calls, cooldowns and health by its position, never by key or URL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{net::SocketAddr, time::Duration};

use common::{OPENAI_KEY, Options, Suite, as_tenant, chat};
use switchyard_kit::telemetry::init_metrics;
use switchyard_router::RouterConfig;
use switchyard_testkit::{
    free_port,
    llm::{Reply, ScriptedLlm, Wire},
    prometheus,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_deployment_is_cooled_and_the_scrape_shows_each_deployment() {
    // Before the router makes its instruments; nextest runs each test in its own process.
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _metrics = init_metrics("router-deployments-test", None, Some(listen)).unwrap();
    // Deployment 0 is the suite's vendor, failing; deployment 1 another vendor, answering.
    let failing = ScriptedLlm::start(|request| match request.wire {
        Wire::OpenAi => Reply::error(500, "internal error"),
        Wire::Anthropic => Reply::text("not asked"),
    })
    .await;
    let healthy = ScriptedLlm::start(|_| Reply::text("Hello there.")).await;
    let urls = vec![failing.openai_base_url(), healthy.openai_base_url()];
    let configure = Box::new(move |config: &mut RouterConfig| {
        config.providers.openai_base_url = None;
        config.providers.openai_base_urls = urls;
        config.providers.deployment_cooldown = Duration::from_secs(60);
    });
    let suite = Suite::with(failing, Options { configure, ..Options::default() }).await;
    let mut client = suite.client().await;

    for _ in 0..3 {
        let answer = client.chat(as_tenant("acme", chat("hello"))).await.unwrap().into_inner();
        assert_eq!(answer.message.unwrap().content, "Hello there.");
        assert_eq!(answer.model, "openai/gpt-4o-mini", "answered by the model, not a fallback");
    }
    let failed_calls = suite.llm.requests().iter().filter(|r| r.wire == Wire::OpenAi).count();
    assert_eq!(failed_calls, 1, "the failing deployment is skipped while it cools");
    assert_eq!(healthy.requests().len(), 3);
    assert!(healthy.requests().iter().all(|r| r.header("authorization") == Some(&format!("Bearer {OPENAI_KEY}"))));

    let (status, text) = prometheus::scrape(listen).await;
    assert_eq!(status, 200, "{text}");
    let metrics = prometheus::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
    let at = |name: &str, deployment: &str, extra: &[(&str, &str)]| {
        let mut labels = vec![("provider", "openai"), ("deployment", deployment)];
        labels.extend_from_slice(extra);
        metrics.sum(name, &labels)
    };
    assert_eq!(at("switchyard_provider_deployment_calls_total", "0", &[("outcome", "server")]), 1.0, "{text}");
    assert_eq!(at("switchyard_provider_deployment_calls_total", "1", &[("outcome", "ok")]), 3.0, "{text}");
    assert_eq!(at("switchyard_provider_deployment_cooldowns_total", "0", &[("error_type", "server")]), 1.0, "{text}");
    assert_eq!(at("switchyard_provider_deployment_cooldowns_total", "1", &[]), 0.0, "{text}");
    let reported = |deployment: &str| {
        let labels = [("provider", "openai"), ("deployment", deployment)];
        metrics.find("switchyard_provider_deployment_healthy", &labels).count()
    };
    assert_eq!((reported("0"), reported("1")), (1, 1), "each deployment's health is reported:\n{text}");
    assert_eq!(at("switchyard_provider_deployment_healthy", "0", &[]), 0.0, "{text}");
    assert_eq!(at("switchyard_provider_deployment_healthy", "1", &[]), 1.0, "{text}");
    assert!(!text.contains(OPENAI_KEY) && !text.contains("127.0.0.1"), "a key or URL in the scrape:\n{text}");
}
