//! The dispatcher: claims due outbox rows with `FOR UPDATE SKIP LOCKED`, sends each with
//! its idempotency key and Standard Webhooks signature, and records what the destination
//! confirmed. Any number run side by side on one database.
//!
//! Layout:
//! - [`cli`]: the `dispatcher` program's command line ([`cli::Cli`]) and what it runs
//!   once parsed (templates compiled, the database reached, then [`run`]).
//! - `config`: [`Config`] and [`Transport`], how a dispatcher runs, and [`POOL_PLANS`],
//!   how its pool plans statements.
//! - `run`: [`run`], a dispatcher from start to stop (its helpers started, the claim
//!   loop run, shutdown), and [`DispatchError`].
//! - `shared`: what every task of a running dispatcher shares (pool, clients, stop
//!   signals, templates, send permits, destinations marked gone, prepared destinations).
//! - `claim_loop`: the claim loop (capacity, destination slots, lease sweep, drain,
//!   shutdown).
//! - `delivery`: one claim's work, from its turn to send to its recorded outcome or its
//!   claim given back.
//! - `summary`: [`RunSummary`], what a run did.
//! - `wake_ups`: `NOTIFY outbox_due` forwarded to the claim loop.
//! - `reload`: templates read again on SIGHUP.
//! - `attempt_trace`: a claim's place in its alert's trace: the attempt's consumer span
//!   (in the approval's trace, linked to the approval span), the `traceparent` its
//!   requests send, and its child spans (claim batch, exchange, SMTP phases, lookup,
//!   settle).
//! - `work`: one claimed row to its next state (send, or settle an uncertain attempt):
//!   the doing, I/O only.
//! - `judge`: the deciding, pure: what a send's or a lookup's answer means for the claim
//!   and where it goes next (the outcome table, retries, exhaustion, settling order).
//! - `classify`: what an HTTP or SMTP exchange means (accepted, rejected, not processed, not sent,
//!   uncertain).
//! - `http`: the request every attempt sends, and lookups, through the egress guard
//!   (`outbox_egress`): a destination whose address is not allowed is never connected
//!   to; its alert fails and the destination is disabled, as after a 410.
//! - `prepared`: what every request to one webhook destination shares (URL checked,
//!   target, authorization, key header, signing keys), prepared once per destination and
//!   settings, and again when a claim reads other settings.
//! - `smtp`: email destinations: the message rendered once and stored before the first
//!   send, then sent byte for byte on every attempt over an SMTP dialogue driven command
//!   by command (so a lost final reply is told apart from a refusal before the data), to
//!   the relay's address vetted by the egress guard.
//! - `relay`: reaching the relay: TCP to the vetted address, then implicit TLS or
//!   `STARTTLS` as the destination requires (never a fallback to plain text), the
//!   certificate checked against the relay's name and the public roots or the
//!   destination's CA.
//! - [`TenantTemplates`] (`templates`): each tenant's own templates from
//!   `--templates-dir`, compiled at start and reloaded on SIGHUP; the template version
//!   says whose made a message.
//! - `email_api`: webhook destinations with a body template (HTTP email APIs): the
//!   request body rendered once from the alert's email and stored before the first send,
//!   then sent byte for byte by `http` on every attempt.
//! - `recorder`: outcomes written in batches (one statement and one commit for many).
//! - `send_tallies`, `health`: every send counted per destination in memory, and
//!   reported every few seconds; a destination whose every send has failed for its
//!   window is disabled by the report (never on a delivery's own path).
//! - `upkeep`: the live queue's own vacuum, once its dead tuples pass
//!   `--queue-vacuum-after` (autovacuum may visit too rarely, or not at all), the
//!   merge of the subject index's pending list while approvals arrive, and the
//!   summaries of the attempts' time index as its page ranges fill.
//! - `metrics`, `server`: `/metrics`, `/healthz`, `/readyz`.
//!
//! Bounds: a claim never leaves more than a destination's `max_in_flight` rows in
//! `sending`, counting every dispatcher's (the claim statement enforces it in the database,
//! see `outbox_store::dispatch::claim`), so one crash can leave at most that many alerts
//! uncertain at a destination, whatever the number of processes: the crash blast radius.
//! A dispatcher also holds at most its own `--max-in-flight` rows in `sending` overall
//! (claimed and not yet recorded), and runs at most `--max-concurrent-sends` sends at
//! once when that is set. Since a claim takes no more rows of a destination than it has
//! room for, a claimed row waits only for the process's send cap, if any; the
//! per-destination slots a process keeps are a guard for the rare case where its own rows
//! outnumber the bound (a row taken over after its lease expired while the stalled send
//! still runs). Where uncertainty settles itself (a lookup, or a de-duplication window)
//! a large destination bound with a send cap lets claims stay large: that is the
//! high-throughput setting (the benchmark's).
//!
//! Throughput: claims are taken in batches into local tasks (one statement commits the
//! leases and the "attempt started" lines of a whole batch before anything is sent), sends
//! run concurrently within each destination's limit, and outcomes are written in batches
//! by the recorder. A new batch is claimed once half a batch of capacity is free, so the
//! database sees few, large statements under load and an idle dispatcher still claims a
//! single new row at once.

mod attempt_trace;
mod claim_loop;
mod classify;
pub mod cli;
mod config;
mod delivery;
mod email_api;
mod health;
mod http;
mod judge;
mod metrics;
mod prepared;
mod recorder;
mod relay;
mod reload;
mod run;
mod send_tallies;
mod server;
mod shared;
mod smtp;
mod summary;
mod templates;
mod upkeep;
mod wake_ups;
mod work;

pub use classify::{classify, Exchange, SmtpPhase, Verdict};
pub use config::{default_worker_id, Config, Transport, DEFAULT_QUEUE_VACUUM_AFTER, POOL_PLANS};
pub use metrics::Metrics;
pub use run::{run, DispatchError};
pub(crate) use shared::Shared;
pub use summary::RunSummary;
pub use templates::TenantTemplates;
