//! Embeddings kept on disk between runs (the MCP gateway's `--embedding-cache`, the tool eval's
//! `--embedding-cache`), so a restart does not run the model over texts it has embedded before.
//!
//! One binary file, always written whole to a temporary file beside it and renamed over it, so
//! a crash leaves the old file or the new one, never a torn one:
//!
//! ```text
//! magic "SYEMBED\0" · version u32 · model digest [32] · dimensions u32 · count u64
//! count × (text length u32 · text UTF-8 · dimensions × f32)
//! SHA-256 of everything above [32]
//! ```
//!
//! Integers and floats are little-endian. Vectors are keyed by the model's identity (a digest of
//! its config, tokenizer and weights: another model, or the same one fine-tuned, never reuses
//! them) and the exact text. The trailing digest catches truncation and corrupted bytes; a file
//! that fails any check is refused whole, so callers never get a wrong vector, only none.

use std::{
    fs,
    io::{self, Read, Write},
    path::{Path, PathBuf},
};

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"SYEMBED\0";
const VERSION: u32 = 1;
const DIGEST_BYTES: usize = 32;
/// Magic, version, model digest, dimensions, count.
const HEADER_BYTES: usize = 8 + 4 + DIGEST_BYTES + 4 + 8;
/// The model files that decide its vectors.
const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// The directory a service keeps its own embedding files in when not told where:
/// `$SWITCHYARD_CACHE_DIR`, else `$XDG_CACHE_HOME/switchyard`, else `~/.cache/switchyard`;
/// `None` when none of those is set.
pub fn default_dir() -> Option<PathBuf> {
    std::env::var_os("SWITCHYARD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|dir| PathBuf::from(dir).join("switchyard")))
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/switchyard")))
}

/// A model's identity: SHA-256 over its config, tokenizer and weight files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelDigest([u8; DIGEST_BYTES]);

impl ModelDigest {
    /// Digests a sentence-transformers folder's files (reads the ~90 MB of weights once: a
    /// fraction of a second, against minutes of embedding a large catalog).
    pub fn of_dir(dir: &Path) -> io::Result<Self> {
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        for name in MODEL_FILES {
            let path = dir.join(name);
            let mut file = fs::File::open(&path).map_err(|err| with_path(err, &path))?;
            // Name and length first, so moving bytes from one file to another changes the digest.
            hasher.update(name.as_bytes());
            hasher.update(file.metadata()?.len().to_le_bytes());
            loop {
                let read = file.read(&mut buffer)?;
                if read == 0 {
                    break;
                }
                hasher.update(&buffer[..read]);
            }
        }
        Ok(Self(hasher.finalize().into()))
    }

    /// A digest from raw bytes (tests, and callers that identify a model otherwise).
    /// The digest itself, for keys that add to it (the eval adds the single-text kernels).
    pub fn as_bytes(&self) -> &[u8; DIGEST_BYTES] {
        &self.0
    }

    pub fn from_bytes(bytes: [u8; DIGEST_BYTES]) -> Self {
        Self(bytes)
    }

    /// The first bytes in hex, for logs.
    pub fn short(&self) -> String {
        self.0[..6].iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

/// Why a cache file was not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheFileError {
    #[error("no cache file yet")]
    Missing,
    #[error("reading the cache file: {0}")]
    Io(#[from] io::Error),
    #[error("not an embedding cache file")]
    NotACache,
    #[error("written by format version {0}, this build reads {VERSION}")]
    Version(u32),
    #[error("made with another model ({found}, the loaded model is {expected})")]
    OtherModel { found: String, expected: String },
    #[error("vectors of {found} dimensions, the model has {expected}")]
    Dimensions { found: usize, expected: usize },
    #[error("truncated or corrupt: {0}")]
    Corrupt(&'static str),
}

/// One cached text and its vector.
pub type Entry = (String, Vec<f32>);

/// Reads the vectors at `path` if they were made by `model` with `dimensions`; any other file
/// is an error and nothing of it is returned.
pub fn read(path: &Path, model: &ModelDigest, dimensions: usize) -> Result<Vec<Entry>, CacheFileError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(CacheFileError::Missing),
        Err(err) => return Err(err.into()),
    };
    decode(&bytes, model, dimensions)
}

fn decode(bytes: &[u8], model: &ModelDigest, dimensions: usize) -> Result<Vec<Entry>, CacheFileError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(CacheFileError::NotACache);
    }
    if bytes.len() < HEADER_BYTES + DIGEST_BYTES {
        return Err(CacheFileError::Corrupt("shorter than a header"));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - DIGEST_BYTES);
    if Sha256::digest(body)[..] != *trailer {
        return Err(CacheFileError::Corrupt("checksum mismatch"));
    }
    let mut input = Cursor { bytes: body, at: MAGIC.len() };
    let version = input.u32()?;
    if version != VERSION {
        return Err(CacheFileError::Version(version));
    }
    let found = ModelDigest(input.take(DIGEST_BYTES)?.try_into().map_err(|_| CacheFileError::Corrupt("digest"))?);
    if found != *model {
        return Err(CacheFileError::OtherModel { found: found.short(), expected: model.short() });
    }
    let found_dimensions = input.u32()? as usize;
    if found_dimensions != dimensions {
        return Err(CacheFileError::Dimensions { found: found_dimensions, expected: dimensions });
    }
    let count = input.u64()?;
    // Each record takes at least its length field and its vector: a count the body cannot
    // hold is corruption, not a reason to reserve memory.
    let record_floor = 4 + dimensions as u64 * 4;
    if count.saturating_mul(record_floor) > (body.len() - input.at) as u64 {
        return Err(CacheFileError::Corrupt("more records than bytes"));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let length = input.u32()? as usize;
        let text = std::str::from_utf8(input.take(length)?).map_err(|_| CacheFileError::Corrupt("text not UTF-8"))?;
        let vector =
            input.take(dimensions * 4)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        entries.push((text.to_owned(), vector));
    }
    if input.at != body.len() {
        return Err(CacheFileError::Corrupt("bytes after the last record"));
    }
    Ok(entries)
}

/// Reads a decoded body, refusing to run past its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CacheFileError> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or(CacheFileError::Corrupt("record runs past the end"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, CacheFileError> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self) -> Result<u64, CacheFileError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }
}

/// Writes `entries` (vectors of `dimensions` made by `model`) to `path`, replacing it
/// atomically: a temporary file beside it, synced, then renamed over it.
pub fn write<'a>(
    path: &Path,
    model: &ModelDigest,
    dimensions: usize,
    entries: impl ExactSizeIterator<Item = (&'a str, &'a [f32])>,
) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|err| with_path(err, parent))?;
    }
    let temporary = temporary_path(path);
    let written = write_file(&temporary, model, dimensions, entries)
        .and_then(|()| fs::rename(&temporary, path).map_err(|err| with_path(err, path)));
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written?;
    // The rename is durable once the directory is synced; not every platform can open one.
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && let Ok(dir) = fs::File::open(parent)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A temporary name beside `path`, unique to this write: processes sharing the file (replicas
/// on one volume, where each may be process 1 of its container) never write into each other's.
fn temporary_path(path: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{}-{nanos}.tmp", std::process::id()));
    path.with_file_name(name)
}

fn write_file<'a>(
    path: &Path,
    model: &ModelDigest,
    dimensions: usize,
    entries: impl ExactSizeIterator<Item = (&'a str, &'a [f32])>,
) -> io::Result<()> {
    let file = fs::File::create(path).map_err(|err| with_path(err, path))?;
    let mut out = Checksummed { inner: io::BufWriter::new(file), hasher: Sha256::new() };
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&model.0)?;
    out.write_all(&u32::try_from(dimensions).map_err(io::Error::other)?.to_le_bytes())?;
    out.write_all(&(entries.len() as u64).to_le_bytes())?;
    for (text, vector) in entries {
        if vector.len() != dimensions {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a vector of {} dimensions in a {dimensions}-dimension cache", vector.len()),
            ));
        }
        out.write_all(&u32::try_from(text.len()).map_err(io::Error::other)?.to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        for value in vector {
            out.write_all(&value.to_le_bytes())?;
        }
    }
    let Checksummed { mut inner, hasher } = out;
    inner.write_all(&hasher.finalize())?;
    inner.into_inner().map_err(|err| err.into_error())?.sync_all()
}

/// A writer that digests what passes through it.
struct Checksummed<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.hasher.update(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MODEL: ModelDigest = ModelDigest([7; DIGEST_BYTES]);

    fn sample() -> Vec<Entry> {
        vec![
            ("a tool that converts text to SQL".to_owned(), vec![0.5, -0.25, 1.0]),
            (String::new(), vec![0.0, f32::MIN_POSITIVE, -0.0]),
            ("ünïcode ✓".to_owned(), vec![1e-7, 3.0, -2.5]),
        ]
    }

    fn written(entries: &[Entry]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("embeddings.bin");
        write(&path, &MODEL, 3, entries.iter().map(|(t, v)| (t.as_str(), v.as_slice()))).unwrap();
        (dir, path)
    }

    #[test]
    fn round_trips_exact_bits() {
        let (_dir, path) = written(&sample());
        let read_back = read(&path, &MODEL, 3).unwrap();
        assert_eq!(read_back.len(), 3);
        for ((text, vector), (expected_text, expected)) in read_back.iter().zip(sample()) {
            assert_eq!(*text, expected_text);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(vector), bits(&expected));
        }
        let files: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(files, ["embeddings.bin"], "the temporary file is renamed away");
    }

    #[test]
    fn an_empty_cache_round_trips() {
        let (_dir, path) = written(&[]);
        assert!(read(&path, &MODEL, 3).unwrap().is_empty());
    }

    #[test]
    fn a_missing_file_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(read(&dir.path().join("none.bin"), &MODEL, 3), Err(CacheFileError::Missing)));
    }

    #[test]
    fn another_model_or_dimension_is_refused() {
        let (_dir, path) = written(&sample());
        let other = ModelDigest([8; DIGEST_BYTES]);
        assert!(matches!(read(&path, &other, 3), Err(CacheFileError::OtherModel { .. })));
        assert!(matches!(read(&path, &MODEL, 4), Err(CacheFileError::Dimensions { found: 3, expected: 4 })));
    }

    #[test]
    fn every_truncation_is_refused() {
        let (_dir, path) = written(&sample());
        let bytes = fs::read(&path).unwrap();
        for length in 0..bytes.len() {
            assert!(decode(&bytes[..length], &MODEL, 3).is_err(), "truncated to {length} bytes was accepted");
        }
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let (_dir, path) = written(&sample());
        let bytes = fs::read(&path).unwrap();
        for at in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= 0x10;
            assert!(decode(&corrupt, &MODEL, 3).is_err(), "a flipped byte at {at} was accepted");
        }
    }

    #[test]
    fn other_files_are_not_caches() {
        assert!(matches!(decode(b"{\"json\": true}", &MODEL, 3), Err(CacheFileError::NotACache)));
        assert!(matches!(decode(b"", &MODEL, 3), Err(CacheFileError::NotACache)));
    }

    #[test]
    fn a_record_count_beyond_the_file_is_corrupt_not_an_allocation() {
        // A well-formed header and checksum claiming more records than there are bytes.
        let mut body = Vec::new();
        body.extend_from_slice(MAGIC);
        body.extend_from_slice(&VERSION.to_le_bytes());
        body.extend_from_slice(&MODEL.0);
        body.extend_from_slice(&3u32.to_le_bytes());
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut file = body.clone();
        file.extend_from_slice(&Sha256::digest(&body));
        assert!(matches!(decode(&file, &MODEL, 3), Err(CacheFileError::Corrupt(_))));
    }

    #[test]
    fn a_vector_of_the_wrong_size_is_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("embeddings.bin");
        let wrong = [("text", [1.0f32, 2.0].as_slice())];
        assert!(write(&path, &MODEL, 3, wrong.into_iter()).is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "no file, no temporary file left");
    }

    #[test]
    fn a_rewrite_replaces_the_file_whole() {
        let (_dir, path) = written(&sample());
        let fewer = [("only this", [1.0f32, 2.0, 3.0].as_slice())];
        write(&path, &MODEL, 3, fewer.into_iter()).unwrap();
        let read_back = read(&path, &MODEL, 3).unwrap();
        assert_eq!(read_back, vec![("only this".to_owned(), vec![1.0, 2.0, 3.0])]);
    }

    #[test]
    fn the_digest_covers_every_model_file() {
        let dir = tempfile::tempdir().unwrap();
        for name in MODEL_FILES {
            fs::write(dir.path().join(name), name).unwrap();
        }
        let first = ModelDigest::of_dir(dir.path()).unwrap();
        assert_eq!(first, ModelDigest::of_dir(dir.path()).unwrap());
        for name in MODEL_FILES {
            fs::write(dir.path().join(name), "changed").unwrap();
            assert_ne!(first, ModelDigest::of_dir(dir.path()).unwrap(), "{name} changed, digest did not");
            fs::write(dir.path().join(name), name).unwrap();
        }
        fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
        assert!(ModelDigest::of_dir(dir.path()).is_err());
    }
}
