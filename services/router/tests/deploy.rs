//! The router's model price table as deployed: Kubernetes mounts the `router-model-prices`
//! ConfigMap (generated from a copy of the shipped table, kept equal to it) where
//! `ROUTER_MODEL_PRICES` in `router-config` points, and docker-compose mounts the shipped file
//! where its `ROUTER_MODEL_PRICES` points; each file loads with the router's own loader and
//! prices the default model.

use std::path::{Path, PathBuf};

use serde_json::Value;
use switchyard_llm::Usage;
use switchyard_router::cost::Prices;
use switchyard_testkit::root;

const SHIPPED: &str = "services/router/model-prices.toml";
const K8S_COPY: &str = "deploy/k8s/base/router-model-prices.toml";

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
}

fn yaml(path: &str) -> Vec<Value> {
    let text = read(path);
    serde_norway::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap_or_else(|err| panic!("{path}: {err}")))
        .collect()
}

/// The file the router reads at `path` loads with its loader and prices `model`.
fn prices_model(path: &Path, model: &str) {
    let prices = Prices::load(Some(path)).unwrap_or_else(|err| panic!("{}: {err:#}", path.display()));
    let usage = Usage { prompt_tokens: 1_000, completion_tokens: 100, cached_prompt_tokens: 0 };
    assert!(prices.cost(model, &usage).is_some_and(|cost| cost > 0), "{}: no price for {model}", path.display());
}

/// The mount of `container` whose directory holds `file`: the volume's name.
fn volume_holding<'a>(container: &'a Value, file: &str) -> &'a str {
    let mounts = container["volumeMounts"].as_array().expect("the router container has volumeMounts");
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"].as_str().is_some_and(|dir| Path::new(file).parent() == Some(Path::new(dir))))
        .unwrap_or_else(|| panic!("nothing is mounted at the directory of {file}: {mounts:?}"));
    assert_eq!(mount["readOnly"], true, "{mount:?}");
    mount["name"].as_str().expect("a mount name")
}

#[test]
fn kubernetes_mounts_a_copy_of_the_shipped_prices_where_router_model_prices_points() {
    assert_eq!(read(K8S_COPY), read(SHIPPED), "{K8S_COPY} must be a copy of {SHIPPED} (cp {SHIPPED} {K8S_COPY})");

    let config = &yaml("deploy/k8s/base/router-configmap.yaml")[0];
    let path = config["data"]["ROUTER_MODEL_PRICES"].as_str().expect("router-config sets ROUTER_MODEL_PRICES");
    let default_model = config["data"]["UNIFIED_CHAT_DEFAULT_MODEL"].as_str().expect("a default model");
    let file_name = Path::new(path).file_name().and_then(|n| n.to_str()).expect("a file name");

    // The kustomization generates the ConfigMap with that file name from the copy.
    let kustomization = &yaml("deploy/k8s/base/kustomization.yaml")[0];
    let generators = kustomization["configMapGenerator"].as_array().expect("configMapGenerator");
    let generator =
        generators.iter().find(|g| g["name"] == "router-model-prices").expect("a router-model-prices generator");
    let files: Vec<&str> = generator["files"].as_array().expect("files").iter().filter_map(Value::as_str).collect();
    let source = files
        .iter()
        .find_map(|entry| entry.strip_prefix(&format!("{file_name}=")))
        .unwrap_or_else(|| panic!("router-model-prices has no {file_name}: {files:?}"));
    assert_eq!(Path::new("deploy/k8s/base").join(source), PathBuf::from(K8S_COPY));

    // The Deployment mounts that ConfigMap at the path's directory, with router-config loaded.
    let deployment = &yaml("deploy/k8s/base/router-deployment.yaml")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let container = pod["containers"]
        .as_array()
        .and_then(|containers| containers.iter().find(|c| c["name"] == "router"))
        .expect("the router container");
    let sources: Vec<&str> = container["envFrom"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|source| source["configMapRef"]["name"].as_str())
        .collect();
    assert!(sources.contains(&"router-config"), "{sources:?}");
    let volume = volume_holding(container, path);
    let volumes = pod["volumes"].as_array().expect("volumes");
    let mounted = volumes.iter().find(|v| v["name"] == volume).expect("the mounted volume");
    assert_eq!(mounted["configMap"]["name"], "router-model-prices", "{mounted:?}");

    prices_model(&root().join(K8S_COPY), default_model);
}

#[test]
fn docker_compose_mounts_the_shipped_prices_where_router_model_prices_points() {
    let compose = &yaml("docker-compose.yml")[0];
    let router = &compose["services"]["router"];
    let path = router["environment"]["ROUTER_MODEL_PRICES"].as_str().expect("the router sets ROUTER_MODEL_PRICES");
    let volumes: Vec<&str> = router["volumes"].as_array().expect("volumes").iter().filter_map(Value::as_str).collect();
    let source = volumes
        .iter()
        .find_map(|volume| {
            let mut parts = volume.split(':');
            let source = parts.next()?;
            (parts.next() == Some(path)).then_some(source)
        })
        .unwrap_or_else(|| panic!("nothing is mounted at {path}: {volumes:?}"));
    assert_eq!(source.trim_start_matches("./"), SHIPPED);
    prices_model(&root().join(SHIPPED), "openai/gpt-4o-mini");
}
