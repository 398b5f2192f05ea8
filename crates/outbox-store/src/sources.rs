//! The monitors' sources: contracts, watchlist entries, articles, news cursors. What the
//! monitors decide is approved in bulk by [`crate::alerts::approve_batch`].

use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::StoreError;

/// A contract as imported. Dates are `YYYY-MM-DD`; the amount is decimal text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractInput {
    /// The tenant's own id for it; re-importing updates by this id.
    pub external_id: String,
    /// Who the contract is with.
    pub vendor: String,
    /// Decimal amount as written.
    pub amount: String,
    /// ISO 4217 code.
    pub currency: String,
    /// `YYYY-MM-DD`.
    pub renewal_date: String,
    /// Days of notice before the renewal date.
    pub notice_days: u32,
    /// Tier override, most distant first.
    pub tiers: Option<Vec<u32>>,
    /// Destination names; `None`: every enabled destination.
    pub destinations: Option<Vec<String>>,
    /// The contract's owners (mail addresses) its alerts are also mailed to.
    pub recipients: Option<Vec<String>>,
}

/// Upserts contracts by external id, all in one statement (so a file imports whole or not
/// at all). Returns (inserted, updated).
pub async fn upsert_contracts(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    contracts: &[ContractInput],
) -> Result<(u64, u64), StoreError> {
    let columns = ContractColumns::of(contracts);
    let rows: Vec<bool> = sqlx::query_scalar(
        "INSERT INTO contracts (id, tenant_id, external_id, vendor, amount, currency, \
             renewal_date, notice_days, tiers, destinations, recipients) \
         SELECT id, $2, external_id, vendor, amount::numeric, currency, renewal_date::date, \
                notice_days, string_to_array(tiers, ',')::int[], \
                string_to_array(destinations, E'\\x1f'), string_to_array(recipients, E'\\x1f') \
         FROM unnest($1::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
                     $8::int[], $9::text[], $10::text[], $11::text[]) \
              AS i(id, external_id, vendor, amount, currency, renewal_date, notice_days, tiers, \
                   destinations, recipients) \
         ORDER BY external_id \
         ON CONFLICT (tenant_id, external_id) DO UPDATE SET \
             vendor = EXCLUDED.vendor, amount = EXCLUDED.amount, currency = EXCLUDED.currency, \
             renewal_date = EXCLUDED.renewal_date, notice_days = EXCLUDED.notice_days, \
             tiers = EXCLUDED.tiers, destinations = EXCLUDED.destinations, \
             recipients = EXCLUDED.recipients, updated_at = now() \
         RETURNING (xmax = 0)",
    )
    .bind(&columns.id)
    .bind(tenant_id)
    .bind(&columns.external_id)
    .bind(&columns.vendor)
    .bind(&columns.amount)
    .bind(&columns.currency)
    .bind(&columns.renewal_date)
    .bind(&columns.notice_days)
    .bind(&columns.tiers)
    .bind(&columns.destinations)
    .bind(&columns.recipients)
    .fetch_all(db)
    .await?;
    let inserted = rows.iter().filter(|new| **new).count() as u64;
    Ok((inserted, rows.len() as u64 - inserted))
}

/// [`ContractInput`]s turned into one array per column, for `unnest`. A contract's lists
/// travel as text (tiers joined by commas, names and addresses by the unit separator),
/// since a PostgreSQL array of arrays must be rectangular.
#[derive(Default)]
struct ContractColumns<'a> {
    id: Vec<Uuid>,
    external_id: Vec<&'a str>,
    vendor: Vec<&'a str>,
    amount: Vec<&'a str>,
    currency: Vec<&'a str>,
    renewal_date: Vec<&'a str>,
    notice_days: Vec<i32>,
    tiers: Vec<Option<String>>,
    destinations: Vec<Option<String>>,
    recipients: Vec<Option<String>>,
}

impl<'a> ContractColumns<'a> {
    fn of(contracts: &'a [ContractInput]) -> Self {
        let join = |v: &Option<Vec<String>>| v.as_ref().map(|v| v.join("\u{1f}"));
        let mut c = ContractColumns::default();
        for contract in contracts {
            c.id.push(Uuid::now_v7());
            c.external_id.push(&contract.external_id);
            c.vendor.push(&contract.vendor);
            c.amount.push(&contract.amount);
            c.currency.push(&contract.currency);
            c.renewal_date.push(&contract.renewal_date);
            c.notice_days.push(contract.notice_days as i32);
            c.tiers.push(contract.tiers.as_ref().map(|tiers| {
                tiers
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }));
            c.destinations.push(join(&contract.destinations));
            c.recipients.push(join(&contract.recipients));
        }
        c
    }
}

/// A contract with what its evaluation needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ContractToEvaluate {
    /// The tenant.
    pub tenant_id: Uuid,
    /// Its IANA time zone.
    pub time_zone: String,
    /// The contract's external id.
    pub external_id: String,
    /// Vendor.
    pub vendor: String,
    /// Amount, decimal text.
    pub amount: String,
    /// Currency.
    pub currency: String,
    /// `YYYY-MM-DD`.
    pub renewal_date: String,
    /// Notice days.
    pub notice_days: i32,
    /// Effective tiers (contract's, else tenant's).
    pub tiers: Vec<i32>,
    /// Destination names, or `None` for all enabled ones.
    pub destinations: Option<Vec<String>>,
    /// The contract's owners, if it names any.
    pub recipients: Option<Vec<String>>,
}

/// Contracts whose action date is not more than a day in the past (UTC; the exact day
/// count happens in the tenant's zone), in a stable order.
pub async fn contracts_to_evaluate(
    db: impl PgExecutor<'_>,
    today_utc: &str,
) -> Result<Vec<ContractToEvaluate>, StoreError> {
    let rows = sqlx::query_as::<_, ContractToEvaluate>(
        "SELECT c.tenant_id, t.time_zone, c.external_id, c.vendor, c.amount::text AS amount, \
                c.currency, c.renewal_date::text AS renewal_date, c.notice_days, \
                COALESCE(c.tiers, t.renewal_tiers) AS tiers, c.destinations, c.recipients \
         FROM contracts c JOIN tenants t ON t.id = c.tenant_id \
         WHERE c.renewal_date - c.notice_days >= $1::date - 1 \
         ORDER BY c.tenant_id, c.external_id",
    )
    .bind(today_utc)
    .fetch_all(db)
    .await?;
    Ok(rows)
}

/// A tenant's destinations: name, id, enabled.
pub async fn destination_index(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
) -> Result<Vec<(String, Uuid, bool)>, StoreError> {
    let rows = sqlx::query_as::<_, (String, Uuid, bool)>(
        "SELECT name, id, enabled FROM destinations WHERE tenant_id = $1 ORDER BY name",
    )
    .bind(tenant_id)
    .fetch_all(db)
    .await?;
    Ok(rows)
}

/// Sets a tenant's time zone and renewal tiers.
pub async fn configure_tenant(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    time_zone: Option<&str>,
    tiers: Option<&[u32]>,
    locale: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE tenants SET time_zone = COALESCE($2, time_zone), \
             renewal_tiers = COALESCE($3::int[], renewal_tiers), \
             locale = COALESCE($4, locale) WHERE id = $1",
    )
    .bind(tenant_id)
    .bind(time_zone)
    .bind(tiers.map(|t| t.iter().map(|d| *d as i32).collect::<Vec<_>>()))
    .bind(locale)
    .execute(db)
    .await?;
    Ok(())
}

/// A watchlist entry to add.
#[derive(Debug, Clone)]
pub struct NewWatchlistEntry {
    /// Tenant.
    pub tenant_id: Uuid,
    /// Unique name in the tenant.
    pub name: String,
    /// Query text (already checked).
    pub query: String,
    /// Destination names.
    pub destinations: Vec<String>,
    /// Group articles of one event into one alert.
    pub group_events: bool,
    /// Window for same-title grouping, in seconds.
    pub group_window_secs: u64,
}

/// Adds a watchlist entry.
pub async fn add_watchlist_entry(
    db: impl PgExecutor<'_>,
    entry: &NewWatchlistEntry,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO watchlist_entries (id, tenant_id, name, query, destinations, group_events, \
             group_window) VALUES ($1, $2, $3, $4, $5, $6, make_interval(secs => $7))",
    )
    .bind(id)
    .bind(entry.tenant_id)
    .bind(&entry.name)
    .bind(&entry.query)
    .bind(&entry.destinations)
    .bind(entry.group_events)
    .bind(entry.group_window_secs as f64)
    .execute(db)
    .await
    .map_err(|err| {
        if StoreError::is_unique_violation(&err) {
            StoreError::AlreadyExists {
                what: "watchlist entry",
                name: entry.name.clone(),
            }
        } else {
            StoreError::Database(err)
        }
    })?;
    Ok(id)
}

/// A watchlist entry with what its evaluation needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WatchlistEntry {
    /// Its id.
    pub id: Uuid,
    /// Tenant.
    pub tenant_id: Uuid,
    /// Name.
    pub name: String,
    /// Query text.
    pub query: String,
    /// Destination names.
    pub destinations: Vec<String>,
    /// Grouping on.
    pub group_events: bool,
    /// Grouping window in seconds.
    pub group_window_secs: f64,
    /// Watermark: articles up to this sequence number are evaluated.
    pub evaluated_through: i64,
}

/// Every watchlist entry.
pub async fn watchlist_entries(db: impl PgExecutor<'_>) -> Result<Vec<WatchlistEntry>, StoreError> {
    let rows = sqlx::query_as::<_, WatchlistEntry>(
        "SELECT id, tenant_id, name, query, destinations, group_events, \
                extract(epoch FROM group_window)::float8 AS group_window_secs, evaluated_through \
         FROM watchlist_entries ORDER BY tenant_id, name",
    )
    .fetch_all(db)
    .await?;
    Ok(rows)
}

/// Moves an entry's watermark forward (never back: a slower concurrent decider may finish
/// later with a lower one).
pub async fn advance_watermark(
    db: impl PgExecutor<'_>,
    entry_id: Uuid,
    through: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE watchlist_entries SET evaluated_through = greatest(evaluated_through, $2) \
         WHERE id = $1",
    )
    .bind(entry_id)
    .bind(through)
    .execute(db)
    .await?;
    Ok(())
}

/// An article (a Webz.io post).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Article {
    /// The source's uuid; an article is stored once by it.
    pub uuid: String,
    /// Link.
    pub url: String,
    /// Title.
    pub title: String,
    /// Body text.
    pub text: String,
    /// Publication time, RFC 3339.
    pub published: String,
    /// Language.
    pub language: Option<String>,
    /// Site.
    pub site: Option<String>,
    /// Thread uuid (one event).
    pub thread_uuid: Option<String>,
}

/// Stores articles, each once by uuid, in one statement. Returns how many were new.
///
/// Ingests are serialised by an advisory lock taken before any sequence number is drawn:
/// watchlists evaluate "everything after my watermark" in sequence order, which is only
/// sound if the committed articles always form a prefix of that order. Two overlapping
/// ingests could otherwise commit numbers out of order, and an evaluation in between
/// would move a watermark past an article that was not visible yet.
pub async fn insert_articles(pool: &PgPool, articles: &[Article]) -> Result<u64, StoreError> {
    if articles.is_empty() {
        return Ok(0);
    }
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('outbox.articles.ingest'))")
        .execute(&mut *tx)
        .await?;
    let titles: Vec<String> = articles
        .iter()
        .map(|a| outbox_core::watchlist_query::words(&a.title).join(" "))
        .collect();
    let inserted = sqlx::query(
        "INSERT INTO articles (uuid, url, title, text, published, language, site, thread_uuid, \
             normalized_title) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                              $5::text[]::timestamptz[], $6::text[], $7::text[], $8::text[], $9::text[]) \
         ON CONFLICT (uuid) DO NOTHING",
    )
    .bind(articles.iter().map(|a| a.uuid.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.url.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.title.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.text.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.published.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.language.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.site.clone()).collect::<Vec<_>>())
    .bind(articles.iter().map(|a| a.thread_uuid.clone()).collect::<Vec<_>>())
    .bind(titles)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(inserted.rows_affected())
}

/// An article with its ingest sequence number.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredArticle {
    /// Ingest order.
    pub seq: i64,
    /// The article.
    #[sqlx(flatten)]
    pub article: Article,
}

/// Articles ingested after `seq`, oldest first, at most `limit`.
pub async fn articles_after(
    db: impl PgExecutor<'_>,
    seq: i64,
    limit: i64,
) -> Result<Vec<StoredArticle>, StoreError> {
    let rows = sqlx::query_as::<_, StoredArticle>(
        "SELECT seq, uuid, url, title, text, \
                to_char(published AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS published, \
                language, site, thread_uuid \
         FROM articles WHERE seq > $1 ORDER BY seq LIMIT $2",
    )
    .bind(seq)
    .bind(limit)
    .fetch_all(db)
    .await?;
    Ok(rows)
}

/// The event `uuid` belongs to for a grouping watchlist entry, decided once: the stored
/// key of the earliest related article already keyed for this entry (same thread, or the
/// same normalised title published within `window_secs`), else the article's own uuid.
/// Callers hold the entry's evaluation lock ([`lock_entry`]), so keys are assigned in
/// ingest order by one evaluator at a time.
pub async fn event_key(
    conn: &mut sqlx::PgConnection,
    entry_id: Uuid,
    uuid: &str,
    window_secs: f64,
) -> Result<String, StoreError> {
    let key = sqlx::query_scalar::<_, String>(
        "WITH this AS (SELECT * FROM articles WHERE uuid = $2), \
         related AS ( \
             SELECT e.event_key FROM this \
             JOIN articles other ON (other.thread_uuid = this.thread_uuid) \
                  OR (other.normalized_title = this.normalized_title \
                      AND other.published BETWEEN this.published - make_interval(secs => $3) \
                                              AND this.published + make_interval(secs => $3)) \
             JOIN watchlist_events e ON e.entry_id = $1 AND e.article_uuid = other.uuid \
             ORDER BY other.seq LIMIT 1 \
         ) \
         INSERT INTO watchlist_events (entry_id, article_uuid, event_key) \
         SELECT $1, $2, COALESCE((SELECT event_key FROM related), $2) \
         ON CONFLICT (entry_id, article_uuid) DO UPDATE SET event_key = watchlist_events.event_key \
         RETURNING event_key",
    )
    .bind(entry_id)
    .bind(uuid)
    .bind(window_secs)
    .fetch_one(conn)
    .await?;
    Ok(key)
}

/// Takes an entry's evaluation lock for the transaction and returns its watermark:
/// deciders evaluate one entry one at a time, so a page of articles, its alerts and the
/// watermark move together.
pub async fn lock_entry(conn: &mut sqlx::PgConnection, entry_id: Uuid) -> Result<i64, StoreError> {
    let watermark = sqlx::query_scalar::<_, i64>(
        "SELECT evaluated_through FROM watchlist_entries WHERE id = $1 FOR UPDATE",
    )
    .bind(entry_id)
    .fetch_one(conn)
    .await?;
    Ok(watermark)
}

/// Where the poller resumes for `query` at `source`.
pub async fn news_cursor(
    db: impl PgExecutor<'_>,
    source: &str,
    query: &str,
) -> Result<Option<String>, StoreError> {
    let next = sqlx::query_scalar::<_, String>(
        "SELECT next_url FROM news_cursors WHERE source = $1 AND query = $2",
    )
    .bind(source)
    .bind(query)
    .fetch_optional(db)
    .await?;
    Ok(next)
}

/// Records where the poller resumes (a URL without the token).
pub async fn save_news_cursor(
    db: impl PgExecutor<'_>,
    source: &str,
    query: &str,
    next_url: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO news_cursors (source, query, next_url) VALUES ($1, $2, $3) \
         ON CONFLICT (source, query) DO UPDATE SET next_url = EXCLUDED.next_url, updated_at = now()",
    )
    .bind(source)
    .bind(query)
    .bind(next_url)
    .execute(db)
    .await?;
    Ok(())
}

/// Starts a transaction (for imports that must be all or nothing).
pub async fn begin(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    Ok(pool.begin().await?)
}
