//! Failures: retries on 429 and 5xx (honouring Retry-After), no retry on 401, timeouts, errors
//! that name the provider and cause, and a key that never shows.

use std::time::{Duration, Instant};

use futures::StreamExt;
use switchyard_llm::{Anthropic, ErrorKind, OpenAi, ProviderConfig, StreamEvent};
use switchyard_testkit::llm::{Reply, ScriptedLlm};

use crate::support::{KEY, MODES, Mode, Vendor, ask, question};

for_each_vendor!(
    rate_limited_then_answered_after_retry_after,
    server_errors_exhaust_the_retries,
    unauthorized_is_not_retried_and_the_key_never_shows,
    a_retry_after_beyond_the_cap_is_not_waited_out,
    silence_between_chunks_times_out,
    slow_headers_time_out,
    an_error_event_mid_stream_ends_the_stream,
    connection_refused_is_retried_then_reported,
);

async fn rate_limited_then_answered_after_retry_after(vendor: Vendor) {
    for mode in MODES {
        let server = ScriptedLlm::queue(vec![Reply::error(429, "slow down").retry_after(1), Reply::text("ok")]).await;
        let started = Instant::now();
        let (completion, _) = ask(vendor.on(&server).as_ref(), question("hi"), mode).await.unwrap();
        assert_eq!(completion.content, "ok", "{mode:?}");
        assert_eq!(completion.attempts, 2, "{mode:?}");
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        // Retry-After: 1 was honoured (not the 10 ms backoff), and not much more than that.
        let waited = requests[1].received_at - requests[0].received_at;
        assert!(waited >= Duration::from_millis(900), "{mode:?}: retried after {waited:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

async fn server_errors_exhaust_the_retries(vendor: Vendor) {
    for mode in MODES {
        let server = ScriptedLlm::start(|_| Reply::error(500, "the model fell over")).await;
        let config = ProviderConfig { max_retries: 2, ..vendor.config(&server) };
        let error = ask(vendor.provider(config).as_ref(), question("hi"), mode).await.unwrap_err();
        assert_eq!(server.requests().len(), 3, "{mode:?}: max_retries + 1 attempts");
        assert_eq!(error.kind, ErrorKind::Server);
        assert_eq!(error.status, Some(500));
        assert_eq!(error.provider, vendor.name());
        let shown = error.to_string();
        assert!(shown.starts_with(&format!("{}: ", vendor.name())), "{shown}");
        assert!(shown.contains("500") && shown.contains("the model fell over"), "{shown}");
        assert!(shown.contains("3 attempts"), "{shown}");
    }
}

async fn unauthorized_is_not_retried_and_the_key_never_shows(vendor: Vendor) {
    for mode in MODES {
        // A vendor that echoes the key it refused (as some proxies do).
        let server = ScriptedLlm::start(|_| Reply::error(401, format!("Incorrect API key provided: {KEY}"))).await;
        let provider = vendor.on(&server);
        let error = ask(provider.as_ref(), question("hi"), mode).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Auth, "{mode:?}");
        assert_eq!(server.requests().len(), 1, "{mode:?}: not retried");
        let config = vendor.config(&server);
        let provider_debug = match vendor {
            Vendor::OpenAi => format!("{:?}", OpenAi::new(config.clone()).unwrap()),
            Vendor::Anthropic => format!("{:?}", Anthropic::new(config.clone()).unwrap()),
        };
        let shown = format!("{error} {error:?} {provider_debug} {config:?}");
        assert!(!shown.contains(KEY), "the key leaked: {shown}");
        assert!(shown.contains("Incorrect API key provided"), "{shown}");
        assert!(shown.contains(vendor.name()) && shown.contains("401"), "{shown}");
    }
}

async fn a_retry_after_beyond_the_cap_is_not_waited_out(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::error(429, "quota").retry_after(120)).await;
    let config = ProviderConfig { max_retry_after: Duration::from_secs(30), ..vendor.config(&server) };
    let error = vendor.provider(config).complete(question("hi")).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(120)));
    assert_eq!(server.requests().len(), 1);
    assert!(error.message.contains("quota") && error.message.contains("120s"), "{error}");
}

async fn silence_between_chunks_times_out(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::text("abcdefghi").chunk_delay(Duration::from_secs(3))).await;
    let config = ProviderConfig { idle_timeout: Duration::from_millis(300), ..vendor.config(&server) };
    let mut stream = vendor.provider(config).stream(question("hi")).await.unwrap();
    let mut error = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(StreamEvent::Done(completion)) => panic!("completed despite the silence: {completion:?}"),
            Ok(_) => {}
            Err(err) => {
                error = Some(err);
                break;
            }
        }
    }
    let error = error.expect("the stream failed");
    assert_eq!(error.kind, ErrorKind::Timeout);
    assert_eq!(error.provider, vendor.name());
    assert!(stream.next().await.is_none(), "nothing after the error");
    assert_eq!(server.requests().len(), 1, "a started stream is not retried");
}

async fn slow_headers_time_out(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::text("late").delay(Duration::from_secs(3))).await;
    let config = ProviderConfig { timeout: Duration::from_millis(300), max_retries: 1, ..vendor.config(&server) };
    let provider = vendor.provider(config);
    for mode in MODES {
        let error = ask(provider.as_ref(), question("hi"), mode).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Timeout, "{mode:?}: {error}");
    }
    assert_eq!(server.requests().len(), 4, "each call retried once");
}

async fn an_error_event_mid_stream_ends_the_stream(vendor: Vendor) {
    let server = ScriptedLlm::start(|_| Reply::text("Partial answ").fail_mid_stream("Overloaded")).await;
    let mut stream = vendor.on(&server).stream(question("hi")).await.unwrap();
    let mut text = String::new();
    let error = loop {
        match stream.next().await.expect("an error before the end") {
            Ok(StreamEvent::Text(piece)) => text.push_str(&piece),
            Ok(other) => panic!("unexpected {other:?}"),
            Err(error) => break error,
        }
    };
    assert_eq!(text, "Partial answ");
    assert_eq!(error.kind, ErrorKind::Server);
    assert!(error.to_string().contains("Overloaded"), "{error}");
    assert!(stream.next().await.is_none());
}

async fn connection_refused_is_retried_then_reported(vendor: Vendor) {
    let port = switchyard_testkit::free_port();
    let base_url = match vendor {
        Vendor::OpenAi => format!("http://127.0.0.1:{port}/v1"),
        Vendor::Anthropic => format!("http://127.0.0.1:{port}"),
    };
    let config = ProviderConfig {
        max_retries: 1,
        backoff_initial: Duration::from_millis(10),
        ..ProviderConfig::new(base_url).with_api_key(Some(switchyard_kit::Secret::new(KEY)))
    };
    for mode in [Mode::Complete, Mode::Stream] {
        let error = ask(vendor.provider(config.clone()).as_ref(), question("hi"), mode).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Connect, "{mode:?}: {error}");
        assert!(error.message.contains("2 attempts"), "{error}");
        assert!(!format!("{error:?}").contains(KEY));
    }
}
