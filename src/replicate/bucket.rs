//! One S3-compatible bucket, through `object_store`, for code that is not
//! async: every call runs on the bucket's own small runtime and waits for
//! its answer, retrying what may succeed later (a refused connection, a
//! timeout, a 5xx) with backoff until the call's deadline.

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion,
};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a run's objects go: `s3://bucket/prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub bucket: String,
    /// Without leading or trailing `/`; may be empty.
    pub prefix: String,
}

impl Url {
    /// Parses `s3://bucket[/prefix]`.
    ///
    /// # Errors
    /// Another scheme, no bucket, or a prefix with empty, `.` or `..` parts.
    pub fn parse(s: &str) -> Result<Url, String> {
        let rest = s
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{s:?}: a replication URL is s3://bucket/prefix"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = !bucket.is_empty()
            && bucket.len() <= 63
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !bucket_ok {
            return Err(format!("{s:?}: {bucket:?} is not a bucket name"));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty()
            && prefix
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == ".." || p.contains('\\'))
        {
            return Err(format!(
                "{s:?}: the prefix {prefix:?} has an empty, . or .. part"
            ));
        }
        Ok(Url {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The key `rel` under the prefix.
    pub fn key(&self, rel: &str) -> String {
        if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.prefix)
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// The credentials, read by the caller from where the agent keeps them
/// (never from a file, never written anywhere).
#[derive(Clone, Default)]
pub struct Credentials {
    pub key_id: Option<String>,
    pub secret: Option<String>,
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

/// Why a bucket call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketError {
    /// A conditional update found another version (`If-Match` failed).
    Precondition,
    /// A create found the object there (`If-None-Match: *` failed).
    AlreadyExists,
    NotFound,
    /// Anything else, after the retries (or at once when retrying cannot
    /// help: refused credentials, a bad request).
    Failed(String),
}

impl std::fmt::Display for BucketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketError::Precondition => f.write_str("the object changed (If-Match failed)"),
            BucketError::AlreadyExists => f.write_str("the object exists"),
            BucketError::NotFound => f.write_str("no such object"),
            BucketError::Failed(m) => f.write_str(m),
        }
    }
}

/// Is `host` (of an http:// endpoint) this machine?
fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost"
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host of `http://host[:port][/...]`.
fn http_host(endpoint: &str) -> Option<&str> {
    let rest = endpoint.strip_prefix("http://")?;
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    if authority.starts_with('[') {
        return authority.split(']').next().map(|h| &h[1..]);
    }
    Some(authority.split(':').next().unwrap_or(authority))
}

/// A bucket and the runtime its calls run on.
pub struct Bucket {
    store: Arc<AmazonS3>,
    rt: Option<tokio::runtime::Runtime>,
    /// How long one call keeps retrying.
    pub timeout: Duration,
    pub url: Url,
    /// Puts made (each call once, whatever its retries), and of them the
    /// lease's: what benches/replicate.rs counts per sync point.
    puts: Arc<Puts>,
}

/// Counts of puts, see [`Bucket::puts`].
#[derive(Debug, Default)]
struct Puts {
    all: std::sync::atomic::AtomicU64,
    lease: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({})", self.url)
    }
}

impl Drop for Bucket {
    fn drop(&mut self) {
        // Dropping a runtime may not block inside another runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Is this error worth another try?
fn transient(e: &object_store::Error) -> bool {
    !matches!(
        e,
        object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::NotFound { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
    )
}

fn classify(e: object_store::Error) -> BucketError {
    match e {
        object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => {
            BucketError::Precondition
        }
        object_store::Error::AlreadyExists { .. } => BucketError::AlreadyExists,
        object_store::Error::NotFound { .. } => BucketError::NotFound,
        other => BucketError::Failed(one_line(&other.to_string())),
    }
}

fn one_line(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::text::first_line(&s, 400)
}

impl Bucket {
    /// A client for `url`: endpoint from `AWS_ENDPOINT_URL` (plain http only
    /// to this machine), region from `AWS_REGION` / `AWS_DEFAULT_REGION`
    /// (default `us-east-1`), path-style requests, conditional puts by
    /// `If-Match` / `If-None-Match`.
    ///
    /// # Errors
    /// An http endpoint that is not loopback, a client that cannot be built.
    pub fn connect(url: &Url, creds: &Credentials, timeout: Duration) -> Result<Bucket, String> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let endpoint = var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL"));
        Self::connect_to(url, creds, timeout, endpoint)
    }

    /// [`Bucket::connect`] with the endpoint given (`None`: AWS's own).
    ///
    /// # Errors
    /// As [`Bucket::connect`].
    pub fn connect_to(
        url: &Url,
        creds: &Credentials,
        timeout: Duration,
        endpoint: Option<String>,
    ) -> Result<Bucket, String> {
        // The TLS provider the model client uses too.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_string());
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&url.bucket)
            .with_region(region)
            .with_virtual_hosted_style_request(false)
            .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
            .with_retry(RetryConfig {
                max_retries: 0,
                retry_timeout: timeout,
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(timeout.clamp(Duration::from_secs(1), Duration::from_secs(30)))
                    .with_connect_timeout(Duration::from_secs(5)),
            );
        if let Some(ep) = &endpoint {
            if let Some(host) = http_host(ep) {
                if !is_loopback(host) {
                    return Err(format!(
                        "AWS_ENDPOINT_URL {ep}: plain http is allowed only to this machine \
                         (loopback); use https"
                    ));
                }
                b = b.with_allow_http(true);
            }
            b = b.with_endpoint(ep);
        }
        if let Some(k) = &creds.key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &creds.secret {
            b = b.with_secret_access_key(s);
        }
        if let Some(t) = &creds.token {
            b = b.with_token(t);
        }
        let store = b.build().map_err(|e| one_line(&e.to_string()))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tinyagent-replicate")
            .enable_all()
            .build()
            .map_err(|e| format!("could not start the replication runtime: {e}"))?;
        Ok(Bucket {
            store: Arc::new(store),
            rt: Some(rt),
            timeout,
            url: url.clone(),
            puts: Arc::default(),
        })
    }

    /// Runs `fut` on the bucket's runtime and waits for it (callable from
    /// inside another runtime: the wait is a plain channel receive).
    fn block<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        self.rt
            .as_ref()
            .expect("the runtime lives as long as the bucket")
            .spawn(async move {
                let _ = tx.send(fut.await);
            });
        rx.recv()
            .expect("the replication runtime dropped a call it was given")
    }

    /// `op` retried with backoff (100 ms doubling to 2 s) until it succeeds,
    /// fails for good, or `self.timeout` has passed.
    fn retrying<T, F, Fut>(&self, what: String, op: F) -> Result<T, BucketError>
    where
        T: Send + 'static,
        F: Fn(Arc<AmazonS3>) -> Fut + Send + 'static,
        Fut: Future<Output = object_store::Result<T>> + Send,
    {
        self.retrying_within(what, self.timeout, op)
    }

    /// [`Bucket::retrying`] for `timeout` rather than the client's own.
    fn retrying_within<T, F, Fut>(
        &self,
        what: String,
        timeout: Duration,
        op: F,
    ) -> Result<T, BucketError>
    where
        T: Send + 'static,
        F: Fn(Arc<AmazonS3>) -> Fut + Send + 'static,
        Fut: Future<Output = object_store::Result<T>> + Send,
    {
        let store = self.store.clone();
        self.block(async move {
            let deadline = Instant::now() + timeout;
            let mut backoff = Duration::from_millis(100);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let last = match tokio::time::timeout(
                    left.max(Duration::from_millis(1)),
                    op(store.clone()),
                )
                .await
                {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) if !transient(&e) => return Err(classify(e)),
                    Ok(Err(e)) => one_line(&e.to_string()),
                    Err(_) => "timed out".to_string(),
                };
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(BucketError::Failed(format!(
                        "{what}: {last} (gave up after {}s of retries)",
                        timeout.as_secs_f64().round()
                    )));
                }
                tokio::time::sleep(backoff.min(left)).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        })
    }

    /// The puts this client has made: all of them, and the lease's.
    pub fn puts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.puts.all.load(Relaxed), self.puts.lease.load(Relaxed))
    }

    /// Stores `bytes` at `key` (`mode`: overwrite, create, update).
    ///
    /// # Errors
    /// [`BucketError`].
    pub fn put(
        &self,
        key: &str,
        bytes: Vec<u8>,
        mode: PutMode,
    ) -> Result<UpdateVersion, BucketError> {
        self.put_within(key, bytes, mode, self.timeout)
    }

    /// [`Bucket::put`], retried for `timeout` rather than the client's own
    /// (a lease renewal gives up in time for the next one).
    ///
    /// # Errors
    /// [`BucketError`].
    pub fn put_within(
        &self,
        key: &str,
        bytes: Vec<u8>,
        mode: PutMode,
        timeout: Duration,
    ) -> Result<UpdateVersion, BucketError> {
        use std::sync::atomic::Ordering::Relaxed;
        self.puts.all.fetch_add(1, Relaxed);
        if key.ends_with(&format!("/{}", super::lease::LEASE)) {
            self.puts.lease.fetch_add(1, Relaxed);
        }
        let path = ObjPath::from(key);
        let payload = PutPayload::from(bytes);
        let what = format!("storing {key}");
        let r = self.retrying_within(what, timeout, move |s| {
            let (path, payload, mode) = (path.clone(), payload.clone(), mode.clone());
            async move {
                s.put_opts(
                    &path,
                    payload,
                    PutOptions {
                        mode,
                        ..PutOptions::default()
                    },
                )
                .await
            }
        })?;
        Ok(UpdateVersion {
            e_tag: r.e_tag,
            version: r.version,
        })
    }

    /// The object at `key` and its version.
    ///
    /// # Errors
    /// [`BucketError`] ([`BucketError::NotFound`] when it is not there).
    pub fn get(&self, key: &str) -> Result<(Vec<u8>, UpdateVersion), BucketError> {
        let path = ObjPath::from(key);
        let what = format!("reading {key}");
        self.retrying(what, move |s| {
            let path = path.clone();
            async move {
                let r = s.get(&path).await?;
                let version = UpdateVersion {
                    e_tag: r.meta.e_tag.clone(),
                    version: r.meta.version.clone(),
                };
                let bytes = r.bytes().await?;
                Ok((bytes.to_vec(), version))
            }
        })
    }

    /// Removes `key` (a missing object is no error).
    ///
    /// # Errors
    /// [`BucketError::Failed`].
    pub fn delete(&self, key: &str) -> Result<(), BucketError> {
        let path = ObjPath::from(key);
        let what = format!("removing {key}");
        match self.retrying(what, move |s| {
            let path = path.clone();
            async move { s.delete(&path).await }
        }) {
            Ok(()) | Err(BucketError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every key under `prefix/` (recursively), with its size.
    ///
    /// # Errors
    /// [`BucketError::Failed`].
    pub fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, BucketError> {
        use futures_util::TryStreamExt;
        let path = ObjPath::from(prefix);
        let what = format!("listing {prefix}/");
        self.retrying(what, move |s| {
            let path = path.clone();
            async move {
                let metas: Vec<object_store::ObjectMeta> =
                    s.list(Some(&path)).try_collect().await?;
                Ok(metas
                    .into_iter()
                    .map(|m| (m.location.to_string(), m.size))
                    .collect())
            }
        })
    }

    /// The "directories" directly under `prefix/` (empty: the bucket's top).
    ///
    /// # Errors
    /// [`BucketError::Failed`].
    pub fn list_dirs(&self, prefix: &str) -> Result<Vec<String>, BucketError> {
        let path = (!prefix.is_empty()).then(|| ObjPath::from(prefix));
        let what = format!("listing {prefix}/");
        self.retrying(what, move |s| {
            let path = path.clone();
            async move {
                let r = s.list_with_delimiter(path.as_ref()).await?;
                Ok(r.common_prefixes
                    .into_iter()
                    .map(|p| p.to_string())
                    .collect())
            }
        })
    }

    /// Stores many objects at once (overwriting), a few at a time.
    ///
    /// # Errors
    /// The first failure.
    pub fn put_many(&self, items: Vec<(String, Vec<u8>)>) -> Result<(), BucketError> {
        self.puts
            .all
            .fetch_add(items.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for chunk in items.chunks(16) {
            let calls: Vec<_> = chunk
                .iter()
                .map(|(k, b)| {
                    let (path, payload) = (ObjPath::from(k.as_str()), PutPayload::from(b.clone()));
                    let what = format!("storing {k}");
                    (what, path, payload)
                })
                .collect();
            let store = self.store.clone();
            let timeout = self.timeout;
            let results = self.block(async move {
                let mut set = tokio::task::JoinSet::new();
                for (what, path, payload) in calls {
                    let store = store.clone();
                    set.spawn(async move {
                        let deadline = Instant::now() + timeout;
                        let mut backoff = Duration::from_millis(100);
                        loop {
                            let left = deadline.saturating_duration_since(Instant::now());
                            let r = tokio::time::timeout(
                                left.max(Duration::from_millis(1)),
                                store.put(&path, payload.clone()),
                            )
                            .await;
                            let last = match r {
                                Ok(Ok(_)) => return Ok(()),
                                Ok(Err(e)) if !transient(&e) => return Err(classify(e)),
                                Ok(Err(e)) => one_line(&e.to_string()),
                                Err(_) => "timed out".to_string(),
                            };
                            let left = deadline.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                return Err(BucketError::Failed(format!("{what}: {last}")));
                            }
                            tokio::time::sleep(backoff.min(left)).await;
                            backoff = (backoff * 2).min(Duration::from_secs(2));
                        }
                    });
                }
                let mut out = Vec::new();
                while let Some(r) = set.join_next().await {
                    out.push(r.unwrap_or_else(|e| Err(BucketError::Failed(e.to_string()))));
                }
                out
            });
            if let Some(e) = results.into_iter().find_map(Result::err) {
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_are_refused() {
        let u = Url::parse("s3://my-bucket/runs/team").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.prefix.as_str()),
            ("my-bucket", "runs/team")
        );
        assert_eq!(u.key("r1/manifest.json"), "runs/team/r1/manifest.json");
        assert_eq!(u.to_string(), "s3://my-bucket/runs/team");
        let top = Url::parse("s3://b/").unwrap();
        assert_eq!(top.key("x"), "x");
        for bad in [
            "http://b/p",
            "s3://",
            "s3://B/p",
            "s3://b//p",
            "s3://b/../p",
            "s3://b/./p",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_is_for_loopback_only() {
        assert_eq!(http_host("http://127.0.0.1:8333"), Some("127.0.0.1"));
        assert_eq!(http_host("http://[::1]:9000/x"), Some("::1"));
        assert_eq!(http_host("https://s3.example.com"), None);
        assert!(is_loopback("127.0.0.1") && is_loopback("::1") && is_loopback("localhost"));
        assert!(!is_loopback("10.0.0.1") && !is_loopback("example.com"));
    }
}
