//! Server-Sent Events framing (the WHATWG `text/event-stream` rules), fed with network chunks as
//! they arrive: a line or an event may be split anywhere, including between the `\r` and `\n`
//! of one line ending. Only `event:` and `data:` matter to the LLM vendors; `id:`, `retry:` and
//! comments are skipped.

/// One dispatched event: its `event:` name (empty when the vendor sent none) and its data lines
/// joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// The longest line, and the most data one event may carry: far beyond any vendor's event, small
/// enough that a server that never ends a line or an event cannot grow a reply's memory
/// without end.
pub(crate) const MAX_EVENT_BYTES: usize = 16 << 20;

/// A line or an event went past its bound; the stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a stream event or line is longer than {limit} bytes")]
pub(crate) struct EventTooLarge {
    pub limit: usize,
}

#[derive(Debug)]
pub(crate) struct SseParser {
    /// [`MAX_EVENT_BYTES`], smaller in tests.
    limit: usize,
    /// A line or an event went past `limit`.
    too_large: bool,
    /// Bytes of the line not yet terminated.
    pending: Vec<u8>,
    /// How far `pending` has been searched for a line ending.
    scanned: usize,
    /// The previous chunk ended in `\r`: a `\n` opening this one belongs to that line ending.
    after_cr: bool,
    /// The byte-order mark, allowed once at the very start, has been dealt with.
    started: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }
}

impl SseParser {
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit,
            too_large: false,
            pending: Vec::new(),
            scanned: 0,
            after_cr: false,
            started: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
        }
    }

    /// Feeds one network chunk; completed events are appended to `out`. An error once a line
    /// or an event is longer than the limit (and for every chunk after).
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        if !self.too_large {
            self.frame(chunk, out);
        }
        if self.too_large {
            self.pending = Vec::new();
            self.data = String::new();
            return Err(EventTooLarge { limit: self.limit });
        }
        Ok(())
    }

    fn frame(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) {
        if chunk.is_empty() {
            return; // It must not forget a `\r` that the next chunk's `\n` completes.
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        self.pending.extend_from_slice(chunk);
        if !self.started {
            if self.pending.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.pending) {
                return;
            }
            self.started = true;
            if self.pending.starts_with(b"\xEF\xBB\xBF") {
                self.pending.drain(..3);
            }
        }

        let mut line_start = 0;
        let mut at = self.scanned;
        while at < self.pending.len() {
            match self.pending[at] {
                b'\n' => {
                    self.take_line(line_start, at, out);
                    at += 1;
                    line_start = at;
                }
                b'\r' => {
                    self.take_line(line_start, at, out);
                    at += 1;
                    match self.pending.get(at) {
                        Some(b'\n') => at += 1,
                        Some(_) => {}
                        // The `\n` may open the next chunk.
                        None => self.after_cr = true,
                    }
                    line_start = at;
                }
                _ => at += 1,
            }
        }
        self.pending.drain(..line_start);
        self.scanned = self.pending.len();
        if self.pending.len() > self.limit {
            self.too_large = true;
        }
    }

    /// The body ended. A last event the vendor did not terminate with a blank line is still
    /// dispatched: lenient where the standard would drop it, since it is the answer's end.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        if !self.too_large && !self.pending.is_empty() {
            let end = self.pending.len();
            self.take_line(0, end, out);
            self.pending.clear();
            self.scanned = 0;
        }
        if self.too_large {
            return Err(EventTooLarge { limit: self.limit });
        }
        self.dispatch(out);
        Ok(())
    }

    fn take_line(&mut self, start: usize, end: usize, out: &mut Vec<SseEvent>) {
        let line = String::from_utf8_lossy(&self.pending[start..end]).into_owned();
        self.line(&line, out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return; // A comment (servers send them as keep-alives).
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > self.limit {
                    self.too_large = true;
                    return;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => value.clone_into(&mut self.event),
            _ => {} // `id`, `retry` and unknown fields mean nothing to us.
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            out.push(SseEvent { event: std::mem::take(&mut self.event), data: std::mem::take(&mut self.data) });
        }
        self.event.clear();
        self.data.clear();
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(text: &str, piece: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(piece) {
            parser.push(chunk, &mut out).unwrap();
        }
        parser.finish(&mut out).unwrap();
        out
    }

    fn event(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.to_owned(), data: data.to_owned() }
    }

    #[test]
    fn events_come_out_the_same_however_the_bytes_are_split() {
        let text = "\u{feff}: keep-alive\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\n\
                    data: first\ndata: second\nid: 7\nretry: 100\n\n\
                    event: ping\rdata: é\r\r\
                    data\n\n\
                    event: no-data\n\n\
                    data: [DONE]\n\n";
        let expected = vec![
            event("message_start", "{\"a\":1}"),
            event("", "first\nsecond"),
            event("ping", "é"),
            event("", ""),
            event("", "[DONE]"),
        ];
        for piece in 1..=text.len() {
            assert_eq!(parse_in_pieces(text, piece), expected, "split every {piece} bytes");
        }
    }

    #[test]
    fn an_unterminated_last_event_is_still_dispatched() {
        assert_eq!(parse_in_pieces("data: {\"x\":true}", 4), vec![event("", "{\"x\":true}")]);
        assert_eq!(parse_in_pieces("data: tail\n", 3), vec![event("", "tail")]);
        assert!(parse_in_pieces(": only a comment", 2).is_empty());
    }

    /// Found by the fuzz suite: an empty chunk between the `\r` and the `\n` of one line ending
    /// made the `\n` a blank line, splitting one event in two.
    #[test]
    fn an_empty_chunk_inside_a_line_ending_changes_nothing() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in [&b"data: a\r"[..], b"", b"\ndata: b\n\n"] {
            parser.push(chunk, &mut out).unwrap();
        }
        parser.finish(&mut out).unwrap();
        assert_eq!(out, vec![event("", "a\nb")]);
    }

    #[test]
    fn a_field_without_a_space_after_the_colon_keeps_its_value_whole() {
        assert_eq!(parse_in_pieces("data:x\ndata:  two\n\n", 5), vec![event("", "x\n two")]);
    }
}

/// Property-based fuzzing of the framing: arbitrary bytes split anywhere, and well-formed
/// streams with hostile values, line endings and splits.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use switchyard_testkit::fuzz::{config, timed};

    use super::*;

    /// Feeds `bytes` cut at `cuts` (positions, any order, any number) to a parser with `limit`.
    fn parse_limited(bytes: &[u8], cuts: &[usize], limit: usize) -> Result<Vec<SseEvent>, EventTooLarge> {
        let mut points: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut parser = SseParser::with_limit(limit);
        let mut out = Vec::new();
        let mut from = 0;
        for point in points.into_iter().chain([bytes.len()]) {
            parser.push(&bytes[from..point], &mut out)?;
            from = point;
        }
        parser.finish(&mut out)?;
        Ok(out)
    }

    fn parse_split(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        parse_limited(bytes, cuts, MAX_EVENT_BYTES).expect("well under the limit")
    }

    /// Bytes that look like an event stream often enough to reach every branch.
    fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"data:".to_vec()),
            Just(b"data: ".to_vec()),
            Just(b"event: ".to_vec()),
            Just(b": ".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\xEF\xBB\xBF".to_vec()),
            Just(b"\0".to_vec()),
            Just(b"\xFF\xFE".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..16),
            "[a-z {}\":,]{0,12}".prop_map(String::into_bytes),
        ];
        proptest::collection::vec(piece, 0..64).prop_map(|pieces| pieces.concat())
    }

    /// A value an `event:` or `data:` line can carry: anything but a line ending, with one
    /// leading space at most (the framing strips exactly one).
    fn line_value() -> impl Strategy<Value = String> {
        prop_oneof!["[^\r\n]{0,40}", "\\PC{0,20}", Just("\0".to_owned()), Just("[DONE]".to_owned()), "[a-z]{0,4000}",]
            .prop_map(|value| value.trim_start_matches(' ').to_owned())
    }

    fn ending() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("\n"), Just("\r"), Just("\r\n")]
    }

    proptest! {
        #![proptest_config(config(256))]

        /// However arbitrary bytes are split, the events are the same, none holds more data than
        /// the input had, and nothing panics.
        #[test]
        fn any_bytes_split_anywhere_frame_the_same(
            bytes in prop_oneof![stream_bytes(), proptest::collection::vec(any::<u8>(), 0..512)],
            cuts in proptest::collection::vec(any::<usize>(), 0..32),
        ) {
            let (whole, split) = timed("framing", || (parse_split(&bytes, &[]), parse_split(&bytes, &cuts)));
            prop_assert_eq!(&whole, &split);
            // A line may be lossily decoded (3 bytes for each invalid one), never more.
            let bound = bytes.len() * 3;
            prop_assert!(whole.iter().all(|event| event.data.len() <= bound && event.event.len() <= bound));
            prop_assert!(whole.len() <= bytes.len() / 5 + 1, "{} events from {} bytes", whole.len(), bytes.len());
        }

        /// With a small limit, a stream either frames into events within it or is refused; the
        /// parser never holds much more than the limit, however the stream is split.
        #[test]
        fn a_line_or_event_past_the_limit_is_refused(
            bytes in prop_oneof![stream_bytes(), proptest::collection::vec(any::<u8>(), 0..512)],
            cuts in proptest::collection::vec(any::<usize>(), 0..32),
            limit in 1usize..64,
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut parser = SseParser::with_limit(limit);
            let mut out = Vec::new();
            let mut from = 0;
            let mut refused = false;
            for point in points.into_iter().chain([bytes.len()]) {
                refused |= parser.push(&bytes[from..point], &mut out).is_err();
                // A chunk may hold a little more than the limit before it is refused.
                prop_assert!(parser.pending.len() <= limit + (point - from));
                prop_assert!(parser.data.len() <= limit);
                from = point;
            }
            refused |= parser.finish(&mut out).is_err();
            if refused {
                prop_assert_eq!(parser.push(b"data: more\n\n", &mut out), Err(EventTooLarge { limit }));
            }
            prop_assert!(out.iter().all(|event| event.data.len() <= limit));
        }

        /// Well-formed events, with any line endings and splits, come out as they were sent.
        #[test]
        fn well_formed_events_come_out_as_sent(
            events in proptest::collection::vec(
                (proptest::option::of(line_value()), proptest::collection::vec(line_value(), 1..4), ending()),
                0..12,
            ),
            comment in any::<bool>(),
            cuts in proptest::collection::vec(any::<usize>(), 0..32),
        ) {
            let mut text = String::new();
            let mut expected = Vec::new();
            for (name, lines, ending) in &events {
                if comment {
                    text.push_str(&format!(": keep-alive{ending}"));
                }
                if let Some(name) = name {
                    text.push_str(&format!("event: {name}{ending}"));
                }
                for line in lines {
                    text.push_str(&format!("data: {line}{ending}"));
                }
                text.push_str(ending);
                expected.push(SseEvent { event: name.clone().unwrap_or_default(), data: lines.join("\n") });
            }
            let parsed = timed("framing", || parse_split(text.as_bytes(), &cuts));
            prop_assert_eq!(parsed, expected);
        }
    }
}
