//! The embedding cache file (`--embedding-cache`) with real parts: the gateway on loopback, the
//! MiniLM model, a real MCP server downstream (the test kit's, serving a catalog generated
//! from MetaTool's descriptions), an MCP client over streamable HTTP. A restart reads every
//! vector from the file and ranks exactly as before; a bad file is ignored and rewritten.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{path::Path, time::Duration};

use rmcp::model::CallToolRequestParams;
use serde_json::json;
use switchyard_mcp_gateway::{GatewayConfig, Stores, catalog::Ranked};
use switchyard_models::cache_file::{self, ModelDigest};
use switchyard_testkit::{
    catalog, eventually,
    mcp::{self, FixtureServer},
};

const QUERY: &str = "Turn this question into a SQL query";

fn tools(count: usize) -> Vec<rmcp::model::Tool> {
    catalog::varied_tools(&catalog::base_tools(include_str!("data/metatool-tools.jsonl")), count)
}

fn cached_config(fixture: &FixtureServer, cache: &Path) -> GatewayConfig {
    let mut config = common::config(&[format!("big={}", fixture.url())]);
    config.embedding_cache = Some(cache.to_owned());
    // The file is keyed by the files of the model the gateway runs.
    config.model_dir = switchyard_testkit::model_dir();
    config
}

/// What one start of the gateway showed: the filtered list over MCP, the scores behind it,
/// and what it embedded.
#[derive(Debug)]
struct Start {
    listed: Vec<String>,
    ranked: Vec<Ranked>,
    counts: switchyard_mcp_gateway::gateway::EmbeddingCounts,
}

/// Starts a gateway, waits until its catalog of `count` tools is embedded, lists the tools
/// for [`QUERY`] over MCP, stops it.
async fn start_once(config: &GatewayConfig, count: usize) -> Start {
    let running = common::start(config, Stores::in_memory(), Some(common::embedder())).await;
    // Two shared cores and an unoptimised gateway: embedding a few hundred tools may take a while.
    eventually(Duration::from_secs(300), "catalog embedded", || async {
        let catalog = running.gateway.catalog();
        if catalog.len() == count && catalog.embedded {
            Ok(())
        } else {
            Err(format!("{} of {count} tools, embedded: {}", catalog.len(), catalog.embedded))
        }
    })
    .await;
    let client = mcp::client(&running.mcp_url()).await;
    let mut params = CallToolRequestParams::new("set_context");
    params.arguments = json!({"query": QUERY}).as_object().cloned();
    client.call_tool(params).await.expect("set_context");
    let listed = client.list_tools(None).await.expect("tools/list").tools.iter().map(|t| t.name.to_string()).collect();
    let embedding = common::embedder().embed(&[QUERY]).unwrap().remove(0);
    let ranked = running.gateway.catalog().rank(QUERY, Some(&embedding), 20);
    let counts = running.gateway.embedding_counts();
    let _ = client.cancel().await;
    running.stop().await;
    Start { listed, ranked, counts }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_every_embedding_from_the_file_and_ranks_identically() {
    const COUNT: usize = 150;
    let fixture = FixtureServer::start(tools(COUNT)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache").join("embeddings.bin");
    let config = cached_config(&fixture, &cache);

    let cold = start_once(&config, COUNT).await;
    assert_eq!((cold.counts.loaded_from_file, cold.counts.embedded), (0, COUNT as u64), "{cold:?}");
    assert!(cache.is_file(), "the file is written after the fill");
    assert_eq!(cold.listed.first().map(String::as_str), Some("set_context"));
    assert_eq!(cold.listed.len(), 9, "set_context and the top 8: {:?}", cold.listed);
    assert!(cold.listed.iter().any(|t| t.starts_with("big__AI2sql_")), "the SQL tool is listed: {:?}", cold.listed);
    assert!(cold.ranked.iter().all(|r| r.embedding != 0.0), "the semantic signal is on: {:?}", cold.ranked);

    let warm = start_once(&config, COUNT).await;
    assert_eq!((warm.counts.loaded_from_file, warm.counts.embedded), (COUNT, 0), "nothing embedded: {warm:?}");
    assert_eq!(warm.listed, cold.listed, "the same tools in the same order");
    assert_eq!(warm.ranked, cold.ranked, "the same scores, to the bit");

    // A catalog that grew embeds only the new tools, and the file keeps all of them.
    fixture.set_tools(tools(COUNT + 10)).await;
    let grown = start_once(&config, COUNT + 10).await;
    assert_eq!((grown.counts.loaded_from_file, grown.counts.embedded), (COUNT, 10), "{grown:?}");
    let model = ModelDigest::of_dir(&switchyard_testkit::model_dir()).unwrap();
    assert_eq!(cache_file::read(&cache, &model, 384).unwrap().len(), COUNT + 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_truncated_or_foreign_file_is_ignored_and_rewritten() {
    const COUNT: usize = 40;
    let fixture = FixtureServer::start(tools(COUNT)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("embeddings.bin");
    let config = cached_config(&fixture, &cache);
    let model = ModelDigest::of_dir(&switchyard_testkit::model_dir()).unwrap();

    // Not a cache at all.
    std::fs::write(&cache, b"this is not an embedding cache").unwrap();
    let reference = start_once(&config, COUNT).await;
    assert_eq!((reference.counts.loaded_from_file, reference.counts.embedded), (0, COUNT as u64));
    let good = std::fs::read(&cache).unwrap();
    assert_eq!(cache_file::read(&cache, &model, 384).unwrap().len(), COUNT, "rewritten whole");

    // Cut short, as by a disk filling up under another writer.
    std::fs::write(&cache, &good[..good.len() / 2]).unwrap();
    let truncated = start_once(&config, COUNT).await;
    assert_eq!((truncated.counts.loaded_from_file, truncated.counts.embedded), (0, COUNT as u64));
    assert_eq!(truncated.ranked, reference.ranked);

    // Another model's vectors for the very same texts (all zero here): never used.
    let entries = cache_file::read(&cache, &model, 384).unwrap();
    let zeros = vec![0.0f32; 384];
    let foreign = ModelDigest::from_bytes([0xAB; 32]);
    cache_file::write(&cache, &foreign, 384, entries.iter().map(|(text, _)| (text.as_str(), zeros.as_slice())))
        .unwrap();
    let other_model = start_once(&config, COUNT).await;
    assert_eq!((other_model.counts.loaded_from_file, other_model.counts.embedded), (0, COUNT as u64));
    assert_eq!(other_model.ranked, reference.ranked, "no foreign vector reached the ranking");
    assert_eq!(other_model.listed, reference.listed);

    // And the file it left is this model's again: the next start embeds nothing.
    let warm = start_once(&config, COUNT).await;
    assert_eq!((warm.counts.loaded_from_file, warm.counts.embedded), (COUNT, 0));
    assert_eq!(warm.ranked, reference.ranked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_cache_path_is_logged_and_the_gateway_serves() {
    const COUNT: usize = 20;
    let fixture = FixtureServer::start(tools(COUNT)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be: reading and writing it both fail.
    let cache = dir.path().join("embeddings.bin");
    std::fs::create_dir(&cache).unwrap();
    let config = cached_config(&fixture, &cache);
    let start = start_once(&config, COUNT).await;
    assert_eq!(start.counts.embedded, COUNT as u64);
    assert_eq!(start.listed.len(), 9);
    assert!(cache.is_dir(), "left as it was");
}
