//! What an HTTP exchange means for delivery, decided by one question: could the bytes
//! have arrived and been acted on? (The outcome table of the design.)

use std::time::Duration;

/// What came back from one POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchange {
    /// The destination answered.
    Answered {
        /// Status code.
        status: u16,
        /// Parsed `Retry-After`, if any.
        retry_after: Option<Duration>,
        /// The destination's reference (configured header, or body field `id`).
        reference: Option<String>,
        /// `Location`, for redirects.
        location: Option<String>,
        /// The start of the body.
        excerpt: String,
    },
    /// No connection was made (DNS, refused, TLS, connect timeout): nothing was sent.
    NotConnected(String),
    /// The request may have been written, but no answer came in time.
    TimedOut(String),
    /// The connection broke after the request may have been written.
    Broken(String),
    /// The request could not even be built (bad URL, bad header): a configuration error.
    Unsendable(String),
    /// An SMTP relay took the message: it answered the final dot with 2xx.
    SmtpAccepted {
        /// The relay's queue id, from `250 ... queued as ID`.
        reference: Option<String>,
        /// The reply's text.
        reply: String,
    },
    /// An SMTP relay refused a recipient, `DATA`, or the message after its data, with a
    /// reply: nothing was delivered.
    SmtpRefused {
        /// The command it refused.
        phase: &'static str,
        /// The reply code (4xx or 5xx).
        code: u16,
        /// The reply.
        reply: String,
    },
    /// An SMTP dialogue ended before the message data went out, in `phase`: nothing can
    /// have been delivered, whatever went wrong (a reply, a lost connection, a timeout).
    SmtpNotSent {
        /// Where it ended.
        phase: SmtpPhase,
        /// What happened, for the evidence.
        why: String,
    },
    /// The egress guard refused the destination's address before any connection was made:
    /// a configuration error, worded apart from refused/timed out/closed so that it says
    /// nothing about what listens at that address.
    Blocked(String),
    /// The stored payload no longer has the fingerprint approved with it: it was changed
    /// after approval, behind the product's back. Nothing was sent.
    Altered(String),
}

/// The phases of an SMTP dialogue before the message data, each its own error class, so
/// an operator reads where a relay stopped without parsing the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpPhase {
    /// Connecting to the relay.
    Connect,
    /// The relay's `220` greeting and the answer to `EHLO`.
    Greeting,
    /// The TLS handshake (implicit TLS, or after `STARTTLS`), or a relay that does not
    /// offer `STARTTLS` when it is required.
    Tls,
    /// `AUTH`.
    Auth,
    /// `MAIL FROM`.
    MailFrom,
    /// `RCPT TO` without a reply (a reply is [`Exchange::SmtpRefused`]).
    RcptTo,
    /// `DATA` without a reply.
    Data,
}

impl SmtpPhase {
    /// The attempt's error class.
    pub fn class(self) -> &'static str {
        match self {
            SmtpPhase::Connect => "connect",
            SmtpPhase::Greeting => "greeting",
            SmtpPhase::Tls => "tls",
            SmtpPhase::Auth => "auth",
            SmtpPhase::MailFrom => "mail_from",
            SmtpPhase::RcptTo => "rcpt_to",
            SmtpPhase::Data => "data",
        }
    }
}

/// The delivery meaning of an exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: the destination has it.
    Accepted {
        /// Its reference, when it gave one.
        reference: Option<String>,
    },
    /// A permanent refusal: the alert fails with the answer as evidence.
    Rejected {
        /// 410 Gone: the destination itself should be disabled.
        gone: bool,
        /// Why, for the evidence line.
        why: String,
    },
    /// The destination did not process it and said so (429, 503, 408, 409, 425; 5xx from
    /// a destination that de-duplicates by key): retry with backoff.
    NotProcessed {
        /// The destination's wish, if it stated one.
        retry_after: Option<Duration>,
        /// A server error other than 503: the destination may have acted before failing.
        /// Its key de-duplication makes a retry safe only inside its window, so the retry
        /// goes through the settling order of an uncertain attempt (lookup, window,
        /// policy), and running out of retries holds the alert rather than failing it.
        may_have_acted: bool,
        /// Why.
        why: String,
    },
    /// Nothing left this machine: retry with backoff.
    NotSent {
        /// Why.
        why: String,
    },
    /// It may or may not have arrived.
    Uncertain {
        /// Why.
        why: String,
    },
    /// The destination's address is not allowed: the alert fails and the destination is
    /// disabled until its URL is fixed (or its range opened on purpose).
    Blocked {
        /// Why, for the evidence line.
        why: String,
    },
    /// The payload is not what was approved: the alert fails (or is held, when an earlier
    /// attempt's outcome is unknown) and nothing is sent, now or on any retry.
    Altered {
        /// Why, for the evidence line.
        why: String,
    },
}

/// Classifies an exchange. `deduplicates` says whether the destination de-duplicates by
/// key, which makes a 5xx safe to retry rather than uncertain.
pub fn classify(exchange: &Exchange, deduplicates: bool) -> Verdict {
    match exchange {
        Exchange::Answered {
            status,
            retry_after,
            reference,
            location,
            excerpt,
        } => {
            let status = *status;
            let answer = if excerpt.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {excerpt}")
            };
            match status {
                200..=299 => Verdict::Accepted {
                    reference: reference.clone(),
                },
                300..=399 => Verdict::Rejected {
                    gone: false,
                    why: format!(
                        "HTTP {status} redirect to {} not followed; the destination URL needs fixing",
                        location.as_deref().unwrap_or("(no location)")
                    ),
                },
                408 | 409 | 425 | 429 | 503 => Verdict::NotProcessed {
                    retry_after: *retry_after,
                    may_have_acted: false,
                    why: answer,
                },
                410 => Verdict::Rejected {
                    gone: true,
                    why: answer,
                },
                400..=499 => Verdict::Rejected {
                    gone: false,
                    why: answer,
                },
                _ if deduplicates => Verdict::NotProcessed {
                    retry_after: *retry_after,
                    may_have_acted: true,
                    why: answer,
                },
                _ => Verdict::Uncertain {
                    why: format!("{answer}; the destination may have acted before failing"),
                },
            }
        }
        Exchange::SmtpAccepted { reference, .. } => Verdict::Accepted {
            reference: reference.clone(),
        },
        // SMTP says it plainly: 4xx is "try again later", 5xx is "never".
        Exchange::SmtpRefused { phase, code, reply } if (400..500).contains(code) => {
            Verdict::NotProcessed {
                retry_after: None,
                may_have_acted: false,
                why: format!("the relay answered {phase} with {reply}"),
            }
        }
        Exchange::SmtpRefused { phase, reply, .. } => Verdict::Rejected {
            gone: false,
            why: format!("the relay answered {phase} with {reply}"),
        },
        Exchange::NotConnected(why) | Exchange::SmtpNotSent { why, .. } => {
            Verdict::NotSent { why: why.clone() }
        }
        Exchange::TimedOut(why) | Exchange::Broken(why) => Verdict::Uncertain { why: why.clone() },
        Exchange::Unsendable(why) => Verdict::Rejected {
            gone: false,
            why: why.clone(),
        },
        Exchange::Blocked(why) => Verdict::Blocked { why: why.clone() },
        Exchange::Altered(why) => Verdict::Altered { why: why.clone() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> Exchange {
        Exchange::Answered {
            status,
            retry_after: None,
            reference: Some("r-1".into()),
            location: None,
            excerpt: String::new(),
        }
    }

    #[test]
    fn two_hundreds_are_accepted_with_their_reference() {
        for status in [200, 201, 202, 204] {
            assert_eq!(
                classify(&answered(status), false),
                Verdict::Accepted {
                    reference: Some("r-1".into())
                }
            );
        }
    }

    #[test]
    fn busy_answers_are_not_processed() {
        for status in [408, 409, 425, 429, 503] {
            assert!(matches!(
                classify(&answered(status), false),
                Verdict::NotProcessed { .. }
            ));
        }
    }

    #[test]
    fn other_client_errors_and_redirects_are_rejections() {
        assert!(matches!(
            classify(&answered(400), false),
            Verdict::Rejected { gone: false, .. }
        ));
        assert!(matches!(
            classify(&answered(410), false),
            Verdict::Rejected { gone: true, .. }
        ));
        let Verdict::Rejected { why, .. } = classify(&answered(302), false) else {
            panic!("a redirect is a rejection");
        };
        assert!(why.contains("not followed"));
    }

    #[test]
    fn server_errors_are_uncertain_unless_the_key_is_deduplicated() {
        assert!(matches!(
            classify(&answered(500), false),
            Verdict::Uncertain { .. }
        ));
        assert!(matches!(
            classify(&answered(500), true),
            Verdict::NotProcessed {
                may_have_acted: true,
                ..
            }
        ));
        assert!(matches!(
            classify(&answered(503), true),
            Verdict::NotProcessed {
                may_have_acted: false,
                ..
            }
        ));
    }

    #[test]
    fn smtp_replies_split_on_their_class() {
        let refused = |code| Exchange::SmtpRefused {
            phase: "message data",
            code,
            reply: format!("{code} no"),
        };
        assert!(matches!(
            classify(&refused(451), false),
            Verdict::NotProcessed { .. }
        ));
        assert!(matches!(
            classify(&refused(550), false),
            Verdict::Rejected { gone: false, .. }
        ));
        assert_eq!(
            classify(
                &Exchange::SmtpAccepted {
                    reference: Some("Q1".into()),
                    reply: "queued as Q1".into()
                },
                false
            ),
            Verdict::Accepted {
                reference: Some("Q1".into())
            }
        );
    }

    #[test]
    fn smtp_failures_before_the_data_are_not_sent_whatever_the_phase() {
        for phase in [
            SmtpPhase::Connect,
            SmtpPhase::Greeting,
            SmtpPhase::Tls,
            SmtpPhase::Auth,
            SmtpPhase::MailFrom,
        ] {
            assert!(matches!(
                classify(
                    &Exchange::SmtpNotSent {
                        phase,
                        why: "550 no".into()
                    },
                    false
                ),
                Verdict::NotSent { .. }
            ));
        }
        let classes: Vec<_> = [
            SmtpPhase::Connect,
            SmtpPhase::Greeting,
            SmtpPhase::Tls,
            SmtpPhase::Auth,
            SmtpPhase::MailFrom,
        ]
        .map(SmtpPhase::class)
        .into();
        assert_eq!(classes, ["connect", "greeting", "tls", "auth", "mail_from"]);
    }

    #[test]
    fn transport_failures_split_on_whether_bytes_may_have_left() {
        assert!(matches!(
            classify(&Exchange::NotConnected("refused".into()), false),
            Verdict::NotSent { .. }
        ));
        assert!(matches!(
            classify(&Exchange::TimedOut("10s".into()), true),
            Verdict::Uncertain { .. }
        ));
        assert!(matches!(
            classify(&Exchange::Broken("reset".into()), false),
            Verdict::Uncertain { .. }
        ));
        assert!(matches!(
            classify(&Exchange::Unsendable("bad url".into()), false),
            Verdict::Rejected { .. }
        ));
        assert!(matches!(
            classify(&Exchange::Blocked("loopback".into()), true),
            Verdict::Blocked { .. }
        ));
    }
}
