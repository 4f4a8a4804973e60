//! The deploy files as the gateway reads them: every servers file under `deploy/` loads with
//! the gateway's own loader, runs only MCP server packages the image installs, and every
//! `${VAR}` it uses is set wherever docker-compose.yml or a Kubernetes Deployment mounts it.
//! scripts/check-deploy.sh validates the manifests themselves (kustomize, schemas, compose).

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use serde_json::Value;
use switchyard_mcp_gateway::upstream::config::{Transport, UpstreamSpec, parse_file};

/// Where the image installs the MCP server packages (deploy/mcp-gateway/package.json).
const IMAGE_PACKAGES: &str = "/opt/mcp-servers/node_modules/";

fn root() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Files under `dir` (relative to the repository root, sorted) whose name ends in one of `ends`.
fn files_under(dir: &str, ends: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, ends: &[&str], found: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, ends, found);
            } else if path.to_str().is_some_and(|p| ends.iter().any(|end| p.ends_with(end))) {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&root().join(dir), ends, &mut found);
    found.sort();
    found.into_iter().map(|path| path.strip_prefix(root()).expect("under the root").to_path_buf()).collect()
}

fn read(path: &Path) -> String {
    fs::read_to_string(root().join(path)).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// Every YAML document of a file; a file that does not parse fails the test.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = read(path);
    serde_norway::Deserializer::from_str(&text)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|err| panic!("{}: not valid YAML: {err}", path.display()))
        })
        .filter(|document| !document.is_null())
        .collect()
}

/// A servers file as the gateway loads it, with the `${VAR}` names it uses.
struct ServersFile {
    specs: Vec<UpstreamSpec>,
    variables: BTreeSet<String>,
}

/// Loads `text` with the gateway's loader; every variable resolves to a stand-in value and is
/// recorded, so the file is checked in full whatever this process's environment holds.
fn load_servers(origin: &str, text: &str, json: bool) -> Result<ServersFile, String> {
    let variables = RefCell::new(BTreeSet::new());
    let lookup = |name: &str| {
        variables.borrow_mut().insert(name.to_owned());
        Some("stand-in".to_owned())
    };
    let specs = parse_file(origin, text, json, &lookup).map_err(|err| err.to_string())?;
    Ok(ServersFile { specs, variables: variables.into_inner() })
}

/// A TOML or JSON file under `deploy/` is a servers file when it has a `servers` (or
/// `mcpServers`) table; each must then load. Any such file that does not parse fails the test.
fn servers_files() -> BTreeMap<PathBuf, ServersFile> {
    let mut found = BTreeMap::new();
    for path in files_under("deploy", &[".toml", ".json"]) {
        let text = read(&path);
        let json = path.extension().is_some_and(|ext| ext == "json");
        let keys: Vec<String> = if json {
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => map.keys().cloned().collect(),
                Ok(_) => Vec::new(),
                Err(err) => panic!("{}: not valid JSON: {err}", path.display()),
            }
        } else {
            let table: toml::Table =
                toml::from_str(&text).unwrap_or_else(|err| panic!("{}: not valid TOML: {err}", path.display()));
            table.keys().cloned().collect()
        };
        if keys.iter().any(|key| key == "servers" || key == "mcpServers") {
            let file = load_servers(&path.display().to_string(), &text, json).unwrap_or_else(|err| panic!("{err}"));
            found.insert(path, file);
        }
    }
    found
}

/// The packages under the image's node_modules that a server's arguments run.
fn image_packages(spec: &UpstreamSpec) -> Vec<String> {
    let Transport::Stdio { args, .. } = &spec.transport else { return Vec::new() };
    args.iter()
        .filter_map(|arg| arg.strip_prefix(IMAGE_PACKAGES))
        .filter_map(|rest| {
            let mut parts = rest.split('/');
            let first = parts.next()?;
            let name = if first.starts_with('@') { format!("{first}/{}", parts.next()?) } else { first.to_owned() };
            // A package directory, not a file directly in node_modules.
            parts.next().map(|_| name)
        })
        .collect()
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    value.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The `${VAR}`s a compose service lacks: for a service with MCP_GATEWAY_CONFIG in its
/// environment, those used by the servers file mounted at that path.
fn compose_problems(compose: &Value, servers: &BTreeMap<PathBuf, ServersFile>) -> Vec<String> {
    let mut problems = Vec::new();
    let services = compose.get("services").and_then(Value::as_object).into_iter().flatten();
    for (name, service) in services {
        let environment: BTreeMap<String, Option<String>> = match service.get("environment") {
            Some(Value::Object(map)) => {
                map.iter().map(|(key, value)| (key.clone(), value.as_str().map(str::to_owned))).collect()
            }
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(|item| match item.split_once('=') {
                    Some((key, value)) => (key.to_owned(), Some(value.to_owned())),
                    None => (item.to_owned(), None),
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        let Some(Some(target)) = environment.get("MCP_GATEWAY_CONFIG") else { continue };
        let volumes = string_list(service.get("volumes"));
        let sources: Vec<&str> = volumes
            .iter()
            .filter_map(|volume| {
                let mut parts = volume.split(':');
                let source = parts.next()?;
                (parts.next() == Some(target.as_str())).then_some(source)
            })
            .collect();
        if sources.is_empty() {
            problems
                .push(format!("docker-compose.yml: service {name}: nothing is mounted at MCP_GATEWAY_CONFIG {target}"));
        }
        for source in sources {
            let path = PathBuf::from(source.trim_start_matches("./"));
            let Some(file) = servers.get(&path) else {
                problems
                    .push(format!("docker-compose.yml: service {name}: {source} is not a servers file under deploy/"));
                continue;
            };
            for variable in file.variables.iter().filter(|v| !environment.contains_key(*v)) {
                problems.push(format!(
                    "docker-compose.yml: service {name}: {source} uses ${{{variable}}}, which is not in its environment"
                ));
            }
        }
    }
    problems
}

/// The `${VAR}`s Kubernetes containers lack: for each ConfigMap a kustomization generates from
/// servers files, every container of its Deployments that mounts it must set their variables,
/// and at least one must mount it.
fn kustomization_problems(dir: &Path, servers: &BTreeMap<PathBuf, ServersFile>) -> Vec<String> {
    let kustomization_path = dir.join("kustomization.yaml");
    let Some(kustomization) = yaml_documents(&kustomization_path).into_iter().next() else { return Vec::new() };
    let resources: Vec<(PathBuf, Vec<Value>)> = string_list(kustomization.get("resources"))
        .into_iter()
        .map(|resource| dir.join(resource))
        .filter(|path| root().join(path).is_file())
        .map(|path| {
            let documents = yaml_documents(&path);
            (path, documents)
        })
        .collect();
    let mut problems = Vec::new();
    let generators = kustomization.get("configMapGenerator").and_then(Value::as_array).into_iter().flatten();
    for generator in generators {
        let config_map = generator.get("name").and_then(Value::as_str).unwrap_or_default();
        let variables: BTreeSet<&String> = string_list(generator.get("files"))
            .iter()
            .map(|entry| dir.join(entry.rsplit('=').next().unwrap_or(entry)))
            .filter_map(|path| servers.get(&path))
            .flat_map(|file| &file.variables)
            .collect();
        if variables.is_empty() {
            continue;
        }
        let mut users = 0;
        for (path, documents) in &resources {
            for deployment in documents.iter().filter(|d| d.get("kind").and_then(Value::as_str) == Some("Deployment")) {
                let pod = deployment.pointer("/spec/template/spec").cloned().unwrap_or_default();
                let volumes: BTreeSet<&str> = pod
                    .get("volumes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|volume| volume.pointer("/configMap/name").and_then(Value::as_str) == Some(config_map))
                    .filter_map(|volume| volume.get("name").and_then(Value::as_str))
                    .collect();
                for container in pod.get("containers").and_then(Value::as_array).into_iter().flatten() {
                    let mounts = container.get("volumeMounts").and_then(Value::as_array).into_iter().flatten();
                    if !mounts.filter_map(|m| m.get("name").and_then(Value::as_str)).any(|m| volumes.contains(m)) {
                        continue;
                    }
                    users += 1;
                    let set: BTreeSet<&str> = container
                        .get("env")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|env| env.get("name").and_then(Value::as_str))
                        .collect();
                    let container_name = container.get("name").and_then(Value::as_str).unwrap_or("?");
                    for variable in variables.iter().filter(|v| !set.contains(v.as_str())) {
                        problems.push(format!(
                            "{}: container {container_name} mounts ConfigMap {config_map}, which uses ${{{variable}}}, but does not set {variable}",
                            path.display()
                        ));
                    }
                }
            }
        }
        if users == 0 {
            problems.push(format!(
                "{}: no Deployment container mounts the generated ConfigMap {config_map}",
                kustomization_path.display()
            ));
        }
    }
    problems
}

#[test]
fn every_servers_file_loads_with_the_gateways_loader() {
    let servers = servers_files();
    // The two files the deployments use: finding fewer means the search broke, not that all is well.
    for expected in ["deploy/mcp-gateway/servers.example.toml", "deploy/k8s/base/mcp-gateway-servers.toml"] {
        let file =
            servers.get(Path::new(expected)).unwrap_or_else(|| panic!("{expected} was not found as a servers file"));
        assert!(!file.specs.is_empty(), "{expected} configures no server");
    }
}

#[test]
fn servers_files_run_only_packages_the_image_installs() {
    let manifest: Value =
        serde_json::from_str(&read(Path::new("deploy/mcp-gateway/package.json"))).expect("package.json");
    let lock: Value =
        serde_json::from_str(&read(Path::new("deploy/mcp-gateway/package-lock.json"))).expect("package-lock.json");
    let declared: BTreeSet<&String> = manifest
        .get("dependencies")
        .and_then(Value::as_object)
        .expect("package.json has dependencies")
        .keys()
        .collect();
    let mut problems = Vec::new();
    for name in &declared {
        if lock.pointer("/packages").and_then(|p| p.get(format!("node_modules/{name}"))).is_none() {
            problems.push(format!(
                "deploy/mcp-gateway/package-lock.json: {name} is not locked (run npm install --package-lock-only)"
            ));
        }
    }
    let mut used = 0;
    for (path, file) in servers_files() {
        for spec in &file.specs {
            for package in image_packages(spec) {
                used += 1;
                if !declared.contains(&package) {
                    problems.push(format!(
                        "{}: servers.{}: runs {package}, which deploy/mcp-gateway/package.json does not install",
                        path.display(),
                        spec.name
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(used > 0, "no servers file runs a package of the image: the pattern {IMAGE_PACKAGES} no longer matches");
}

#[test]
fn compose_sets_every_variable_its_servers_file_uses() {
    let servers = servers_files();
    let compose = yaml_documents(Path::new("docker-compose.yml")).into_iter().next().expect("docker-compose.yml");
    let problems = compose_problems(&compose, &servers);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn kubernetes_containers_set_every_variable_their_servers_file_uses() {
    let servers = servers_files();
    let kustomizations = files_under("deploy/k8s", &["/kustomization.yaml"]);
    assert!(!kustomizations.is_empty(), "no kustomization.yaml under deploy/k8s");
    let problems: Vec<String> = kustomizations
        .iter()
        .flat_map(|path| kustomization_problems(path.parent().expect("a folder"), &servers))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checks above find what they look for: a variable missing from the environment, a
/// mount at the wrong path, and a servers file the loader rejects.
#[test]
fn the_checks_report_what_is_missing() {
    let file = load_servers("s.toml", "[servers.s]\nurl = \"https://h/mcp\"\nheaders = { A = \"${TOKEN}\" }\n", false)
        .expect("valid");
    assert_eq!(file.variables, BTreeSet::from(["TOKEN".to_owned()]));
    let servers = BTreeMap::from([(PathBuf::from("deploy/s.toml"), file)]);
    let compose = |environment: &str, volume: &str| -> Value {
        let text = format!(
            "services:\n  gw:\n    environment:\n{environment}      MCP_GATEWAY_CONFIG: /etc/s.toml\n    volumes:\n      - {volume}\n"
        );
        serde_norway::from_str(&text).expect("yaml")
    };
    assert_eq!(
        compose_problems(&compose("      TOKEN: x\n", "./deploy/s.toml:/etc/s.toml:ro"), &servers),
        [] as [String; 0]
    );
    assert_eq!(
        compose_problems(&compose("", "./deploy/s.toml:/etc/s.toml:ro"), &servers),
        ["docker-compose.yml: service gw: ./deploy/s.toml uses ${TOKEN}, which is not in its environment"]
    );
    assert_eq!(
        compose_problems(&compose("      TOKEN: x\n", "./deploy/s.toml:/etc/other.toml"), &servers),
        ["docker-compose.yml: service gw: nothing is mounted at MCP_GATEWAY_CONFIG /etc/s.toml"]
    );

    let err = load_servers("bad.toml", "[servers.a]\ncommand = \"x\"\nenv = { K = \"${OPEN\" }\n", false).err();
    assert!(err.is_some_and(|err| err.contains("unterminated")), "an unterminated ${{ is an error");
    let err = load_servers("bad.toml", "[servers.a]\ncommand = \"x\"\n[extra]\n", false).err();
    assert!(err.is_some_and(|err| err.contains("unknown field")), "an unknown top-level key is an error");
}
