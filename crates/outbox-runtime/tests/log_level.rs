//! With span export off, logging costs what it always did: the process's global maximum
//! level is the log filter's, so a disabled event or span (a query's debug line, a
//! delivery's info span under `warn`) is skipped at its call site, before any work.

#[test]
fn without_export_the_global_level_is_the_log_filters() {
    std::env::remove_var("OTEL_EXPORTER_OTLP_ENDPOINT");
    std::env::remove_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    std::env::remove_var("RUST_LOG");
    outbox_runtime::init_tracing_quiet("test");
    assert_eq!(
        tracing::level_filters::LevelFilter::current(),
        tracing::level_filters::LevelFilter::WARN
    );
    assert!(!tracing::enabled!(tracing::Level::INFO));
    assert!(!tracing::enabled!(target: "sqlx::query", tracing::Level::DEBUG));
}
