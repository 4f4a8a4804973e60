//! An embedding cache for the eval, so sweeping weights does not re-run the model over 16,000
//! texts each time. One binary file: a header naming the model (a fingerprint of its files),
//! then `(text, vector)` records. Entries are keyed by the exact text, so there is nothing to
//! collide; a file made with another model, or unreadable, is ignored and rewritten.

use std::{
    collections::HashMap,
    fs,
    hash::{DefaultHasher, Hash, Hasher},
    io::{self, Read, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;
use switchyard_models::Embedder;

const MAGIC: &[u8; 8] = b"SYEMB\x00\x00\x01";
/// Texts embedded per model call (the embedder groups them by length within a call).
const BATCH: usize = 256;

pub struct EmbeddingCache {
    path: Option<PathBuf>,
    fingerprint: u64,
    vectors: HashMap<String, Vec<f32>>,
    dirty: bool,
}

/// Identifies a model folder's contents: the small files' bytes, and the weights' size and
/// modification time (hashing 90 MB on every run would cost more than it saves); and the
/// kernels a text embedded alone runs on (`int8/avx2`, ...), which change its vector slightly.
pub fn fingerprint(model_dir: &Path, single_text_kernels: &str) -> anyhow::Result<u64> {
    let mut hasher = DefaultHasher::new();
    single_text_kernels.hash(&mut hasher);
    for name in ["config.json", "tokenizer.json"] {
        let path = model_dir.join(name);
        fs::read(&path).with_context(|| format!("reading {}", path.display()))?.hash(&mut hasher);
    }
    let weights = model_dir.join("model.safetensors");
    let meta = fs::metadata(&weights).with_context(|| format!("reading {}", weights.display()))?;
    meta.len().hash(&mut hasher);
    meta.modified().ok().hash(&mut hasher);
    Ok(hasher.finish())
}

impl EmbeddingCache {
    /// Opens the cache at `path` (none: an in-memory cache that is never saved).
    pub fn open(path: Option<PathBuf>, fingerprint: u64) -> Self {
        let vectors = path.as_deref().and_then(|p| read(p, fingerprint).ok()).unwrap_or_default();
        Self { path, fingerprint, vectors, dirty: false }
    }

    /// Embeddings of `texts`, in order, running the model only on texts not seen before.
    pub fn embed(&mut self, embedder: &Embedder, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let mut missing: Vec<&str> = texts.iter().copied().filter(|t| !self.vectors.contains_key(*t)).collect();
        missing.sort_unstable();
        missing.dedup();
        for chunk in missing.chunks(BATCH) {
            for (text, vector) in chunk.iter().zip(embedder.embed(chunk)?) {
                self.vectors.insert((*text).to_owned(), vector);
            }
            self.dirty = true;
        }
        Ok(texts.iter().map(|t| self.vectors[*t].clone()).collect())
    }

    /// Embeddings of `texts` each embedded alone, as the gateway embeds a query (the
    /// embedder's single-text path), running the model only on texts not seen before.
    pub fn embed_alone(&mut self, embedder: &Embedder, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        for text in texts {
            if !self.vectors.contains_key(*text) {
                let vector = embedder.embed(&[text])?.pop().context("no embedding")?;
                self.vectors.insert((*text).to_owned(), vector);
                self.dirty = true;
            }
        }
        Ok(texts.iter().map(|t| self.vectors[*t].clone()).collect())
    }

    /// Writes the cache back if it learned anything (to a temporary file, then renamed, so an
    /// interrupted run never leaves a torn file).
    pub fn save(&self) -> anyhow::Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        if !self.dirty {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let temporary = path.with_extension("tmp");
        let mut out = io::BufWriter::new(
            fs::File::create(&temporary).with_context(|| format!("writing {}", temporary.display()))?,
        );
        out.write_all(MAGIC)?;
        out.write_all(&self.fingerprint.to_le_bytes())?;
        out.write_all(&(self.vectors.len() as u64).to_le_bytes())?;
        for (text, vector) in &self.vectors {
            out.write_all(&(text.len() as u32).to_le_bytes())?;
            out.write_all(text.as_bytes())?;
            out.write_all(&(vector.len() as u32).to_le_bytes())?;
            for value in vector {
                out.write_all(&value.to_le_bytes())?;
            }
        }
        out.into_inner().map_err(|err| err.into_error())?.sync_all()?;
        fs::rename(&temporary, path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    }
}

fn read(path: &Path, fingerprint: u64) -> anyhow::Result<HashMap<String, Vec<f32>>> {
    let mut input = io::BufReader::new(fs::File::open(path)?);
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    anyhow::ensure!(&magic == MAGIC, "not an embedding cache");
    anyhow::ensure!(read_u64(&mut input)? == fingerprint, "made with another model");
    let count = read_u64(&mut input)?;
    let mut vectors = HashMap::with_capacity(count as usize);
    for _ in 0..count {
        let mut text = vec![0u8; read_u32(&mut input)? as usize];
        input.read_exact(&mut text)?;
        let mut bytes = vec![0u8; read_u32(&mut input)? as usize * 4];
        input.read_exact(&mut bytes)?;
        let vector = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        vectors.insert(String::from_utf8(text)?, vector);
    }
    Ok(vectors)
}

fn read_u32(input: &mut impl Read) -> io::Result<u32> {
    let mut bytes = [0u8; 4];
    input.read_exact(&mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

fn read_u64(input: &mut impl Read) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    input.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}
