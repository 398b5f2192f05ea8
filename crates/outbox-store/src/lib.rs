//! The alert outbox's storage: every SQL statement of the product lives in this crate, as
//! small documented functions, plus the migrator. Modules are named for what they store;
//! the benchmark's own statements are in its crate, so that no product binary links them.
//!
//! Layout:
//! - [`connect`]: pools (with a bounded wait for the database at start-up, following the
//!   writable server of several, statements planned per execution or once: [`Plans`]) and
//!   [`MIGRATOR`]; [`servers`]: libpq's multi-host URLs; `server_role`: what a server's
//!   session is and whether it satisfies `target_session_attrs` (its types are
//!   re-exported by [`servers`]); [`schema`]: the schema version a build expects, and which
//!   migrations a database has applied.
//! - [`tenants`], [`tokens`], [`destinations`]: who may approve alerts (tokens with expiry
//!   and revocation), and where alerts go (with signing secrets as stored, their rotation,
//!   and re-sealing under a new key); an account's tenant grant ([`tenants::Scope`]).
//! - [`alerts`]: the decider's write path (approve, revise, in one transaction each; the
//!   API's concurrent approvals written in groups, one transaction per group; the
//!   monitors' bulk approval) and the read model of an alert with its attempts and
//!   evidence trail; [`approval_plan`]: a large bulk approval cut into transactions that
//!   share no identity and no lane, two in flight at once.
//! - [`lifecycle`]: every transition of an alert, written once: settle, requeue, the
//!   evidence line, and the operator transitions (replay, resolve) with their refusals;
//!   the dispatcher's batch completion is built from the same pieces.
//! - [`evidence_chain`]: the evidence chain as stored (each entry linked by the database
//!   as it is inserted), checkpoints and their signing keys, and the backfill of alerts
//!   from before the chain.
//! - [`dispatch`]: the dispatcher's claim, lease sweep, completions and queue figures.
//! - [`lanes`]: ordered lanes as operators see them (which lane an alert is in is
//!   `lane_key`, below every module that names a lane): a destination's ordering settings
//!   (turning ordering off releases its lanes), lanes held up by their head, and blocked
//!   lanes counted per destination.
//! - [`wake_ups`]: approvals waking idle dispatchers (`NOTIFY`, folded under load), and
//!   dispatchers listening for them.
//! - [`upkeep`]: the live queue's own vacuum, which dispatchers run once its dead tuples
//!   pass a threshold, the merge of the subject index's pending list, which they run
//!   while approvals arrive, and the summaries of the attempts' time index, which they
//!   write as its page ranges fill.
//! - [`health`]: destination health: dispatchers' tallies of their sends merged per
//!   destination, and the automatic disable of one failing for longer than its window;
//!   each destination's last hour of sends and its recent errors.
//! - [`sources`]: what the monitors read: contracts, watchlists, articles, news cursors.
//! - [`alert_actions`]: operators' actions on alerts (replay, all-or-nothing replay of
//!   many, resolve, in a transaction each around the lifecycle's transitions, and which
//!   of them are open); [`destination_switch`]: destinations turned off and on;
//!   [`stats`]: the figures operators look at; [`retention`]: settled alerts' payloads,
//!   attempts and evidence lines pruned, their identity, outcome and chain kept.
//! - [`rendered`]: email alerts (and email API request bodies) as sent: what rendering
//!   one needs, and its exact bytes, stored once before the first send and reused by
//!   every attempt.
//! - [`alert_listings`]: listings of the live queue and of alerts by state, and the
//!   filtered, keyset-paged list of alerts within a tenant grant (for the approval API,
//!   within one tenant, each filter served by an index, under a statement timeout).
//! - [`operator_accounts`]: operator accounts and sign-in sessions.
//! - [`audit`]: the audit log (operators' evidence lines and the log's own lines, failed
//!   sign-ins counted per window).
//! - [`bulk_replays`]: operators' bulk replays, their progress and their worker's lease.
//! - [`checker_reads`]: what the checker reads: alerts as committed, straight from the
//!   tables (what the fault suite's referee compares with what destinations received).
//! - [`outcome_counts`]: what became of a database's alerts, counted (a demo run's
//!   progress and report).
//! - [`sql_names`]: the typed names written into SQL as literals, for the predicates a
//!   partial index needs as constants (everything else binds them); with
//!   [`dispatch::due_status`], what the benchmark's own statements are built from.
//! - [`error`]: the store's error type, [`StoreError`].
//!
//! Functions that are one statement take any `PgExecutor`, so callers can compose them in
//! a transaction; functions that must be atomic open their own transaction on a pool.

pub mod alert_actions;
pub mod alert_listings;
pub mod alerts;
pub mod approval_plan;
pub mod audit;
pub mod bulk_replays;
pub mod checker_reads;
pub mod connect;
pub mod destination_switch;
pub mod destinations;
pub mod dispatch;
pub mod error;
pub mod evidence_chain;
pub mod health;
mod lane_key;
pub mod lanes;
pub mod lifecycle;
pub mod operator_accounts;
pub mod outcome_counts;
pub mod rendered;
pub mod retention;
pub mod schema;
mod server_role;
pub mod servers;
pub mod sources;
pub mod sql_names;
pub mod stats;
pub mod tenants;
pub mod tokens;
pub mod upkeep;
pub mod wake_ups;

pub use connect::{close_at_exit, connect, connect_planned, connect_with_retry, Plans, MIGRATOR};
pub use error::StoreError;
pub use sqlx::{PgConnection, PgPool};
