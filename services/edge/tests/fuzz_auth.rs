//! Property-based fuzzing of the edge's credentials, in process: JWT bearer tokens (any text,
//! tokens of three parts with hostile headers and payloads, and tokens signed with the right
//! key whose claims are hostile) and the JWKS documents their public keys come from. No panic;
//! a caller whose tenant and user are valid ids, or a 401 (not a valid token) or 403 (a valid
//! token naming no acceptable tenant or user); each case within the budget.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use proptest::prelude::*;
use switchyard_auth::KeySet;
use switchyard_edge::auth::jwt::{JwtConfig, JwtVerifier};
use switchyard_kit::Secret;
use switchyard_testkit::fuzz::{
    array, config, hostile_text, json_leaf, json_number, json_string, json_value, member, object, one_of, timed,
};

const SECRET: &str = "fuzzing-secret";

fn verifier() -> JwtVerifier {
    JwtVerifier::new(JwtConfig {
        hs256_secret: Some(Secret::new(SECRET)),
        issuer: Some("https://issuer.example".to_owned()),
        tenant_claim: "tenant".to_owned(),
        ..JwtConfig::default()
    })
    .expect("an HS256 verifier")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// Claims with every value hostile; `exp` usually valid, so the claims are read.
fn claims() -> BoxedStrategy<String> {
    let exp = prop_oneof![4 => Just((now() + 600).to_string()), 1 => json_number(), 1 => json_leaf()].boxed();
    object(vec![
        member("exp", exp),
        member("iss", one_of(&["https://issuer.example", "https://evil.example"])),
        member("tenant", prop_oneof![one_of(&["acme", "default", "a:b", ""]), json_string()].boxed()),
        member("sub", prop_oneof![one_of(&["ada", "ada@example.com", "x y"]), json_string()].boxed()),
        member("switchyard_admin", json_leaf()),
        member("scope", prop_oneof![one_of(&["switchyard:admin", "read switchyard:admin", ""]), json_value()].boxed()),
        member("aud", json_value()),
        member("nbf", json_number()),
    ])
}

/// A token of three dot-separated parts: hostile JSON (or bytes) base64url-encoded, a random
/// signature; some with `alg: none` or algorithms the edge does not take.
fn unsigned_token() -> BoxedStrategy<String> {
    let header = object(vec![
        member("alg", one_of(&["HS256", "RS256", "none", "ES256", "EdDSA", "HS512"])),
        member("typ", one_of(&["JWT"])),
        member("kid", json_string()),
        member("jku", json_string()),
    ]);
    let part = prop_oneof![
        header.prop_map(|json| URL_SAFE_NO_PAD.encode(json)),
        claims().prop_map(|json| URL_SAFE_NO_PAD.encode(json)),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|bytes| URL_SAFE_NO_PAD.encode(bytes)),
        "[A-Za-z0-9_=+/.-]{0,40}",
    ];
    proptest::collection::vec(part, 1..5).prop_map(|parts| parts.join(".")).boxed()
}

/// A JWKS document: keys of every type with hostile members.
fn jwks() -> BoxedStrategy<String> {
    let key = object(vec![
        member("kty", one_of(&["RSA", "EC", "OKP", "oct", "XYZ"])),
        member("kid", json_string()),
        member("alg", one_of(&["RS256", "ES256", "EdDSA", "HS256"])),
        member("use", one_of(&["sig", "enc"])),
        member("n", prop_oneof![Just("\"AQAB\"".to_owned()), "\"[A-Za-z0-9_-]{0,700}\"".boxed(), json_leaf()].boxed()),
        member("e", prop_oneof![Just("\"AQAB\"".to_owned()), json_leaf()].boxed()),
        member("crv", one_of(&["P-256", "P-384", "Ed25519", "X25519", "secp256k1"])),
        member("x", prop_oneof!["\"[A-Za-z0-9_-]{0,90}\"".boxed(), json_leaf()].boxed()),
        member("y", prop_oneof!["\"[A-Za-z0-9_-]{0,90}\"".boxed(), json_leaf()].boxed()),
        member("k", json_string()),
    ]);
    object(vec![member("keys", array(key, 4))])
}

/// What any verification must come to.
fn check(
    outcome: Result<switchyard_edge::auth::Caller, switchyard_edge::error::ApiError>,
) -> Result<(), TestCaseError> {
    match outcome {
        Ok(caller) => {
            prop_assert!(!caller.tenant.as_str().is_empty() && caller.tenant.as_str().len() <= 64);
            prop_assert!(caller.user.as_ref().is_none_or(|user| user.as_str().len() <= 128));
        }
        Err(error) => prop_assert!(matches!(error.status(), 401 | 403), "{:?}", error),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_token_is_a_caller_or_refused(token in prop_oneof![unsigned_token(), hostile_text()]) {
        let verifier = verifier();
        check(timed("verifying a token", || verifier.verify(&token)))?;
    }

    /// Signed with the right key, so the claims themselves are read.
    #[test]
    fn any_signed_claims_are_a_caller_or_refused(claims in claims()) {
        let Ok(claims) = serde_json::from_str::<serde_json::Value>(&claims) else { return Ok(()) };
        let token = encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET.as_bytes()))
            .expect("claims that are JSON encode");
        let verifier = verifier();
        check(timed("verifying a signed token", || verifier.verify(&token)))?;
    }

    #[test]
    fn any_jwks_loads_or_is_refused(document in prop_oneof![jwks(), json_value(), hostile_text()]) {
        if let Ok(keys) = timed("reading a JWKS", || KeySet::parse(&document)) {
            prop_assert!(!keys.is_empty());
        }
    }
}
