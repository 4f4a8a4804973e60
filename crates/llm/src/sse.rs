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

#[derive(Debug, Default)]
pub(crate) struct SseParser {
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

impl SseParser {
    /// Feeds one network chunk; completed events are appended to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) {
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
    }

    /// The body ended. A last event the vendor did not terminate with a blank line is still
    /// dispatched: lenient where the standard would drop it, since it is the answer's end.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.pending.is_empty() {
            let end = self.pending.len();
            self.take_line(0, end, out);
            self.pending.clear();
            self.scanned = 0;
        }
        self.dispatch(out);
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
            parser.push(chunk, &mut out);
        }
        parser.finish(&mut out);
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

    #[test]
    fn a_field_without_a_space_after_the_colon_keeps_its_value_whole() {
        assert_eq!(parse_in_pieces("data:x\ndata:  two\n\n", 5), vec![event("", "x\n two")]);
    }
}
