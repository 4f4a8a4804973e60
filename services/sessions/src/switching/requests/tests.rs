use super::*;

use crate::domain::test_role as role;

/// A role lookup that knows every well-formed id and names `field` otherwise.
fn lookup(field: &'static str) -> impl FnOnce(&str) -> Result<Role, SessionsError> {
    move |id| Ok(role(parse_role_id(id, field)?.as_str()))
}

/// The field an invalid-argument error names.
fn field<T: std::fmt::Debug>(result: Result<T, SessionsError>) -> String {
    match result {
        Err(SessionsError::InvalidArgument { field, .. }) => field,
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

fn limits() -> SessionLimits {
    SessionLimits {
        max_query_bytes: 10,
        max_message_bytes: 8,
        max_messages_per_append: 2,
        max_metadata_entries: 2,
        ..SessionLimits::default()
    }
}

fn session(change: impl FnOnce(&mut NewSession)) -> Result<ValidSession, SessionsError> {
    let mut request = NewSession { session_id: "s-1".to_owned(), ..NewSession::default() };
    change(&mut request);
    request.validate(&limits(), lookup("initial_role_id"))
}

#[test]
fn a_new_session_takes_defaults_for_what_it_leaves_out() {
    let valid = session(|_| {}).unwrap();
    assert_eq!((valid.id.as_str(), valid.chosen_id), ("s-1", true));
    assert_eq!(valid.role.id.as_str(), GENERAL_ASSISTANT);
    assert_eq!(valid.ttl, limits().default_ttl);
    let generated = session(|r| r.session_id.clear()).unwrap();
    assert!(!generated.chosen_id);
    assert!(!generated.id.as_str().is_empty());
}

#[test]
fn a_new_session_names_its_bad_id_and_role() {
    assert_eq!(field(session(|r| r.session_id = "a b".to_owned())), "session_id");
    assert_eq!(field(session(|r| r.initial_role_id = "Not A Role".to_owned())), "initial_role_id");
    assert_eq!(session(|r| r.initial_role_id = "tech-expert".to_owned()).unwrap().role.id.as_str(), "tech-expert");
}

#[test]
fn a_new_sessions_ttl_is_bounded() {
    let max = limits().max_ttl;
    assert_eq!(session(|r| r.ttl = Some(MIN_TTL)).unwrap().ttl, MIN_TTL);
    assert_eq!(session(|r| r.ttl = Some(max)).unwrap().ttl, max);
    assert_eq!(field(session(|r| r.ttl = Some(Duration::from_millis(999)))), "ttl");
    let err = session(|r| r.ttl = Some(max + Duration::from_secs(1))).unwrap_err();
    assert!(err.to_string().starts_with("ttl: must be between 1s and "), "{err}");
}

#[test]
fn a_new_sessions_metadata_is_bounded() {
    let entries = |n: usize| (0..n).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    assert_eq!(session(|r| r.metadata = entries(2)).unwrap().metadata.len(), 2);
    assert_eq!(field(session(|r| r.metadata = entries(3))), "metadata");
    let one = |key: String, value: String| BTreeMap::from([(key, value)]);
    assert_eq!(field(session(|r| r.metadata = one(String::new(), "v".to_owned()))), "metadata[]");
    let long_key = "k".repeat(MAX_METADATA_KEY_BYTES + 1);
    assert_eq!(field(session(|r| r.metadata = one(long_key.clone(), "v".to_owned()))), format!("metadata[{long_key}]"));
    let long_value = "v".repeat(MAX_METADATA_VALUE_BYTES + 1);
    assert_eq!(field(session(|r| r.metadata = one("k".to_owned(), long_value))), "metadata[k]");
    let at_limit = one("k".repeat(MAX_METADATA_KEY_BYTES), "v".repeat(MAX_METADATA_VALUE_BYTES));
    assert!(session(|r| r.metadata = at_limit).is_ok());
}

#[test]
fn a_query_is_checked_and_resolves_its_forced_role() {
    let query = |text, extra, forced| Query::new(text, extra, forced, &limits(), lookup("force_role_id"));
    let plain = query("hello", Some("be brief"), None).unwrap();
    assert_eq!((plain.text, plain.custom_instructions), ("hello", Some("be brief")));
    assert!(plain.forced.is_none());
    assert!(query("hello", None, Some("")).unwrap().forced.is_none(), "an empty forced role forces none");
    let forced = query("hello", None, Some("finance-expert")).unwrap().forced.unwrap();
    assert_eq!(forced.id.as_str(), "finance-expert");
    assert_eq!(field(query(" ", None, None)), "query");
    assert_eq!(field(query("far too long", None, None)), "query");
    assert_eq!(field(query("hello", Some("far too long"), None)), "custom_instructions");
    assert_eq!(field(query("hello", None, Some("Bad Role"))), "force_role_id");
}

#[test]
fn a_manual_reason_is_trimmed_cut_or_defaulted() {
    assert_eq!(manual_reason("  budget talk "), "budget talk");
    assert_eq!(manual_reason("   "), DEFAULT_MANUAL_REASON);
    let long = manual_reason(&"x".repeat(MAX_MANUAL_REASON_CHARS + 10));
    assert_eq!(long.chars().count(), MAX_MANUAL_REASON_CHARS + 1, "cut, with an ellipsis");
    assert!(long.ends_with('…'));
}

fn message(role: Option<MessageRole>, content: &str, role_id: &str) -> NewMessage {
    NewMessage { role, content: content.to_owned(), role_id: role_id.to_owned() }
}

#[test]
fn a_batch_holds_one_to_the_limit_of_messages() {
    let user = || message(Some(MessageRole::User), "hi", "");
    assert!(MessageBatch::new(vec![user(), user()], &limits()).is_ok());
    assert_eq!(field(MessageBatch::new(Vec::new(), &limits())), "messages");
    assert_eq!(field(MessageBatch::new(vec![user(), user(), user()], &limits())), "messages");
}

#[test]
fn each_message_is_checked_and_named_by_its_index() {
    let current = RoleId::parse("tech-expert").unwrap();
    let check = |second: NewMessage| {
        let first = message(Some(MessageRole::User), "hi", "");
        MessageBatch::new(vec![first, second], &limits()).unwrap().into_messages(&current, &limits(), 42)
    };
    let stored = check(message(Some(MessageRole::Assistant), "hello", "finance-expert")).unwrap();
    assert_eq!(stored[0].role_id, "tech-expert", "no role id: the session's role");
    assert_eq!((stored[1].role, stored[1].role_id.as_str()), (MessageRole::Assistant, "finance-expert"));
    assert!(stored.iter().all(|m| m.created_at_ms == 42 && m.seq == 0));
    assert_eq!(field(check(message(None, "hello", ""))), "messages[1].role");
    assert_eq!(field(check(message(Some(MessageRole::User), "  ", ""))), "messages[1].content");
    assert_eq!(field(check(message(Some(MessageRole::User), "much too long", ""))), "messages[1].content");
    assert_eq!(field(check(message(Some(MessageRole::User), "hello", "Bad Role"))), "messages[1].role_id");
}

#[test]
fn an_append_id_names_every_message_of_its_batch_and_is_checked() {
    let current = RoleId::parse("tech-expert").unwrap();
    let user = || message(Some(MessageRole::User), "hi", "");
    let batch = |id: &str| MessageBatch::new(vec![user(), user()], &limits()).unwrap().named(id.to_owned());
    let stored = batch("resp-01J:turn.2_a").unwrap().into_messages(&current, &limits(), 42).unwrap();
    assert!(stored.iter().all(|m| m.append_id == "resp-01J:turn.2_a"), "{stored:?}");
    let unnamed = batch("").unwrap().into_messages(&current, &limits(), 42).unwrap();
    assert!(unnamed.iter().all(|m| m.append_id.is_empty()));
    // A quote, a backslash, a NUL, a space or a non-ASCII letter would need JSON escaping.
    for bad in ["a\"b", "a\\b", "a\0b", "a b", "é"] {
        assert_eq!(field(batch(bad)), "append_id", "{bad:?}");
    }
    assert_eq!(field(batch(&"x".repeat(MAX_APPEND_ID_CHARS + 1))), "append_id");
    assert!(batch(&"x".repeat(MAX_APPEND_ID_CHARS)).is_ok());
}
