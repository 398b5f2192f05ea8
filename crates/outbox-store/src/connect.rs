//! Connection pools (on one server, or following the writable one of several) and the
//! migrator.
//!
//! libpq chooses a server for each connection. A sqlx pool opens its connections with one
//! set of options, so the choice is made for the pool instead: [`ServerList::find`] picks
//! the server, the pool is pointed at it, and the pool's follower watches it and points the
//! pool at another server when it stops qualifying. Each connection is still checked when
//! it opens, so none is ever handed out to a server of the wrong kind.

use backon::{ExponentialBuilder, Retryable};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::ConnectOptions;
use sqlx::PgPool;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::server_role::ServerRole;
use crate::servers::ServerList;
use crate::StoreError;

/// The schema, embedded from the workspace's `migrations/` folder.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Opens a pool. `application_name` names the component in `pg_stat_activity`, so an
/// operator (or a fault test) can tell a decider's sessions from a dispatcher's.
///
/// Every session runs with `jit = off`. Our statements are short and run thousands of
/// times a second; PostgreSQL compiles a statement to machine code whenever its estimated
/// cost passes `jit_above_cost`, and that compilation alone takes 100 ms or more of CPU.
/// The claim's estimate includes sub-plans that only run for uncertain rows, and on tables
/// that have never been analysed it grows with the tables. Under sustained load with
/// autovacuum off, it crossed the threshold once `delivery_attempts` held about 550,000
/// rows, and every claim from then on paid the compilation: the approval-to-acceptance
/// p50 went from 15 ms to 150–200 ms. Nothing we run gains from JIT.
///
/// `database_url` may name several servers and the kind of session wanted, as libpq's
/// multi-host URLs do (see [`crate::servers`]): the pool then opens its connections to
/// the first server that qualifies, and follows another when that one stops qualifying
/// (dies, or turns read-only or into a standby), until the pool is closed.
pub async fn connect(
    database_url: &str,
    application_name: &str,
    max_connections: u32,
) -> Result<PgPool, StoreError> {
    connect_planned(
        database_url,
        application_name,
        max_connections,
        Plans::Chosen,
    )
    .await
}

/// How a pool's sessions plan the statements they prepare (PostgreSQL's
/// `plan_cache_mode`). sqlx prepares every statement once per connection and executes it
/// again and again; what changes is whether each execution is planned anew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plans {
    /// PostgreSQL's own choice (`auto`): a prepared statement's first five executions are
    /// each planned for their values, and after that the generic plan is kept only if its
    /// estimate is no worse than theirs. Right where a value can change the best plan: an
    /// operator's search pattern, or a state given as a parameter that only a partial
    /// index whose predicate names it serves.
    Chosen,
    /// The generic plan from the first execution on (`force_generic_plan`): each statement
    /// is planned once per connection. For a process whose statements are a fixed set
    /// written so that no value changes their plan: the states a partial index selects on
    /// are literals (`crate::sql_names`), and the rest are ids, arrays of ids and limits.
    Generic,
}

impl Plans {
    fn setting(self) -> &'static str {
        match self {
            Plans::Chosen => "auto",
            Plans::Generic => "force_generic_plan",
        }
    }
}

/// [`connect`], with the statements planned as `plans` says.
pub async fn connect_planned(
    database_url: &str,
    application_name: &str,
    max_connections: u32,
    plans: Plans,
) -> Result<PgPool, StoreError> {
    let servers = ServerList::parse(database_url)?;
    let application_name = application_name.to_owned();
    let prepare = move |options: PgConnectOptions| {
        options
            .application_name(&application_name)
            .options([("jit", "off"), ("plan_cache_mode", plans.setting())])
    };
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10));
    if servers.is_single() {
        let server = &servers.servers()[0];
        let options = prepare(server.options.clone());
        let explain = |err| {
            crate::error::explain_connect_error(
                err,
                &server.label,
                options.get_username(),
                options.get_database().unwrap_or(options.get_username()),
            )
        };
        // One connection first, on its own: its failure is the server's own answer (refused,
        // no such database), where the pool would retry until its acquire timeout and then
        // say only that it timed out.
        let probe = options.connect().await.map_err(explain)?;
        let _ = sqlx::Connection::close(probe).await;
        return pool.connect_with(options.clone()).await.map_err(explain);
    }
    let (index, options) = servers.find(&prepare).await?;
    let switched = Arc::new(Switched::default());
    let attrs = servers.attrs();
    let pool = pool
        // A connection opened to a server of the wrong kind (the follower has not noticed
        // the change yet) is refused: the caller sees an error, never a write refused
        // half-way through its transaction by a standby.
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if ServerRole::of(conn).await?.keeps(attrs) {
                    Ok(())
                } else {
                    // As if the server were unreachable: it is, for what we need.
                    Err(sqlx::Error::Io(std::io::Error::other(format!(
                        "the server is no longer {}",
                        attrs.describe()
                    ))))
                }
            })
        })
        // Connections opened before the pool moved to another server are dropped rather
        // than reused: an old primary that came back must not receive our writes.
        .before_acquire({
            let switched = Arc::clone(&switched);
            move |_conn, meta| {
                let keep = !switched.before(meta.age);
                Box::pin(async move { Ok(keep) })
            }
        })
        .connect_with(options)
        .await?;
    tokio::spawn(follow(pool.clone(), servers, index, prepare, switched));
    Ok(pool)
}

/// When the pool last moved to another server.
#[derive(Debug, Default)]
struct Switched(Mutex<Option<Instant>>);

impl Switched {
    fn now(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Whether a connection of this age was opened before the last move.
    fn before(&self, age: Duration) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| age > at.elapsed())
    }
}

/// How often the follower asks the current server what it is.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// Watches the server the pool uses, on a connection of its own, and points the pool at
/// the first server of the list that qualifies once it stops qualifying. Logs one line
/// when the database goes away and one when it is back, with how long it was gone.
async fn follow(
    pool: PgPool,
    servers: ServerList,
    mut current: usize,
    prepare: impl Fn(PgConnectOptions) -> PgConnectOptions + Send + Sync + 'static,
    switched: Arc<Switched>,
) {
    let attrs = servers.attrs();
    let mut watch: Option<sqlx::PgConnection> = None;
    loop {
        // The pool's closing ends the watch at once, so that its connection too is
        // closed properly while the process ends (see [`close_at_exit`]).
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
            () = pool.close_event() => break,
        }
        let label = &servers.servers()[current].label;
        let options = prepare(servers.servers()[current].options.clone());
        let role = match watch.as_mut() {
            Some(conn) => ServerRole::of(conn).await,
            None => match options.connect().await {
                Ok(mut conn) => {
                    let role = ServerRole::of(&mut conn).await;
                    watch = Some(conn);
                    role
                }
                Err(err) => Err(err),
            },
        };
        let why = match role {
            Ok(role) if role.keeps(attrs) => continue,
            Ok(_) => format!("is no longer {}", attrs.describe()),
            Err(err) => format!("cannot be reached ({})", crate::error::cause(&err)),
        };
        watch = None;
        let gone = Instant::now();
        tracing::warn!(server = %label, "the database server {why}; looking for another");
        loop {
            if pool.is_closed() {
                return;
            }
            match servers.find(&prepare).await {
                Ok((index, options)) => {
                    current = index;
                    pool.set_connect_options(options);
                    switched.now();
                    tracing::info!(
                        server = %servers.servers()[index].label,
                        gone_for = ?gone.elapsed(),
                        "the database is back"
                    );
                    break;
                }
                Err(_) => tokio::time::sleep(FOLLOW_EVERY / 2).await,
            }
        }
    }
    if let Some(conn) = watch {
        let _ = sqlx::Connection::close(conn).await;
    }
}

/// How long a process waits at its end for the connections its tasks still hold.
const CLOSE_PATIENCE: Duration = Duration::from_secs(5);

/// Closes a process's pool as the process ends. Each connection is ended with the
/// protocol's goodbye (`Terminate`) rather than dropped with the process: a server that
/// sees a connection vanish logs `could not receive data from client: Connection reset by
/// peer` for it, one line per connection at every stop, which an operator reading the
/// server's log cannot tell from a network fault. Idle connections are closed at once;
/// connections still held by a task that is finishing (a last report, a listener giving
/// its connection back) are waited for, at most five seconds: past them, the process
/// ends anyway and those few are dropped.
pub async fn close_at_exit(pool: &PgPool) {
    let close = async {
        // sqlx closes the idle connections and then waits for the others, but it can
        // return while one is still on its way back (a connection given back is checked
        // with a round trip before it is idle again), which would then be dropped with
        // the process. So: again, until none is left.
        loop {
            pool.close().await;
            if pool.size() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    if tokio::time::timeout(CLOSE_PATIENCE, close).await.is_err() {
        tracing::debug!(
            still_held = pool.size(),
            patience = ?CLOSE_PATIENCE,
            "connections still in use at exit are dropped with the process"
        );
    }
}

/// Like [`connect_planned`], but waits for a database that is still starting (as under
/// `docker compose up`), retrying with exponential backoff for up to about `patience`.
/// Errors that waiting cannot fix (a malformed URL, bad credentials, a missing database)
/// are returned at once.
pub async fn connect_with_retry(
    database_url: &str,
    application_name: &str,
    max_connections: u32,
    plans: Plans,
    patience: Duration,
) -> Result<PgPool, StoreError> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_total_delay(Some(patience))
        .without_max_times()
        .with_jitter();
    (|| connect_planned(database_url, application_name, max_connections, plans))
        .retry(backoff)
        .when(is_worth_waiting_for)
        .notify(|err, wait| {
            tracing::warn!(error = %err, retry_in = ?wait, "database not reachable yet");
        })
        .await
}

fn is_worth_waiting_for(err: &StoreError) -> bool {
    match err {
        // A protocol error at connect time is a connection closed in its handshake, as a
        // proxy with no server behind it does (see StoreError::is_unavailable).
        StoreError::Database(
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_),
        ) => true,
        // 57P03: the server is starting up or shutting down.
        StoreError::Database(sqlx::Error::Database(db)) => db.code().as_deref() == Some("57P03"),
        // Several servers and none writable yet: a failover in progress (a standby about
        // to be promoted) looks exactly like this.
        StoreError::NoServerQualifies(_) => true,
        StoreError::CannotConnect { worth_waiting, .. } => *worth_waiting,
        _ => false,
    }
}

/// Whether the server the pool reaches takes writes now: not a standby, and not set
/// read-only (as a primary being demoted is).
pub async fn writable(db: impl sqlx::PgExecutor<'_>) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'",
    )
    .fetch_one(db)
    .await?)
}

/// Checks that the database answers a trivial query.
pub async fn ping(db: impl sqlx::PgExecutor<'_>) -> Result<(), StoreError> {
    sqlx::query("SELECT 1").execute(db).await?;
    Ok(())
}

/// Creates a database of its own, named `<prefix>_<uuid>`, on the server `server_url`
/// points at; returns a URL for it and its name.
pub async fn create_database(
    server_url: &str,
    prefix: &str,
) -> Result<(String, String), StoreError> {
    use sqlx::{ConnectOptions, Connection};
    let admin = PgConnectOptions::from_str(server_url)?;
    let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
    let mut conn = admin.connect().await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    // The caller's URL with only the database changed: same host, user and options.
    let url = match url::Url::parse(server_url) {
        Ok(mut parsed) => {
            parsed.set_path(&format!("/{name}"));
            parsed.to_string()
        }
        Err(_) => admin.database(&name).to_url_lossy().to_string(),
    };
    Ok((url, name))
}

/// Drops a database made by [`create_database`], forcing out its sessions.
pub async fn drop_database(server_url: &str, name: &str) -> Result<(), StoreError> {
    use sqlx::{ConnectOptions, Connection};
    let admin = PgConnectOptions::from_str(server_url)?;
    let mut conn = admin.connect().await?;
    sqlx::query(&format!(
        "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
        name.replace('"', "")
    ))
    .execute(&mut conn)
    .await?;
    conn.close().await?;
    Ok(())
}
