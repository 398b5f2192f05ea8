//! The standard `OTEL_*` environment read into export settings: whether spans are
//! exported at all, where to and how (the OTLP exporter and SDK environment
//! specifications), with one warning line for each value that cannot be used.
//!
//! The variables are read through a lookup function rather than from the process
//! environment directly, so that the rules are tested without touching the environment
//! other tests read. Values are parsed here even where the SDK or the OTLP builder reads
//! them too: those fall back to their defaults silently (their warnings go to internal
//! logs, which are not compiled in), and an operator should hear that a value was ignored.

use std::time::Duration;

/// `OTEL_SDK_DISABLED`: `true` turns every signal off.
pub(crate) const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// `OTEL_TRACES_EXPORTER`: `otlp` (the default) or `none`.
pub(crate) const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
/// The traces endpoint, used as it is.
pub(crate) const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The base endpoint of every signal; `/v1/traces` is appended.
pub(crate) const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TRACES_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION";
const COMPRESSION: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";
const SAMPLER: &str = "OTEL_TRACES_SAMPLER";
const SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
const BSP_MAX_QUEUE_SIZE: &str = "OTEL_BSP_MAX_QUEUE_SIZE";
const BSP_SCHEDULE_DELAY: &str = "OTEL_BSP_SCHEDULE_DELAY";
const BSP_MAX_EXPORT_BATCH_SIZE: &str = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE";
const BSP_EXPORT_TIMEOUT: &str = "OTEL_BSP_EXPORT_TIMEOUT";

/// The OTLP request timeout when none is given (the exporter specification's default).
const DEFAULT_OTLP_TIMEOUT: Duration = Duration::from_secs(10);
/// A queue larger than this is refused as a typo: spans are held in memory.
const MAX_QUEUE_SIZE: usize = 1 << 17;

/// How spans are exported, when they are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    /// The URL spans are posted to.
    pub(crate) endpoint: String,
    /// How long one OTLP request may take, retries included.
    pub(crate) timeout: Duration,
    /// Which traces are recorded.
    pub(crate) sampling: Sampling,
    /// The queue and the batches of the export thread.
    pub(crate) batch: BatchSettings,
    /// Whether the environment names the service (else the binary's name is used).
    pub(crate) service_named: bool,
}

/// The batch span processor's settings (`OTEL_BSP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSettings {
    /// Most spans waiting for export; more are dropped.
    pub(crate) max_queue_size: usize,
    /// Longest a span waits for its batch to fill.
    pub(crate) schedule_delay: Duration,
    /// Most spans in one export.
    pub(crate) max_export_batch_size: usize,
    /// Longest one export may take before its spans count as dropped.
    pub(crate) export_timeout: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            max_queue_size: 2048,
            schedule_delay: Duration::from_millis(5000),
            max_export_batch_size: 512,
            export_timeout: Duration::from_millis(30_000),
        }
    }
}

/// The sampler (`OTEL_TRACES_SAMPLER` and its argument).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sampling {
    /// The decision for a trace that starts here.
    pub(crate) root: RootSampling,
    /// Whether a span with a parent follows the parent's decision instead.
    pub(crate) parent_based: bool,
}

/// The decision for a trace that starts here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RootSampling {
    AlwaysOn,
    AlwaysOff,
    /// This fraction of traces, by trace id.
    TraceIdRatio(f64),
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            root: RootSampling::AlwaysOn,
            parent_based: true,
        }
    }
}

impl Sampling {
    /// The SDK's sampler for this choice.
    pub(crate) fn sampler(self) -> opentelemetry_sdk::trace::Sampler {
        use opentelemetry_sdk::trace::Sampler;
        let root = match self.root {
            RootSampling::AlwaysOn => Sampler::AlwaysOn,
            RootSampling::AlwaysOff => Sampler::AlwaysOff,
            RootSampling::TraceIdRatio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        if self.parent_based {
            Sampler::ParentBased(Box::new(root))
        } else {
            root
        }
    }
}

/// The environment's answer: settings when spans are to be exported, and the warnings to
/// log (each one line naming its variable) once logging is set up.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    pub(crate) settings: Option<Settings>,
    pub(crate) warnings: Vec<String>,
}

/// Reads the export settings through `lookup` (a variable's value; empty counts as unset).
pub(crate) fn read(lookup: impl Fn(&str) -> Option<String>) -> Reading {
    let get = |name: &str| {
        lookup(name)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
    };
    let mut warnings = Vec::new();
    if boolean(SDK_DISABLED, get(SDK_DISABLED), &mut warnings) {
        return Reading {
            settings: None,
            warnings,
        };
    }
    // Without an endpoint nothing is exported, and nothing else is worth a warning.
    let endpoint = match (get(TRACES_ENDPOINT), get(ENDPOINT)) {
        (Some(url), _) => (TRACES_ENDPOINT, url),
        (None, Some(base)) => (
            ENDPOINT,
            format!("{}/v1/traces", base.trim_end_matches('/')),
        ),
        (None, None) => return Reading::default(),
    };
    if let Some(exporters) = get(TRACES_EXPORTER) {
        let names: Vec<String> = exporters
            .split(',')
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        if names.iter().any(|name| name == "none") {
            return Reading {
                settings: None,
                warnings,
            };
        }
        let others: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|name| *name != "otlp")
            .collect();
        if names.len() == others.len() {
            warnings.push(format!(
                "{TRACES_EXPORTER}={exporters}: only the otlp exporter is supported; spans are \
                 not exported"
            ));
            return Reading {
                settings: None,
                warnings,
            };
        }
        if !others.is_empty() {
            warnings.push(format!(
                "{TRACES_EXPORTER}: {} not supported, left out; spans are exported over otlp",
                others.join(", ")
            ));
        }
    }
    let protocol = [TRACES_PROTOCOL, PROTOCOL]
        .into_iter()
        .find_map(|name| get(name).map(|value| (name, value)));
    if let Some((name, value)) = protocol {
        match value.to_ascii_lowercase().as_str() {
            "http/protobuf" => {}
            "grpc" | "http/json" => {
                warnings.push(format!(
                    "{name}={value}: spans are exported over OTLP/HTTP with protobuf only \
                     (http/protobuf); spans are not exported"
                ));
                return Reading {
                    settings: None,
                    warnings,
                };
            }
            _ => warnings.push(format!(
                "{name}={value} is not an OTLP protocol; http/protobuf is used"
            )),
        }
    }
    let (endpoint_name, endpoint) = endpoint;
    if let Err(reason) = check_url(&endpoint) {
        warnings.push(format!("{endpoint_name}: {reason}; spans are not exported"));
        return Reading {
            settings: None,
            warnings,
        };
    }
    let timeout = [TRACES_TIMEOUT, TIMEOUT]
        .into_iter()
        .find_map(|name| get(name).map(|value| (name, value)))
        .map_or(DEFAULT_OTLP_TIMEOUT, |(name, value)| {
            millis(name, &value, 1, &mut warnings).unwrap_or(DEFAULT_OTLP_TIMEOUT)
        });
    if let Some((name, value)) = [TRACES_HEADERS, HEADERS]
        .into_iter()
        .find_map(|name| get(name).map(|value| (name, value)))
    {
        let bad = malformed_headers(&value);
        if bad > 0 {
            // The values are not repeated: headers carry the collector's credentials.
            warnings.push(format!(
                "{name}: {bad} entr{} not a valid `key=value` header, left out",
                if bad == 1 { "y is" } else { "ies are" }
            ));
        }
    }
    if let Some((name, value)) = [TRACES_COMPRESSION, COMPRESSION]
        .into_iter()
        .find_map(|name| get(name).map(|value| (name, value)))
    {
        if !value.eq_ignore_ascii_case("none") {
            warnings.push(format!(
                "{name}={value} is not supported; spans are sent uncompressed"
            ));
        }
    }
    let sampling = sampling(get(SAMPLER), get(SAMPLER_ARG), &mut warnings);
    let batch = batch_settings(&get, &mut warnings);
    let service_named = get(SERVICE_NAME).is_some()
        || get(RESOURCE_ATTRIBUTES).is_some_and(|attributes| {
            attributes.split(',').any(|pair| {
                pair.split_once('=')
                    .is_some_and(|(key, _)| key.trim() == "service.name")
            })
        });
    Reading {
        settings: Some(Settings {
            endpoint,
            timeout,
            sampling,
            batch,
            service_named,
        }),
        warnings,
    }
}

/// A boolean by the SDK specification: `true` (any case) is true; unset, empty and
/// `false` are false; anything else is false with a warning.
fn boolean(name: &str, value: Option<String>, warnings: &mut Vec<String>) -> bool {
    match value {
        None => false,
        Some(value) if value.eq_ignore_ascii_case("true") => true,
        Some(value) if value.eq_ignore_ascii_case("false") => false,
        Some(value) => {
            warnings.push(format!(
                "{name}={value} is neither true nor false; false is used"
            ));
            false
        }
    }
}

/// An HTTP(S) URL with a host, or why not.
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("`{url}` is not a URL ({err})"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("`{url}` is not an http:// or https:// URL"));
    }
    Ok(())
}

/// A whole number of milliseconds, at least `min`; `None` (and a warning) otherwise.
fn millis(name: &str, value: &str, min: u64, warnings: &mut Vec<String>) -> Option<Duration> {
    match value.parse::<u64>() {
        Ok(ms) if ms >= min => Some(Duration::from_millis(ms)),
        _ => {
            warnings.push(format!(
                "{name}={value} is not a number of milliseconds (at least {min}); the default \
                 is used"
            ));
            None
        }
    }
}

/// How many entries of a `key=value,...` header list the OTLP exporter would leave out
/// (it drops them silently).
fn malformed_headers(list: &str) -> usize {
    list.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .filter(|entry| {
            let Some((key, value)) = entry.split_once('=') else {
                return true;
            };
            let value = percent_decoded(value.trim());
            key.trim().is_empty()
                || value.is_empty()
                || reqwest::header::HeaderName::from_bytes(key.trim().as_bytes()).is_err()
                || reqwest::header::HeaderValue::from_str(&value).is_err()
        })
        .count()
}

/// `%XX` escapes decoded, as the specification asks of header values; a broken escape is
/// kept as it is.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| value.to_owned())
}

/// The sampler named by `OTEL_TRACES_SAMPLER`, with its ratio from
/// `OTEL_TRACES_SAMPLER_ARG` (default 1.0); `parentbased_always_on` by default.
fn sampling(name: Option<String>, arg: Option<String>, warnings: &mut Vec<String>) -> Sampling {
    let Some(name) = name else {
        return Sampling::default();
    };
    let mut ratio = || match arg.as_deref() {
        None => 1.0,
        Some(text) => match text.parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => ratio,
            _ => {
                warnings.push(format!(
                    "{SAMPLER_ARG}={text} is not a ratio between 0 and 1; 1.0 is used"
                ));
                1.0
            }
        },
    };
    let (root, parent_based) = match name.to_ascii_lowercase().as_str() {
        "always_on" => (RootSampling::AlwaysOn, false),
        "always_off" => (RootSampling::AlwaysOff, false),
        "traceidratio" => (RootSampling::TraceIdRatio(ratio()), false),
        "parentbased_always_on" => (RootSampling::AlwaysOn, true),
        "parentbased_always_off" => (RootSampling::AlwaysOff, true),
        "parentbased_traceidratio" => (RootSampling::TraceIdRatio(ratio()), true),
        _ => {
            warnings.push(format!(
                "{SAMPLER}={name} is not a supported sampler (always_on, always_off, \
                 traceidratio, parentbased_always_on, parentbased_always_off, \
                 parentbased_traceidratio); parentbased_always_on is used"
            ));
            return Sampling::default();
        }
    };
    Sampling { root, parent_based }
}

/// The `OTEL_BSP_*` settings, each malformed one replaced by its default.
fn batch_settings(
    get: &impl Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> BatchSettings {
    let defaults = BatchSettings::default();
    let mut count = |name: &str, default: usize| {
        let Some(value) = get(name) else {
            return default;
        };
        match value.parse::<usize>() {
            Ok(n) if (1..=MAX_QUEUE_SIZE).contains(&n) => n,
            _ => {
                warnings.push(format!(
                    "{name}={value} is not a count between 1 and {MAX_QUEUE_SIZE}; {default} is \
                     used"
                ));
                default
            }
        }
    };
    let max_queue_size = count(BSP_MAX_QUEUE_SIZE, defaults.max_queue_size);
    let mut max_export_batch_size =
        count(BSP_MAX_EXPORT_BATCH_SIZE, defaults.max_export_batch_size);
    let mut time = |name: &str, min: u64, default: Duration| {
        get(name)
            .and_then(|value| millis(name, &value, min, warnings))
            .unwrap_or(default)
    };
    let schedule_delay = time(BSP_SCHEDULE_DELAY, 0, defaults.schedule_delay);
    let export_timeout = time(BSP_EXPORT_TIMEOUT, 1, defaults.export_timeout);
    if max_export_batch_size > max_queue_size {
        if get(BSP_MAX_EXPORT_BATCH_SIZE).is_some() {
            warnings.push(format!(
                "{BSP_MAX_EXPORT_BATCH_SIZE}={max_export_batch_size} is above \
                 {BSP_MAX_QUEUE_SIZE}={max_queue_size}; batches of {max_queue_size} are sent"
            ));
        }
        max_export_batch_size = max_queue_size;
    }
    BatchSettings {
        max_queue_size,
        schedule_delay,
        max_export_batch_size,
        export_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read_from(pairs: &[(&str, &str)]) -> Reading {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        read(|name| env.get(name).cloned())
    }

    fn settings(pairs: &[(&str, &str)]) -> (Settings, Vec<String>) {
        let reading = read_from(pairs);
        (reading.settings.expect("export is on"), reading.warnings)
    }

    const BASE: (&str, &str) = (ENDPOINT, "http://collector:4318");

    #[test]
    fn export_is_on_only_with_an_endpoint() {
        let reading = read_from(&[]);
        assert!(reading.settings.is_none() && reading.warnings.is_empty());
        let reading = read_from(&[(ENDPOINT, "  "), (SAMPLER, "bogus")]);
        assert!(reading.settings.is_none() && reading.warnings.is_empty());

        let (on, warnings) = settings(&[BASE]);
        assert_eq!(on.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(on.timeout, Duration::from_secs(10));
        assert_eq!(on.sampling, Sampling::default());
        assert_eq!(on.batch, BatchSettings::default());
        assert!(!on.service_named);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn the_generic_endpoint_gets_the_traces_path_and_the_traces_one_is_kept() {
        let (on, _) = settings(&[(ENDPOINT, "https://c.example/otlp/")]);
        assert_eq!(on.endpoint, "https://c.example/otlp/v1/traces");
        let (on, _) = settings(&[BASE, (TRACES_ENDPOINT, "http://other:9999/custom")]);
        assert_eq!(on.endpoint, "http://other:9999/custom");
    }

    #[test]
    fn disabled_or_none_turns_export_off() {
        for pairs in [
            [BASE, (SDK_DISABLED, "true")],
            [BASE, (SDK_DISABLED, "TRUE")],
            [BASE, (TRACES_EXPORTER, "none")],
        ] {
            let reading = read_from(&pairs);
            assert!(reading.settings.is_none(), "{pairs:?}");
            assert!(reading.warnings.is_empty(), "{pairs:?}");
        }
        let (_, warnings) = settings(&[BASE, (SDK_DISABLED, "false")]);
        assert!(warnings.is_empty());
        let (_, warnings) = settings(&[BASE, (SDK_DISABLED, "yes")]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with(SDK_DISABLED), "{warnings:?}");
    }

    #[test]
    fn exporters_other_than_otlp_are_named() {
        let reading = read_from(&[BASE, (TRACES_EXPORTER, "zipkin")]);
        assert!(reading.settings.is_none());
        assert_eq!(reading.warnings.len(), 1);
        let (_, warnings) = settings(&[BASE, (TRACES_EXPORTER, "otlp,console")]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("console"), "{warnings:?}");
        let (_, warnings) = settings(&[BASE, (TRACES_EXPORTER, "otlp")]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn only_http_protobuf_is_spoken() {
        for protocol in ["grpc", "http/json"] {
            for name in [PROTOCOL, TRACES_PROTOCOL] {
                let reading = read_from(&[BASE, (name, protocol)]);
                assert!(reading.settings.is_none(), "{name}={protocol}");
                assert_eq!(reading.warnings.len(), 1);
                assert!(
                    reading.warnings[0].starts_with(name),
                    "{:?}",
                    reading.warnings
                );
            }
        }
        let (_, warnings) =
            settings(&[BASE, (PROTOCOL, "grpc"), (TRACES_PROTOCOL, "http/protobuf")]);
        assert!(warnings.is_empty(), "the traces-specific variable wins");
        let (_, warnings) = settings(&[BASE, (PROTOCOL, "carrier-pigeon")]);
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn a_broken_endpoint_turns_export_off_with_a_reason() {
        for url in ["collector:4318", "ftp://c/x", "not a url"] {
            let reading = read_from(&[(TRACES_ENDPOINT, url)]);
            assert!(reading.settings.is_none(), "{url}");
            assert_eq!(reading.warnings.len(), 1, "{url}");
            assert!(reading.warnings[0].starts_with(TRACES_ENDPOINT));
        }
    }

    #[test]
    fn samplers_and_their_ratio() {
        let cases = [
            ("always_on", None, RootSampling::AlwaysOn, false),
            ("always_off", None, RootSampling::AlwaysOff, false),
            (
                "traceidratio",
                Some("0.25"),
                RootSampling::TraceIdRatio(0.25),
                false,
            ),
            ("traceidratio", None, RootSampling::TraceIdRatio(1.0), false),
            ("parentbased_always_on", None, RootSampling::AlwaysOn, true),
            (
                "parentbased_always_off",
                None,
                RootSampling::AlwaysOff,
                true,
            ),
            (
                "ParentBased_TraceIdRatio",
                Some("0"),
                RootSampling::TraceIdRatio(0.0),
                true,
            ),
        ];
        for (name, arg, root, parent_based) in cases {
            let mut pairs = vec![BASE, (SAMPLER, name)];
            if let Some(arg) = arg {
                pairs.push((SAMPLER_ARG, arg));
            }
            let (on, warnings) = settings(&pairs);
            assert_eq!(on.sampling, Sampling { root, parent_based }, "{name}");
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        }
        let (on, warnings) = settings(&[BASE, (SAMPLER, "traceidratio"), (SAMPLER_ARG, "1.5")]);
        assert_eq!(on.sampling.root, RootSampling::TraceIdRatio(1.0));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with(SAMPLER_ARG));
        let (on, warnings) = settings(&[BASE, (SAMPLER, "jaeger_remote")]);
        assert_eq!(on.sampling, Sampling::default());
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with(SAMPLER));
        // The argument of a sampler without a ratio is not read.
        let (_, warnings) = settings(&[BASE, (SAMPLER, "always_on"), (SAMPLER_ARG, "x")]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn batch_settings_and_their_defaults() {
        let (on, warnings) = settings(&[
            BASE,
            (BSP_MAX_QUEUE_SIZE, "100"),
            (BSP_SCHEDULE_DELAY, "0"),
            (BSP_MAX_EXPORT_BATCH_SIZE, "10"),
            (BSP_EXPORT_TIMEOUT, "250"),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            on.batch,
            BatchSettings {
                max_queue_size: 100,
                schedule_delay: Duration::ZERO,
                max_export_batch_size: 10,
                export_timeout: Duration::from_millis(250),
            }
        );
        let (on, warnings) = settings(&[
            BASE,
            (BSP_MAX_QUEUE_SIZE, "0"),
            (BSP_SCHEDULE_DELAY, "-1"),
            (BSP_MAX_EXPORT_BATCH_SIZE, "lots"),
            (BSP_EXPORT_TIMEOUT, "1.5"),
        ]);
        assert_eq!(on.batch, BatchSettings::default());
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        for (warning, name) in warnings.iter().zip([
            BSP_MAX_QUEUE_SIZE,
            BSP_MAX_EXPORT_BATCH_SIZE,
            BSP_SCHEDULE_DELAY,
            BSP_EXPORT_TIMEOUT,
        ]) {
            assert!(warning.starts_with(name), "{warning}");
        }
        let (on, warnings) = settings(&[BASE, (BSP_MAX_QUEUE_SIZE, "8")]);
        assert_eq!(on.batch.max_export_batch_size, 8);
        assert!(warnings.is_empty(), "only the default batch size was cut");
    }

    #[test]
    fn timeouts_headers_and_compression() {
        let (on, warnings) = settings(&[BASE, (TIMEOUT, "2500")]);
        assert_eq!(on.timeout, Duration::from_millis(2500));
        assert!(warnings.is_empty());
        let (on, _) = settings(&[BASE, (TIMEOUT, "2500"), (TRACES_TIMEOUT, "700")]);
        assert_eq!(on.timeout, Duration::from_millis(700));
        let (on, warnings) = settings(&[BASE, (TIMEOUT, "10s")]);
        assert_eq!(on.timeout, Duration::from_secs(10));
        assert_eq!(warnings.len(), 1);

        let (_, warnings) = settings(&[BASE, (HEADERS, "api-key=secret%20one, x-tenant=a")]);
        assert!(warnings.is_empty(), "{warnings:?}");
        let (_, warnings) = settings(&[BASE, (HEADERS, "api-key=s3cret,broken,bad key=v")]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("2 entries"), "{warnings:?}");
        assert!(!warnings[0].contains("s3cret"), "values are never repeated");

        let (_, warnings) = settings(&[BASE, (COMPRESSION, "gzip")]);
        assert_eq!(warnings.len(), 1);
        let (_, warnings) = settings(&[BASE, (COMPRESSION, "none")]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn the_service_is_named_by_either_variable() {
        let (on, _) = settings(&[BASE, (SERVICE_NAME, "outbox-eu")]);
        assert!(on.service_named);
        let (on, _) = settings(&[BASE, (RESOURCE_ATTRIBUTES, "a=b, service.name=x")]);
        assert!(on.service_named);
        let (on, _) = settings(&[BASE, (RESOURCE_ATTRIBUTES, "deployment.environment=prod")]);
        assert!(!on.service_named);
    }
}
