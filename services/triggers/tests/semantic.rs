//! The semantic signal over real gRPC on loopback, with the real MiniLM model (a missing model
//! fails these tests; it never skips them), and the service without a model.

mod common;

use std::time::Duration;

use switchyard_proto::triggers::v1::{
    BestRoleReason, DecidingSignal, DetectTriggersRequest, GetBestRoleRequest, ListRoleTriggersRequest,
    RegisterRoleTriggersRequest, SemanticState, trigger_service_client::TriggerServiceClient,
};
use switchyard_testkit::eventually;
use switchyard_triggers::{SEMANTIC_HEALTH, TriggersConfig};
use tonic::{Code, transport::Channel};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

fn config_with_model(model_dir: std::path::PathBuf) -> TriggersConfig {
    let mut config = TriggersConfig::in_memory("127.0.0.1:0".parse().expect("addr"));
    config.model_dir = model_dir;
    config
}

fn domain_role(name: &str) -> RegisterRoleTriggersRequest {
    RegisterRoleTriggersRequest {
        role_id: format!("{name}-expert"),
        domains: vec![name.to_owned()],
        ..RegisterRoleTriggersRequest::default()
    }
}

async fn health(server: &common::Running, service: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(server.url()).expect("url").connect().await.expect("connect");
    let mut client = HealthClient::new(channel);
    client.check(HealthCheckRequest { service: service.into() }).await.expect("check").into_inner().status()
}

/// Registers one role per domain and waits until the model is loaded and indexed.
async fn ready_client(server: &common::Running) -> TriggerServiceClient<Channel> {
    let model_dir = switchyard_testkit::model_dir();
    assert!(
        model_dir.join("model.safetensors").is_file(),
        "{} has no model: run scripts/fetch-models.sh",
        model_dir.display()
    );
    let mut client = common::client(server).await;
    for name in ["finance", "healthcare", "technology", "legal"] {
        client.register_role_triggers(domain_role(name)).await.expect("register");
    }
    eventually(Duration::from_secs(60), "the semantic signal scoring queries", || {
        let mut client = client.clone();
        async move {
            let request = DetectTriggersRequest { query: "hello there".into() };
            let state = client.detect_triggers(request).await.expect("detect").into_inner().semantic_state();
            if state == SemanticState::Scored { Ok(()) } else { Err(format!("{state:?}")) }
        }
    })
    .await;
    client
}

#[tokio::test]
async fn meaning_decides_when_no_trigger_matches_and_a_clear_trigger_decision_stands() {
    let server = common::spawn(&config_with_model(switchyard_testkit::model_dir())).await;
    let mut client = ready_client(&server).await;
    // The readiness detail follows the model at the next health probe (every 2 s).
    eventually(Duration::from_secs(10), "the semantic health name serving", || async {
        let status = health(&server, SEMANTIC_HEALTH).await;
        if status == ServingStatus::Serving { Ok(()) } else { Err(format!("{status:?}")) }
    })
    .await;

    // No pack word: the semantic signal decides, from the legal expert.
    let query = "My toe turned purple after I stubbed it on the door frame; is it broken?";
    let best = client
        .get_best_role(GetBestRoleRequest {
            query: query.into(),
            current_role_id: "legal-expert".into(),
            hysteresis_ratio: None,
            ..Default::default()
        })
        .await
        .expect("best role")
        .into_inner();
    assert_eq!(best.role_id, "healthcare-expert", "{}", best.explanation);
    assert_eq!((best.reason(), best.decided_by()), (BestRoleReason::SemanticMatch, DecidingSignal::Semantic));
    assert_eq!(best.semantic_state(), SemanticState::Scored);
    assert_eq!(best.top_score, 0, "no trigger matched");
    let top = &best.matches[0];
    assert!(top.matched_triggers.is_empty() && top.semantic_similarity.is_some() && !top.nearest_exemplar.is_empty());
    assert_eq!(top.combined_score, top.semantic_score);
    assert_eq!(best.top_combined_score, top.combined_score);
    assert!(best.explanation.contains("closest in meaning"), "{}", best.explanation);

    // Hysteresis applies to the combined score: with the runner-up as current role, it is kept
    // exactly when it is within the ratio.
    if let Some(runner_up) = best.matches.get(1) {
        let kept = client
            .get_best_role(GetBestRoleRequest {
                query: query.into(),
                current_role_id: runner_up.role_id.clone(),
                hysteresis_ratio: None,
                ..Default::default()
            })
            .await
            .expect("best role")
            .into_inner();
        assert_eq!(kept.current_combined_score, runner_up.combined_score);
        assert_eq!(kept.kept_current, runner_up.combined_score >= 0.8 * top.combined_score);
    }

    // A clear trigger decision: the semantic signal is not even computed.
    let clear = client
        .detect_triggers(DetectTriggersRequest {
            query: "Should I refinance my mortgage at a 6% interest rate?".into(),
        })
        .await
        .expect("detect")
        .into_inner();
    assert_eq!(clear.matches[0].role_id, "finance-expert");
    assert_eq!((clear.decided_by(), clear.semantic_state()), (DecidingSignal::Triggers, SemanticState::NotNeeded));
    assert!(clear.matches.iter().all(|m| m.semantic_similarity.is_none() && f64::from(m.score) == m.combined_score));
    server.stop().await;
}

#[tokio::test]
async fn a_custom_role_is_found_by_its_description_and_example_questions() {
    let server = common::spawn(&config_with_model(switchyard_testkit::model_dir())).await;
    let mut client = ready_client(&server).await;
    let registered = client
        .register_role_triggers(RegisterRoleTriggersRequest {
            role_id: "stargazing-guide".into(),
            description: "Amateur astronomy: the night sky, planets, stars, constellations and telescopes.".into(),
            example_questions: vec![
                "When is the next meteor shower?".into(),
                "How do I find the North Star?".into(),
                "What can I see through binoculars at night?".into(),
            ],
            ..RegisterRoleTriggersRequest::default()
        })
        .await
        .expect("register")
        .into_inner();
    let role = registered.role.expect("role");
    assert_eq!(role.example_questions.len(), 3);
    let listed = client
        .list_role_triggers(ListRoleTriggersRequest { role_id: "stargazing-guide".into(), ..Default::default() })
        .await
        .expect("list")
        .into_inner();
    assert!(listed.roles[0].description.starts_with("Amateur astronomy"));

    let best = client
        .get_best_role(GetBestRoleRequest {
            query: "Which planets are visible tonight without a telescope?".into(),
            ..GetBestRoleRequest::default()
        })
        .await
        .expect("best role")
        .into_inner();
    assert_eq!((best.role_id.as_str(), best.reason()), ("stargazing-guide", BestRoleReason::SemanticMatch));
    server.stop().await;
}

#[tokio::test]
async fn bad_descriptions_and_example_questions_are_invalid_arguments_naming_the_field() {
    let server = common::spawn(&config_with_model(switchyard_testkit::model_dir())).await;
    let mut client = common::client(&server).await;
    let register = |description: String, example_questions: Vec<String>| RegisterRoleTriggersRequest {
        role_id: "bad-role".into(),
        description,
        example_questions,
        ..RegisterRoleTriggersRequest::default()
    };
    let err =
        client.register_role_triggers(register(String::new(), vec!["ok?".into(), "  ".into()])).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "example_questions[1]: must not be empty"));
    let err = client.register_role_triggers(register("x".repeat(1025), Vec::new())).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), "description: is 1025 bytes, over the limit of 1024 bytes");
    let err = client.register_role_triggers(register(String::new(), vec!["q".into(); 51])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("example_questions: 51 questions given"), "{}", err.message());
    server.stop().await;
}

#[tokio::test]
async fn without_the_model_the_service_serves_by_triggers_and_says_so() {
    let missing = std::env::temp_dir().join(format!("sy-no-model-{}", uuid::Uuid::new_v4().simple()));
    let server = common::spawn(&config_with_model(missing)).await;
    let mut client = common::client(&server).await;
    client.register_role_triggers(domain_role("healthcare")).await.expect("register");
    let detected = eventually(Duration::from_secs(10), "the model reported unavailable", || {
        let mut client = client.clone();
        async move {
            let request = DetectTriggersRequest { query: "My toe turned purple after I stubbed it".into() };
            let detected = client.detect_triggers(request).await.expect("detect").into_inner();
            if detected.semantic_state() == SemanticState::Unavailable {
                Ok(detected)
            } else {
                Err(format!("{detected:?}"))
            }
        }
    })
    .await;
    assert_eq!((detected.decided_by(), detected.matches.len()), (DecidingSignal::None, 0));
    let keyword = client
        .detect_triggers(DetectTriggersRequest { query: "Is it safe to take ibuprofen?".into() })
        .await
        .expect("detect")
        .into_inner();
    assert_eq!(keyword.matches[0].role_id, "healthcare-expert");
    eventually(Duration::from_secs(10), "readiness serving, semantic detail not", || async {
        let main = health(&server, "switchyard.triggers.v1.TriggerService").await;
        let semantic = health(&server, SEMANTIC_HEALTH).await;
        if (main, semantic) == (ServingStatus::Serving, ServingStatus::NotServing) {
            Ok(())
        } else {
            Err(format!("{main:?}, {semantic:?}"))
        }
    })
    .await;
    server.stop().await;
}

/// The domain exemplars' vectors are kept in the `--embedding-cache` file between starts: a
/// file of another model is ignored and rewritten with this model's vectors on the first start,
/// and the next start reads its vectors instead of embedding the texts. (The file is doctored
/// between the starts, so the second service's similarities show which vectors it used.)
#[tokio::test]
async fn exemplar_embeddings_are_kept_between_starts() {
    use switchyard_models::cache_file::{self, ModelDigest};
    let model_dir = switchyard_testkit::model_dir();
    let path = std::env::temp_dir().join(format!("sy-triggers-kept-{}/exemplars.embed", uuid::Uuid::new_v4().simple()));
    let foreign = ModelDigest::from_bytes([9; 32]);
    cache_file::write(&path, &foreign, 384, std::iter::once(("hello", [0.5_f32; 384].as_slice()))).expect("write");
    let mut config = config_with_model(model_dir.clone());
    config.embedding_cache = Some(path.clone());

    let first = common::spawn(&config).await;
    ready_client(&first).await;
    let model = ModelDigest::of_dir(&model_dir).expect("model digest");
    let packs = switchyard_triggers::packs::DomainPacks::builtin().expect("packs");
    let texts = switchyard_triggers::semantic::SemanticIndex::pack_texts(&packs);
    let kept = cache_file::read(&path, &model, 384).expect("rewritten with this model's vectors");
    let mut kept_texts: Vec<&str> = kept.iter().map(|(text, _)| text.as_str()).collect();
    kept_texts.sort_unstable();
    assert_eq!(kept_texts, texts.iter().map(String::as_str).collect::<Vec<_>>(), "every pack text, once");
    drop(first);

    // Every legal text given the vector of small talk that matches no trigger: only a service
    // that read the file finds it as close to the legal role as to itself.
    let question = "hello there";
    let embedder = switchyard_models::Embedder::load(&model_dir).expect("model");
    let question_vector = embedder.embed(&[question]).expect("embed").remove(0);
    let legal = packs.get("legal").expect("legal pack");
    let legal_texts: Vec<&String> = std::iter::once(&legal.description).chain(&legal.exemplar_questions).collect();
    let doctored: Vec<(String, Vec<f32>)> = kept
        .into_iter()
        .map(
            |(text, vector)| {
                if legal_texts.contains(&&text) { (text, question_vector.clone()) } else { (text, vector) }
            },
        )
        .collect();
    cache_file::write(&path, &model, 384, doctored.iter().map(|(t, v)| (t.as_str(), v.as_slice()))).expect("write");

    let second = common::spawn(&config).await;
    let mut client = ready_client(&second).await;
    let detected =
        client.detect_triggers(DetectTriggersRequest { query: question.into() }).await.expect("detect").into_inner();
    let legal_match = detected
        .matches
        .iter()
        .find(|m| m.role_id == "legal-expert")
        .unwrap_or_else(|| panic!("legal not scored: {detected:?}"));
    let similarity = legal_match.semantic_similarity.expect("a similarity");
    assert!(similarity > 0.99, "the legal role's similarity {similarity}: the kept vectors were not read");
    let _ = std::fs::remove_dir_all(path.parent().expect("a directory"));
}
