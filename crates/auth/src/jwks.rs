//! Token signing keys from a JSON Web Key Set: public keys only (RSA, EC, Ed25519), found by
//! `kid`, and a JWKS file re-read when it changes, so a key rotated in a mounted secret needs
//! no restart. Checking a token's claims is the caller's: the edge and the MCP gateway want
//! different ones.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, Instant, SystemTime},
};

use jsonwebtoken::{DecodingKey, jwk::JwkSet};

/// How often a JWKS file's modification time is looked at.
pub const FILE_RECHECK: Duration = Duration::from_secs(10);

/// The verification keys of one JWKS.
#[derive(Clone)]
pub struct KeySet {
    by_kid: HashMap<String, DecodingKey>,
    /// The one key of a set with a single key, for tokens without `kid`.
    only: Option<DecodingKey>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet").field("kids", &self.by_kid.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl KeySet {
    /// Parses a JWKS document. A symmetric (`oct`) key is refused: whoever can read a JWKS
    /// must not be able to sign tokens with it.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let set: JwkSet = serde_json::from_str(text).map_err(|err| anyhow::anyhow!("not a JWKS: {err}"))?;
        let mut by_kid = HashMap::new();
        let mut all = Vec::new();
        for (i, jwk) in set.keys.iter().enumerate() {
            let key = DecodingKey::from_jwk(jwk).map_err(|err| anyhow::anyhow!("keys[{i}] does not load: {err}"))?;
            anyhow::ensure!(
                key.family() != jsonwebtoken::AlgorithmFamily::Hmac,
                "keys[{i}] is a shared secret (kty `oct`); a JWKS here holds public keys only"
            );
            if let Some(kid) = &jwk.common.key_id {
                by_kid.insert(kid.clone(), key.clone());
            }
            all.push(key);
        }
        anyhow::ensure!(!all.is_empty(), "the JWKS holds no keys");
        let only = if all.len() == 1 { all.pop() } else { None };
        Ok(Self { by_kid, only })
    }

    /// The key a token names by `kid`; a token without one may only use a one-key set.
    pub fn key(&self, kid: Option<&str>) -> Option<&DecodingKey> {
        match kid {
            Some(kid) => self.by_kid.get(kid),
            None => self.only.as_ref(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_kid.len().max(usize::from(self.only.is_some()))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A JWKS file, re-read (at most every [`FILE_RECHECK`]) when its modification time changes;
/// a file that no longer parses keeps the keys it had.
pub struct JwksFile {
    path: PathBuf,
    state: Mutex<FileState>,
}

struct FileState {
    keys: KeySet,
    modified: Option<SystemTime>,
    checked: Instant,
}

impl std::fmt::Debug for JwksFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksFile").field("path", &self.path).finish_non_exhaustive()
    }
}

impl JwksFile {
    /// Loads the file; it must hold at least one public key.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let (keys, modified) = read(path)?;
        Ok(Self { path: path.to_owned(), state: Mutex::new(FileState { keys, modified, checked: Instant::now() }) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key a token names, from the file as it is now (re-read if it changed).
    pub fn key(&self, kid: Option<&str>) -> Option<DecodingKey> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() >= FILE_RECHECK {
            state.checked = Instant::now();
            self.reload_if_changed(&mut state);
        }
        state.keys.key(kid).cloned()
    }

    fn reload_if_changed(&self, state: &mut FileState) {
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if modified == state.modified {
            return;
        }
        match read(&self.path) {
            Ok((keys, modified)) => {
                tracing::info!(path = %self.path.display(), keys = keys.len(), "reloaded the JWKS file");
                state.keys = keys;
                state.modified = modified;
            }
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err, "the JWKS file changed but does not load");
            }
        }
    }
}

fn read(path: &Path) -> anyhow::Result<(KeySet, Option<SystemTime>)> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path).map_err(|err| anyhow::anyhow!("reading {}: {err}", path.display()))?;
    let keys = KeySet::parse(&text).map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
    Ok((keys, modified))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_secrets_and_empty_sets_are_refused() {
        let oct = r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"}]}"#;
        assert!(KeySet::parse(oct).unwrap_err().to_string().contains("shared secret"));
        assert!(KeySet::parse(r#"{"keys":[]}"#).unwrap_err().to_string().contains("no keys"));
        assert!(KeySet::parse("[]").is_err());
    }

    #[test]
    fn keys_are_found_by_kid_and_a_lone_key_without() {
        let ec = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"a","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#;
        let set = KeySet::parse(ec).unwrap();
        assert!(set.key(Some("a")).is_some() && set.key(Some("b")).is_none() && set.key(None).is_some());
        assert_eq!(set.len(), 1);
    }
}
