//! W3C Trace Context as a caller sends it: the `traceparent` and `tracestate` headers of
//! an approval, read strictly by the rules of the recommendation
//! (<https://www.w3.org/TR/trace-context/>), so that what is stored with an alert and sent
//! again with each delivery attempt is always well formed.
//!
//! A header that breaks a rule is not an error for the caller: the recommendation says to
//! ignore it and start a new trace, so [`TraceParent::parse`] and [`TraceState::parse`]
//! answer `None` and the request goes on. A bad `tracestate` never affects a good
//! `traceparent`. Nothing here can carry a control character (CR, LF) into a header we
//! send: both forms admit printable ASCII only.

use std::fmt;

/// A `traceparent`: the trace an approval belongs to and the span that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace, 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// The caller's span, 8 bytes, never all zero.
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is "sampled".
    pub flags: u8,
}

/// Length of a version-00 `traceparent`: `00-` 32 hex `-` 16 hex `-` 2 hex.
const TRACEPARENT_LEN: usize = 55;

impl TraceParent {
    /// Reads a `traceparent` header; `None` when it breaks a rule (then a new trace is
    /// started). A version above `00` is read by its first 55 characters when what
    /// follows starts with `-`, as the recommendation asks of a version it does not know;
    /// version `ff` is invalid.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim_matches([' ', '\t']);
        let bytes = header.as_bytes();
        if bytes.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        match version {
            0xff => return None,
            0x00 if bytes.len() != TRACEPARENT_LEN => return None,
            0x00 => {}
            _ if bytes.len() > TRACEPARENT_LEN && bytes[TRACEPARENT_LEN] != b'-' => return None,
            _ => {}
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, byte) in parent_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&bytes[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the caller sampled the trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lowercase hex digits, as trace viewers show it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The same trace with another span as the parent: what an attempt sends downstream.
    /// Only the flags this version defines travel on (`sampled`; bits a caller set that
    /// the recommendation reserves are cleared).
    pub fn with_parent(&self, parent_id: [u8; 8]) -> TraceParent {
        TraceParent {
            parent_id,
            flags: self.flags & 0x01,
            ..*self
        }
    }

    /// The parent span's id as 16 lowercase hex digits.
    pub fn parent_id_hex(&self) -> String {
        hex(&self.parent_id)
    }

    /// A new trace, for an approval that came without one while spans are not exported:
    /// random ids (never all zero), sampled only if `sampled`. Every attempt of the alert
    /// then still sends one trace id, so the destination's own spans of its attempts join.
    pub fn new_trace(sampled: bool) -> TraceParent {
        TraceParent {
            trace_id: nonzero_random(),
            parent_id: nonzero_random(),
            flags: u8::from(sampled),
        }
    }

    /// The same trace and flags with a fresh random span as the parent: the span id an
    /// attempt sends when no span of ours is exported.
    pub fn with_new_span(&self) -> TraceParent {
        self.with_parent(nonzero_random())
    }
}

/// Random bytes, never all zero (the recommendation's invalid value).
fn nonzero_random<const N: usize>() -> [u8; N] {
    loop {
        let bytes: [u8; N] = rand::random();
        if bytes != [0; N] {
            return bytes;
        }
    }
}

/// The trace context an alert keeps from its approval: the approval's `traceparent`
/// (whose parent is the approval's span) and the caller's `tracestate`. It is stored
/// beside the alert, never in its identity or its payload's fingerprint, and every
/// delivery attempt sends it again with its own span as the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace and the approval's span.
    pub parent: TraceParent,
    /// Vendors' entries, as the caller sent them (cut to the recommendation's limit).
    pub state: Option<TraceState>,
}

impl TraceContext {
    /// The context as stored (the `traceparent` and `tracestate` columns); `None` when
    /// nothing was stored or the stored text breaks the rules (then nothing is sent).
    pub fn from_stored(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = TraceParent::parse(traceparent?)?;
        Some(TraceContext {
            parent,
            state: tracestate.and_then(|state| TraceState::parse([state])),
        })
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        self.parent.trace_id_hex()
    }
}

/// The version-00 header form (a later version's extra fields are not kept).
impl fmt::Display for TraceParent {
    /// `00-<trace id>-<parent id>-<flags>`, written in one piece from a buffer on the
    /// stack: every attempt sends one, and formatting it a byte at a time cost a
    /// dispatcher 3 % of its CPU in the HTTP drain (24 small strings per attempt).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        hex_into(&mut out[3..35], &self.trace_id);
        out[35] = b'-';
        hex_into(&mut out[36..52], &self.parent_id);
        out[52] = b'-';
        hex_into(&mut out[53..55], &[self.flags]);
        f.write_str(std::str::from_utf8(&out).expect("hex digits and dashes are ASCII"))
    }
}

/// A `tracestate`: vendors' entries that travel with the trace, kept in their order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceState(String);

/// Most list members a `tracestate` may hold.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;
/// Most characters of `tracestate` kept: the recommendation asks to propagate at least
/// this many, dropping whole entries beyond it, the longer ones (over
/// [`LONG_TRACESTATE_MEMBER`]) first.
pub const MAX_TRACESTATE_LEN: usize = 512;
/// Entries longer than this are the first dropped when a `tracestate` is cut.
pub const LONG_TRACESTATE_MEMBER: usize = 128;

impl TraceState {
    /// Reads the `tracestate` header's values (a request may send several; they form one
    /// list, in order); `None` when the list breaks a rule or holds nothing. A list longer
    /// than [`MAX_TRACESTATE_LEN`] is cut by whole entries.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<TraceState> {
        let mut members: Vec<&str> = Vec::new();
        for value in values {
            for member in value.split(',') {
                let member = member.trim_matches([' ', '\t']);
                if member.is_empty() {
                    continue;
                }
                let (key, entry) = member.split_once('=')?;
                if !valid_key(key) || !valid_value(entry) {
                    return None;
                }
                // A 33rd member breaks the rule: stop at once, so a header of thousands
                // of members (before any token is checked) costs one pass, never a
                // comparison of each with all the others.
                if members.len() == MAX_TRACESTATE_MEMBERS {
                    return None;
                }
                if members
                    .iter()
                    .any(|m| m.split_once('=').map(|(k, _)| k) == Some(key))
                {
                    return None;
                }
                members.push(member);
            }
        }
        if members.is_empty() {
            return None;
        }
        Some(TraceState(cut_to_limit(members)))
    }

    /// The header's value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Joins `members`, dropping long entries first and then the last ones until the list
/// fits in [`MAX_TRACESTATE_LEN`].
fn cut_to_limit(mut members: Vec<&str>) -> String {
    let length = |members: &[&str]| -> usize {
        members.iter().map(|m| m.len()).sum::<usize>() + members.len().saturating_sub(1)
    };
    while length(&members) > MAX_TRACESTATE_LEN {
        match members
            .iter()
            .rposition(|m| m.len() > LONG_TRACESTATE_MEMBER)
        {
            Some(long) => {
                members.remove(long);
            }
            None => {
                members.pop();
            }
        }
    }
    members.join(",")
}

/// `simple-key` or `tenant-id@system-id`, by the recommendation's grammar.
fn valid_key(key: &str) -> bool {
    let tail = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/".contains(&c);
    let bytes = key.as_bytes();
    match key.split_once('@') {
        None => {
            !bytes.is_empty()
                && bytes.len() <= 256
                && bytes[0].is_ascii_lowercase()
                && bytes[1..].iter().all(|&c| tail(c))
        }
        Some((tenant, system)) => {
            let (tenant, system) = (tenant.as_bytes(), system.as_bytes());
            !tenant.is_empty()
                && tenant.len() <= 241
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && tenant[1..].iter().all(|&c| tail(c))
                && !system.is_empty()
                && system.len() <= 14
                && system[0].is_ascii_lowercase()
                && system[1..].iter().all(|&c| tail(c))
        }
    }
}

/// Up to 256 printable ASCII characters, no `,` or `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 256
        && bytes
            .iter()
            .all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
        && bytes.last() != Some(&b' ')
}

/// Two lowercase hex digits (the recommendation refuses uppercase).
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// Writes `bytes` as lowercase hex digits into `out`, two per byte (`out` is exactly
/// twice as long).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    hex_into(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_recommendations_example_reads_and_prints_back() {
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(parent.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(parent.sampled());
        assert_eq!(parent.to_string(), EXAMPLE);
        let attempt = parent.with_parent([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            attempt.to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01"
        );
        assert_eq!(
            TraceParent::parse(&format!(" {EXAMPLE}\t")),
            Some(parent),
            "optional whitespace around a header value is not part of it"
        );
    }

    #[test]
    fn a_broken_traceparent_is_ignored() {
        for header in [
            "",
            "00",
            &EXAMPLE.to_uppercase(), // uppercase hex
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // 00 is exact
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // not hex
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // separator
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", // later version
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\r",
        ] {
            assert_eq!(TraceParent::parse(header), None, "{header:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds";
        assert_eq!(
            TraceParent::parse(later).unwrap().to_string(),
            EXAMPLE,
            "sent on as version 00"
        );
    }

    #[test]
    fn tracestate_values_form_one_list_in_order() {
        let state = TraceState::parse(["congo=t61rcWkgMzE", " rojo=00f067aa0ba902b7 ,,"]);
        assert_eq!(
            state.unwrap().as_str(),
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
        );
        assert!(TraceState::parse(["tenant1@vendor=x"]).is_some());
        assert_eq!(TraceState::parse([" , "]), None, "nothing in it");
    }

    #[test]
    fn a_broken_tracestate_is_ignored() {
        let too_many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        for value in [
            "Congo=x",                  // uppercase key
            "congo",                    // no value
            "congo=a=b",                // `=` in the value
            "congo=x ",                 // value ending in a space: trimmed, so it is fine ...
            "congo=x\r\nset-cookie: y", // CR/LF never reaches a header we send
            "congo=é",                  // not ASCII
            "1congo=x",                 // a simple key starts with a letter
            "a@Vendor=x",               // system id in uppercase
            "congo=1,congo=2",          // a key twice
            &too_many,
        ] {
            let parsed = TraceState::parse([value]);
            if value == "congo=x " {
                assert_eq!(parsed.unwrap().as_str(), "congo=x");
            } else {
                assert_eq!(parsed, None, "{value:?}");
            }
        }
    }

    #[test]
    fn a_long_tracestate_is_cut_by_whole_entries_long_ones_first() {
        let long = format!("long={}", "x".repeat(200));
        let short: Vec<String> = (0..30)
            .map(|i| format!("k{i:02}={}", "v".repeat(20)))
            .collect();
        let mut members = vec![short[0].clone(), long.clone()];
        members.extend(short[1..].iter().cloned());
        let value = members.join(",");
        let state = TraceState::parse([value.as_str()]).unwrap();
        assert!(state.as_str().len() <= MAX_TRACESTATE_LEN);
        assert!(
            !state.as_str().contains("long="),
            "the long entry goes first"
        );
        assert!(state.as_str().starts_with("k00="), "order is kept");
        // Then entries from the end: 20 of 24 characters, with their commas, fit in 512.
        assert_eq!(state.as_str().split(',').count(), 20);
        assert!(state.as_str().ends_with(&short[19]));
    }

    #[test]
    fn a_new_trace_and_a_new_span_are_random_valid_and_print_back() {
        let first = TraceParent::new_trace(false);
        let second = TraceParent::new_trace(true);
        assert_ne!(first.trace_id, second.trace_id);
        assert!(!first.sampled() && second.sampled());
        for parent in [first, second] {
            assert_eq!(TraceParent::parse(&parent.to_string()), Some(parent));
        }
        let attempt = second.with_new_span();
        assert_eq!(attempt.trace_id, second.trace_id);
        assert_eq!(attempt.flags, second.flags);
        assert_ne!(attempt.parent_id, second.parent_id);
        assert_eq!(attempt.parent_id_hex().len(), 16);
    }

    #[test]
    fn a_stored_context_reads_back_and_a_broken_one_is_none() {
        let context = TraceContext::from_stored(Some(EXAMPLE), Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(context.parent.to_string(), EXAMPLE);
        assert_eq!(context.state.unwrap().as_str(), "congo=t61rcWkgMzE");
        assert_eq!(
            context.parent.trace_id_hex(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(TraceContext::from_stored(None, Some("congo=t61rcWkgMzE")).is_none());
        assert!(TraceContext::from_stored(Some("00-zz"), None).is_none());
        let without_state = TraceContext::from_stored(Some(EXAMPLE), Some("Bad=1")).unwrap();
        assert!(without_state.state.is_none());
    }

    #[test]
    fn a_tracestate_of_thousands_of_members_is_refused_at_the_33rd() {
        let members: Vec<String> = (0..50_000).map(|n| format!("k{n}=v")).collect();
        let header = members.join(",");
        assert!(TraceState::parse([header.as_str()]).is_none());
        let exactly: Vec<String> = (0..32).map(|n| format!("k{n}=v")).collect();
        assert!(TraceState::parse([exactly.join(",").as_str()]).is_some());
    }

    #[test]
    fn reserved_flags_are_not_passed_on() {
        let parent =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff").unwrap();
        assert_eq!(parent.with_new_span().flags, 0x01);
    }
}
