//! The news watchlist monitor: articles in the Webz.io News API format in (from files or a
//! polled endpoint), one alert per (watchlist entry, article or event, destination) out.
//!
//! Identity: subject `watchlist:<entry id>`, occurrence `article:<uuid>`; with event
//! grouping on, `event:<uuid of the event's first ingested article>`.

use outbox_core::identity::check_identity_field;
use outbox_core::watchlist_query::Query;
use outbox_store::alerts::MonitorAlert;
use outbox_store::sources::{self, Article};
use outbox_store::PgPool;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use uuid::Uuid;

use crate::DecideError;

/// A page of the Webz.io News API.
#[derive(Debug, Deserialize)]
struct Page {
    posts: Vec<serde_json::Value>,
    #[serde(default)]
    next: Option<String>,
    #[serde(default, rename = "moreResultsAvailable")]
    more_results_available: Option<i64>,
}

/// Largest page (or article file) read, in bytes: a bigger one is refused before it is
/// parsed, so one page never costs more than a few times this in memory.
pub const MAX_ARTICLE_PAGE_BYTES: usize = 16 * 1024 * 1024;
/// Longest article text, in bytes of UTF-8. A longer post is refused with its reason
/// (skipped, when a polled feed sent it).
pub const MAX_ARTICLE_TEXT_BYTES: usize = 1024 * 1024;
/// Longest title, URL, site, language or time of an article, in bytes.
pub const MAX_ARTICLE_FIELD_BYTES: usize = 8 * 1024;
/// Longest article uuid, in bytes: it becomes part of an alert's occurrence.
pub const MAX_ARTICLE_UUID_BYTES: usize = 200;

/// Why an article file (or page) is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} bad post(s), nothing ingested: {}", problems.len(), outbox_core::untrusted::visible(&problems.join("; ")))]
pub struct ArticleError {
    /// `post 3: field "published" is missing`, ...
    pub problems: Vec<String>,
}

/// Reads a Webz.io page (`{"posts": [...], ...}`) into articles, checking every post:
/// one bad post refuses the page (for files an operator ingests and can fix).
pub fn parse_page(text: &str) -> Result<(Vec<Article>, Option<String>, i64), ArticleError> {
    let (articles, next, more, problems) = read_page(text)?;
    if !problems.is_empty() {
        return Err(ArticleError { problems });
    }
    Ok((articles, next, more))
}

/// A page as read, with the problems of its bad posts.
type PageRead = (Vec<Article>, Option<String>, i64, Vec<String>);

fn read_page(text: &str) -> Result<PageRead, ArticleError> {
    if text.len() > MAX_ARTICLE_PAGE_BYTES {
        return Err(ArticleError {
            problems: vec![format!(
                "the page is {} bytes; the limit is {MAX_ARTICLE_PAGE_BYTES} bytes (16 MiB)",
                text.len()
            )],
        });
    }
    let page: Page = serde_json::from_str(text).map_err(|err| ArticleError {
        problems: vec![format!(
            "not a Webz.io page (an object with `posts`): {err}"
        )],
    })?;
    let mut articles = Vec::new();
    let mut problems = Vec::new();
    for (index, post) in page.posts.iter().enumerate() {
        match article(post) {
            Ok(article) => articles.push(article),
            Err(reason) => problems.push(format!("post {}: {reason}", index + 1)),
        }
    }
    Ok((
        articles,
        page.next,
        page.more_results_available.unwrap_or(0),
        problems,
    ))
}

fn article(post: &serde_json::Value) -> Result<Article, String> {
    let text_field = |name: &str, required: bool| -> Result<Option<String>, String> {
        let value = match &post[name] {
            serde_json::Value::String(s) if !s.trim().is_empty() => s,
            serde_json::Value::Null | serde_json::Value::String(_) if !required => return Ok(None),
            serde_json::Value::Null => return Err(format!("field `{name}` is missing")),
            serde_json::Value::String(_) => return Err(format!("field `{name}` is empty")),
            _ => return Err(format!("field `{name}` must be a string")),
        };
        let max = if name == "text" {
            MAX_ARTICLE_TEXT_BYTES
        } else {
            MAX_ARTICLE_FIELD_BYTES
        };
        if value.len() > max {
            return Err(format!(
                "field `{name}` is {} bytes; the limit is {max} bytes",
                value.len()
            ));
        }
        Ok(Some(value.clone()))
    };
    let uuid = text_field("uuid", true)?.unwrap_or_default();
    // The uuid becomes part of an alert's identity: the API's rules apply.
    check_identity_field("uuid", &uuid).map_err(|err| err.to_string())?;
    if uuid.len() > MAX_ARTICLE_UUID_BYTES {
        return Err(format!(
            "field `uuid` is {} bytes; the limit is {MAX_ARTICLE_UUID_BYTES} bytes",
            uuid.len()
        ));
    }
    let url = text_field("url", true)?.unwrap_or_default();
    let title = text_field("title", true)?.unwrap_or_default();
    let published = text_field("published", true)?.unwrap_or_default();
    let published = published
        .parse::<jiff::Timestamp>()
        .map_err(|_| format!("field `published` is not an RFC 3339 time: `{published}`"))?
        .to_string();
    let thread = &post["thread"];
    let thread_text = |name: &str| -> Result<Option<String>, String> {
        match thread[name].as_str() {
            Some(value) if value.len() > MAX_ARTICLE_FIELD_BYTES => Err(format!(
                "field `thread.{name}` is {} bytes; the limit is {MAX_ARTICLE_FIELD_BYTES} bytes",
                value.len()
            )),
            value => Ok(value.map(str::to_owned)),
        }
    };
    Ok(Article {
        uuid,
        url,
        title,
        text: text_field("text", false)?.unwrap_or_default(),
        published,
        language: text_field("language", false)?,
        site: thread_text("site")?,
        thread_uuid: thread_text("uuid")?,
    })
}

/// Ingests a page of articles: each stored once by uuid. Returns how many were new.
pub async fn ingest(pool: &PgPool, text: &str) -> Result<(u64, usize), DecideError> {
    let (articles, ..) = parse_page(text)?;
    let new = sources::insert_articles(pool, &articles).await?;
    Ok((new, articles.len()))
}

#[derive(Serialize)]
struct NewsPayload<'a> {
    kind: &'static str,
    watchlist: &'a str,
    article: &'a str,
    title: &'a str,
    url: &'a str,
    site: Option<&'a str>,
    published: &'a str,
    matched_terms: Vec<String>,
    snippet: String,
}

/// Articles read per round for one entry.
const PAGE: i64 = 500;

/// Evaluates every watchlist entry against the articles ingested since its watermark and
/// approves the alerts for matches. Each page of articles is one transaction holding the
/// entry's evaluation lock: its alerts, event keys and the new watermark commit together,
/// and concurrent deciders take turns per entry instead of doing the work twice.
/// Returns how many alerts were created.
pub(crate) async fn evaluate(
    pool: &PgPool,
    actor: &str,
    run: &crate::MonitorRun,
) -> Result<u64, DecideError> {
    let mut created = 0;
    let mut destinations: HashMap<Uuid, Vec<(String, Uuid, bool)>> = HashMap::new();
    for entry in sources::watchlist_entries(pool).await? {
        let Ok(query) = Query::parse(&entry.query) else {
            tracing::error!(entry = %entry.name, "stored query does not parse; skipped");
            continue;
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = destinations.entry(entry.tenant_id)
        {
            slot.insert(sources::destination_index(pool, entry.tenant_id).await?);
        }
        let targets: Vec<Uuid> = destinations[&entry.tenant_id]
            .iter()
            .filter(|(name, ..)| entry.destinations.contains(name))
            .map(|(_, id, _)| *id)
            .collect();
        loop {
            let mut tx = pool.begin().await.map_err(outbox_store::StoreError::from)?;
            let watermark = sources::lock_entry(&mut tx, entry.id).await?;
            let batch = sources::articles_after(&mut *tx, watermark, PAGE).await?;
            let Some(last) = batch.last().map(|a| a.seq) else {
                break;
            };
            let mut alerts = Vec::new();
            for stored in &batch {
                let a = &stored.article;
                let Some(terms) = query.matches(&a.title, &a.text) else {
                    continue;
                };
                let occurrence = if entry.group_events {
                    let key =
                        sources::event_key(&mut tx, entry.id, &a.uuid, entry.group_window_secs)
                            .await?;
                    format!("event:{key}")
                } else {
                    format!("article:{}", a.uuid)
                };
                let payload = serde_json::to_string(&NewsPayload {
                    kind: "news",
                    watchlist: &entry.name,
                    article: &a.uuid,
                    title: &a.title,
                    url: &a.url,
                    site: a.site.as_deref(),
                    published: &a.published,
                    snippet: snippet(&a.text, &terms),
                    matched_terms: terms,
                })
                .map_err(|err| DecideError::Source(err.to_string()))?;
                for destination_id in &targets {
                    alerts.push(MonitorAlert {
                        destination_id: *destination_id,
                        subject: format!("watchlist:{}", entry.id),
                        occurrence: occurrence.clone(),
                        payload_json: payload.clone(),
                    });
                }
            }
            created += crate::approve_sorted(&mut tx, entry.tenant_id, alerts, actor, run).await?;
            sources::advance_watermark(&mut *tx, entry.id, last).await?;
            tx.commit().await.map_err(outbox_store::StoreError::from)?;
        }
    }
    if created > 0 {
        outbox_store::wake_ups::notify_due(pool).await?;
    }
    Ok(created)
}

/// About 200 characters of text around the first matched term.
fn snippet(text: &str, terms: &[String]) -> String {
    let lower = text.to_lowercase();
    let at = terms
        .iter()
        .filter_map(|t| lower.find(t.split(' ').next().unwrap_or(t)))
        .min()
        .unwrap_or(0);
    // Byte offsets in the lowercased text can differ from the original's; work in chars.
    let char_at = lower[..at.min(lower.len())].chars().count();
    let start = char_at.saturating_sub(60);
    let excerpt: String = text.chars().skip(start).take(200).collect();
    let mut snippet = excerpt.split_whitespace().collect::<Vec<_>>().join(" ");
    if start > 0 {
        snippet.insert(0, '…');
    }
    if text.chars().count() > start + 200 {
        snippet.push('…');
    }
    snippet
}

/// A Webz.io-compatible endpoint to poll.
#[derive(Debug, Clone)]
pub struct NewsSource {
    /// The endpoint, e.g. `https://api.webz.io/newsApiLite`.
    pub url: String,
    /// The API token (from `WEBZ_TOKEN`); never stored, never logged, sent only to the
    /// endpoint's own origin.
    pub token: Option<String>,
    /// Which addresses the poller may connect to.
    pub egress: outbox_egress::Guard,
}

/// Largest feed page read; a bigger one is refused unread past this point, so a hostile or
/// broken feed cannot make the decider hold an unbounded body in memory.
pub const MAX_FEED_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// Longest a whole poll request (connect, headers and body) may take.
const FEED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl NewsSource {
    /// The client the poller uses: behind the egress guard, no redirects, no `Referer`.
    pub fn client(&self) -> Result<reqwest::Client, DecideError> {
        self.egress
            .client_builder()
            .timeout(FEED_TIMEOUT)
            .build()
            .map_err(|err| DecideError::Source(format!("news client: {err}")))
    }
}

/// Polls the source once for every distinct watchlist query: resumes at the query's
/// cursor (or starts a new query), follows `next` until no more results, and stores the
/// cursor after every page, so a restart resumes where it stopped. Returns articles
/// ingested.
///
/// Only the configured endpoint's origin (scheme, host, port) is ever asked, and so only
/// it ever sees the token: a `next` link or cursor elsewhere is refused, and an answer
/// that redirects is an error (redirects are not followed).
pub async fn poll(
    pool: &PgPool,
    http: &reqwest::Client,
    source: &NewsSource,
) -> Result<u64, DecideError> {
    let base = url::Url::parse(&source.url)
        .map_err(|err| DecideError::Source(format!("news URL `{}`: {err}", source.url)))?;
    let mut queries: Vec<String> = sources::watchlist_entries(pool)
        .await?
        .into_iter()
        .map(|e| e.query)
        .collect();
    queries.sort();
    queries.dedup();
    let mut ingested = 0;
    for query in queries {
        let mut next = match sources::news_cursor(pool, &source.url, &query).await? {
            Some(saved) => base
                .join(&saved)
                .map_err(|err| DecideError::Source(format!("saved cursor: {err}")))?,
            None => {
                let mut first = base.clone();
                first.query_pairs_mut().append_pair("q", &query);
                first
            }
        };
        // A bound on pages per poll keeps one busy query from starving the others.
        for _ in 0..100 {
            let body = fetch_page(http, source, &base, &next).await?;
            // A feed's bad post is skipped (and logged), not allowed to block the cursor
            // and with it every later page.
            let (articles, next_link, more, problems) = read_page(&body)?;
            for problem in &problems {
                tracing::warn!(query = %query, problem = %problem, "skipped a post the feed sent");
            }
            ingested += sources::insert_articles(pool, &articles).await?;
            let Some(link) = next_link else {
                break;
            };
            let mut resolved = base
                .join(&link)
                .map_err(|err| DecideError::Source(format!("`next` link: {err}")))?;
            if resolved.origin() != base.origin() {
                return Err(DecideError::Source(format!(
                    "`next` link points to another origin ({}); not followed",
                    resolved.origin().ascii_serialization()
                )));
            }
            // The cursor is stored without the token.
            let kept: Vec<(String, String)> = resolved
                .query_pairs()
                .filter(|(k, _)| k != "token")
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            resolved.query_pairs_mut().clear().extend_pairs(kept);
            sources::save_news_cursor(pool, &source.url, &query, resolved.as_str()).await?;
            next = resolved;
            if more <= 0 || articles.is_empty() {
                break;
            }
        }
    }
    Ok(ingested)
}

/// Fetches one page of the feed: the token added only for the endpoint's own origin, the
/// address checked by the guard, a redirect refused, the body read up to
/// [`MAX_FEED_PAGE_BYTES`].
async fn fetch_page(
    http: &reqwest::Client,
    source: &NewsSource,
    base: &url::Url,
    page: &url::Url,
) -> Result<String, DecideError> {
    let failed = |why: String| DecideError::Source(format!("news endpoint: {why}"));
    if page.origin() != base.origin() {
        return Err(failed(format!(
            "{} is not the endpoint's origin; not asked",
            page.origin().ascii_serialization()
        )));
    }
    source
        .egress
        .check_url(page)
        .map_err(|err| failed(err.to_string()))?;
    let mut request = page.clone();
    if let Some(token) = &source.token {
        request.query_pairs_mut().append_pair("token", token);
    }
    let mut response = http.get(request).send().await.map_err(|err| {
        failed(match outbox_egress::refusal_of(&err) {
            Some(refused) => refused.to_string(),
            None => err.without_url().to_string(),
        })
    })?;
    let status = response.status();
    if status.is_redirection() {
        return Err(failed(format!(
            "answered {status} (a redirect); redirects are not followed, fix --news-url"
        )));
    }
    if !status.is_success() {
        return Err(failed(format!("answered {status}")));
    }
    let too_big = || {
        failed(format!(
            "a page is larger than {MAX_FEED_PAGE_BYTES} bytes; not read"
        ))
    };
    if response
        .content_length()
        .is_some_and(|length| length > MAX_FEED_PAGE_BYTES as u64)
    {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| failed(err.without_url().to_string()))?
    {
        if body.len() + chunk.len() > MAX_FEED_PAGE_BYTES {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| failed("a page is not UTF-8 text".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_need_uuid_url_title_and_a_time() {
        let page = r#"{"posts": [{"uuid": "u1", "url": "https://x", "title": "T", "published": "2027-01-01T10:00:00+01:00",
                        "thread": {"uuid": "t1", "site": "x.example"}},
                       {"uuid": "u2", "url": "https://y", "title": "", "published": "yesterday"}],
                       "next": "/n?ts=1", "moreResultsAvailable": 3}"#;
        let err = parse_page(page).unwrap_err();
        assert_eq!(
            err.problems,
            vec!["post 2: field `title` is empty".to_owned()]
        );
        let ok = r#"{"posts": [{"uuid": "u1", "url": "https://x", "title": "T", "published": "2027-01-01T10:00:00+01:00",
                      "thread": {"uuid": "t1", "site": "x.example"}}], "next": "/n?ts=1", "moreResultsAvailable": 3}"#;
        let (articles, next, more) = parse_page(ok).unwrap();
        assert_eq!(articles[0].published, "2027-01-01T09:00:00Z");
        assert_eq!(articles[0].site.as_deref(), Some("x.example"));
        assert_eq!(next.as_deref(), Some("/n?ts=1"));
        assert_eq!(more, 3);
    }

    fn page_of(post: &serde_json::Value) -> String {
        serde_json::json!({ "posts": [post] }).to_string()
    }

    fn post(uuid: &str, title: &str, text: &str) -> serde_json::Value {
        serde_json::json!({"uuid": uuid, "url": "https://x", "title": title, "text": text,
                           "published": "2027-01-01T10:00:00Z"})
    }

    #[test]
    fn article_text_and_fields_are_capped() {
        let at_cap = "a".repeat(MAX_ARTICLE_TEXT_BYTES);
        assert!(parse_page(&page_of(&post("u1", "T", &at_cap))).is_ok());
        let over = "a".repeat(MAX_ARTICLE_TEXT_BYTES + 1);
        let err = parse_page(&page_of(&post("u1", "T", &over))).unwrap_err();
        assert_eq!(
            err.problems,
            vec![format!(
                "post 1: field `text` is {} bytes; the limit is {MAX_ARTICLE_TEXT_BYTES} bytes",
                MAX_ARTICLE_TEXT_BYTES + 1
            )]
        );
        let long_title = "t".repeat(MAX_ARTICLE_FIELD_BYTES + 1);
        let err = parse_page(&page_of(&post("u1", &long_title, ""))).unwrap_err();
        assert!(
            err.problems[0].contains("field `title` is 8193 bytes"),
            "{err}"
        );
        let mut long_site = post("u1", "T", "");
        long_site["thread"] = serde_json::json!({"site": "s".repeat(MAX_ARTICLE_FIELD_BYTES + 1)});
        let err = parse_page(&page_of(&long_site)).unwrap_err();
        assert!(err.problems[0].contains("field `thread.site`"), "{err}");
    }

    #[test]
    fn a_polled_page_keeps_its_good_posts_and_names_the_oversized_one() {
        // The poller reads pages with `read_page`: a bad post is skipped, not fatal.
        let over = "a".repeat(MAX_ARTICLE_TEXT_BYTES + 1);
        let page = serde_json::json!({"posts": [post("u1", "T", "fine"), post("u2", "T", &over)]})
            .to_string();
        let (articles, _, _, problems) = read_page(&page).unwrap();
        assert_eq!(articles.len(), 1);
        assert_eq!(articles[0].uuid, "u1");
        assert_eq!(
            problems,
            vec![format!(
                "post 2: field `text` is {} bytes; the limit is {MAX_ARTICLE_TEXT_BYTES} bytes",
                MAX_ARTICLE_TEXT_BYTES + 1
            )]
        );
    }

    #[test]
    fn pages_over_the_cap_are_refused_before_parsing() {
        // Not even JSON: the size is judged first.
        let huge = "x".repeat(MAX_ARTICLE_PAGE_BYTES + 1);
        let err = parse_page(&huge).unwrap_err();
        assert!(
            err.problems[0].starts_with("the page is 16777217 bytes"),
            "{err}"
        );
    }

    #[test]
    fn article_uuids_follow_the_identity_rules() {
        for uuid in ["u\u{1b}[2J", "u\nv", "u\u{202e}v", "u\u{9b}v"] {
            let err = parse_page(&page_of(&post(uuid, "T", ""))).unwrap_err();
            assert!(
                err.problems[0].starts_with("post 1: field `uuid` contains"),
                "{err}"
            );
            assert!(!err
                .to_string()
                .chars()
                .any(outbox_core::untrusted::is_unsafe_on_terminal));
        }
        let long = "u".repeat(MAX_ARTICLE_UUID_BYTES + 1);
        assert!(parse_page(&page_of(&post(&long, "T", ""))).is_err());
    }

    #[test]
    fn snippets_are_around_the_first_match() {
        let text = format!(
            "{} Acme Tools raised prices. {}",
            "filler ".repeat(40),
            "more ".repeat(60)
        );
        let s = snippet(&text, &["acme tools".to_owned()]);
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("Acme Tools raised prices"), "{s}");
        assert!(s.chars().count() <= 202);
    }
}
