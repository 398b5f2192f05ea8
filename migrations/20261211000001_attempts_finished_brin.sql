-- Operators' statistics ("attempts in the last hour", the last day's failures per
-- destination) find recent attempt rows by `finished_at`. A B-tree on it added an index
-- entry to every delivery (64 bytes of WAL, and its page splits) to serve a query that
-- runs every few seconds at most. Attempt rows are insert-only and written in time
-- order, so the rows of an hour sit in a few adjacent page ranges: a BRIN index finds
-- them, and an insert into a range not yet summarized writes nothing to the index.
-- minmax-multi keeps several intervals per range, so pages that retention emptied and new
-- rows refilled do not make every range match every hour. `autosummarize` summarizes each
-- range as it fills, so ranges left unsummarized (always read) stay few between vacuums.
DROP INDEX delivery_attempts_finished_idx;
CREATE INDEX delivery_attempts_finished_brin ON delivery_attempts
    USING brin (finished_at timestamptz_minmax_multi_ops) WITH (autosummarize = on);
