-- Monitors: the sources the decider watches (contracts, watchlists, articles) and what it
-- needs to resume (per-query cursors, per-entry watermarks).

-- Renewal tiers in days before the action date; a contract may override them.
ALTER TABLE tenants ADD COLUMN renewal_tiers integer[] NOT NULL DEFAULT '{60,30,15}'
    CHECK (cardinality(renewal_tiers) BETWEEN 1 AND 20);

CREATE TABLE contracts (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    external_id     text NOT NULL CHECK (octet_length(external_id) BETWEEN 1 AND 200),
    vendor          text NOT NULL CHECK (octet_length(vendor) BETWEEN 1 AND 500),
    -- Kept as written (numeric), never through a float.
    amount          numeric NOT NULL CHECK (amount >= 0),
    currency        text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    renewal_date    date NOT NULL,
    notice_days     integer NOT NULL DEFAULT 0 CHECK (notice_days BETWEEN 0 AND 3660),
    -- NULL: the tenant's tiers.
    tiers           integer[] CHECK (cardinality(tiers) BETWEEN 1 AND 20),
    -- Destination names; NULL: every enabled destination of the tenant.
    destinations    text[] CHECK (cardinality(destinations) >= 1),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, external_id)
);

CREATE TABLE watchlist_entries (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name            text NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 200),
    query           text NOT NULL CHECK (octet_length(query) BETWEEN 1 AND 1000),
    destinations    text[] NOT NULL CHECK (cardinality(destinations) >= 1),
    -- Articles of one event share one alert: same thread, or the same normalised title
    -- within the window.
    group_events    boolean NOT NULL DEFAULT false,
    group_window    interval NOT NULL DEFAULT interval '48 hours' CHECK (group_window > interval '0'),
    -- Articles up to this ingest sequence number have been evaluated for this entry.
    evaluated_through bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- News articles (Webz.io post format), stored once by their uuid.
CREATE TABLE articles (
    uuid             text PRIMARY KEY CHECK (octet_length(uuid) BETWEEN 1 AND 200),
    -- Ingest order: watchlists evaluate what arrived since their watermark.
    seq              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    url              text NOT NULL,
    title            text NOT NULL,
    text             text NOT NULL DEFAULT '',
    published        timestamptz NOT NULL,
    language         text,
    site             text,
    thread_uuid      text,
    normalized_title text NOT NULL,
    ingested_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX articles_thread_idx ON articles (thread_uuid) WHERE thread_uuid IS NOT NULL;
CREATE INDEX articles_title_idx ON articles (normalized_title, published);

-- Where a news poller resumes, per source and query. The stored URL never carries the
-- API token: it is added back from the environment on each request.
CREATE TABLE news_cursors (
    source      text NOT NULL,
    query       text NOT NULL,
    next_url    text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, query)
);

-- Which event each matching article belongs to, per watchlist entry with grouping on.
-- Decided once, when the article is first evaluated, by inheriting the key of an already
-- keyed related article (same thread, or same title within the entry's window), so a
-- chain of related articles stays one event whatever order they are seen in later.
CREATE TABLE watchlist_events (
    entry_id     uuid NOT NULL REFERENCES watchlist_entries (id) ON DELETE CASCADE,
    article_uuid text NOT NULL REFERENCES articles (uuid) ON DELETE CASCADE,
    event_key    text NOT NULL,
    PRIMARY KEY (entry_id, article_uuid)
);
