//! End to end with the real `grpcurl` binary, using server reflection only (no proto files).
//! grpcurl comes from `scripts/install-tools.sh` (`.tools/bin/grpcurl`), `$GRPCURL`, or PATH;
//! the test fails when it is missing.

mod common;

use std::process::Command;

use switchyard_testkit::grpcurl;
use switchyard_triggers::TriggersConfig;

fn run(args: &[&str]) -> String {
    let output = Command::new(grpcurl()).args(args).output().expect("run grpcurl");
    assert!(
        output.status.success(),
        "grpcurl {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_describes_calls_and_checks_health_through_reflection() {
    let server = common::spawn(&TriggersConfig::in_memory("127.0.0.1:0".parse().expect("addr"))).await;
    let addr = server.addr.to_string();
    let result = tokio::task::spawn_blocking(move || {
        let services = run(&["-plaintext", &addr, "list"]);
        assert!(services.lines().any(|l| l == "switchyard.triggers.v1.TriggerService"), "{services}");
        assert!(services.lines().any(|l| l == "grpc.health.v1.Health"), "{services}");
        assert!(!services.contains("SessionService"), "only served services are advertised: {services}");

        let described = run(&["-plaintext", &addr, "describe", "switchyard.triggers.v1.TriggerService"]);
        for rpc in [
            "RegisterRoleTriggers",
            "UnregisterRole",
            "ListRoleTriggers",
            "ListDomains",
            "DetectTriggers",
            "GetBestRole",
        ] {
            assert!(described.contains(&format!("rpc {rpc}")), "{rpc} missing from {described}");
        }
        let message = run(&["-plaintext", &addr, "describe", "switchyard.triggers.v1.DetectTriggersRequest"]);
        assert!(message.contains("string query = 1;"), "{message}");

        for (role, domain) in [("finance-expert", "finance"), ("tech-expert", "technology")] {
            let body = format!(r#"{{"role_id":"{role}","domains":["{domain}"]}}"#);
            run(&["-plaintext", "-d", &body, &addr, "switchyard.triggers.v1.TriggerService/RegisterRoleTriggers"]);
        }
        let detected = run(&[
            "-plaintext",
            "-d",
            r#"{"query":"What are the best investment strategies for tech startups?"}"#,
            &addr,
            "switchyard.triggers.v1.TriggerService/DetectTriggers",
        ]);
        let json: serde_json::Value = serde_json::from_str(&detected).expect("json response");
        let roles: Vec<&str> =
            json["matches"].as_array().expect("matches").iter().filter_map(|m| m["roleId"].as_str()).collect();
        assert!(roles.contains(&"finance-expert") && roles.contains(&"tech-expert"), "{detected}");

        let health = run(&["-plaintext", &addr, "grpc.health.v1.Health/Check"]);
        assert!(health.contains("\"SERVING\""), "{health}");
        let health = run(&[
            "-plaintext",
            "-d",
            r#"{"service":"switchyard.triggers.v1.TriggerService"}"#,
            &addr,
            "grpc.health.v1.Health/Check",
        ]);
        assert!(health.contains("\"SERVING\""), "{health}");
    })
    .await;
    server.stop().await;
    result.expect("grpcurl checks");
}
