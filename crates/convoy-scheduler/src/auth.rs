//! Delegated authentication and authorization of the secure port, as
//! kube-scheduler's (`k8s.io/apiserver`'s delegating authenticator and
//! authorizer):
//!
//! 1. A path of `--authorization-always-allow-paths` is served to anyone.
//! 2. A bearer token is reviewed by the API server (`TokenReview`,
//!    `authentication.k8s.io/v1`); a token it does not accept is 401. No
//!    token: the request is `system:anonymous` (group
//!    `system:unauthenticated`), as upstream's anonymous authenticator.
//! 3. The user is authorized by the API server (`SubjectAccessReview`,
//!    `authorization.k8s.io/v1`) for the non-resource URL and the verb of
//!    the method (`get` for GET and HEAD); denied is 403, as upstream: so an
//!    anonymous request to `/metrics` is 403 unless the cluster grants it.
//!
//! Answers are cached 10 s (upstream's defaults: authentication 10 s,
//! authorization 10 s allowed and 10 s denied); a failed review is not
//! cached. Tokens are cached by their SHA-256, never kept themselves.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;

/// How long an answer of the API server is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Answers kept at most per cache; past that, expired ones are dropped and
/// new answers are not kept until there is room.
pub const CACHE_CAPACITY: usize = 4096;

/// The user of an anonymous request.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of an anonymous request.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    /// `username`.
    pub name: String,
    /// `uid`.
    pub uid: Option<String>,
    /// `groups`.
    pub groups: Vec<String>,
    /// `extra`.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    fn anonymous() -> Self {
        Self {
            name: ANONYMOUS.to_string(),
            uid: None,
            groups: vec![UNAUTHENTICATED.to_string()],
            extra: BTreeMap::new(),
        }
    }
}

/// The API server's answers, behind a trait so that the checks can be
/// tested without one.
pub trait Reviewer: Send + Sync + 'static {
    /// The user of `token`, `Ok(None)` if the API server does not accept
    /// it, `Err` if it could not be asked.
    fn authenticate(
        &self,
        token: &str,
    ) -> futures::future::BoxFuture<'_, Result<Option<User>, String>>;

    /// Whether `user` may `verb` the non-resource URL `path`, and why not;
    /// `Err` if the API server could not be asked.
    fn authorize<'a>(
        &'a self,
        user: &'a User,
        verb: &'a str,
        path: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Decision, String>>;
}

/// An authorization answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// The authorizer's reason, if it gave one.
    pub reason: String,
}

/// TokenReviews and SubjectAccessReviews with kube clients (one each, as
/// upstream: each has its own rate budget).
pub struct ApiReviewer {
    /// Client of `--authentication-kubeconfig`.
    pub authentication: kube::Client,
    /// Client of `--authorization-kubeconfig`.
    pub authorization: kube::Client,
}

impl Reviewer for ApiReviewer {
    fn authenticate(
        &self,
        token: &str,
    ) -> futures::future::BoxFuture<'_, Result<Option<User>, String>> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_string(), ..Default::default() },
            ..Default::default()
        };
        Box::pin(async move {
            let api = Api::<TokenReview>::all(self.authentication.clone());
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| format!("TokenReview: {e}"))?;
            let status = answer.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let info = status.user.unwrap_or_default();
            let Some(name) = info.username.filter(|n| !n.is_empty()) else {
                return Ok(None);
            };
            Ok(Some(User {
                name,
                uid: info.uid.filter(|u| !u.is_empty()),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default().into_iter().collect(),
            }))
        })
    }

    fn authorize<'a>(
        &'a self,
        user: &'a User,
        verb: &'a str,
        path: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Decision, String>> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        Box::pin(async move {
            let api = Api::<SubjectAccessReview>::all(self.authorization.clone());
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| format!("SubjectAccessReview: {e}"))?;
            let status = answer.status.unwrap_or_default();
            Ok(Decision {
                allowed: status.allowed && status.denied != Some(true),
                reason: status.reason.unwrap_or_default(),
            })
        })
    }
}

/// A small map whose entries expire.
struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    fn new(ttl: Duration) -> Self {
        Self { ttl, entries: Mutex::new(HashMap::new()) }
    }

    fn get(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock();
        let (at, value) = entries.get(key)?;
        (now.duration_since(*at) < self.ttl).then(|| value.clone())
    }

    fn put(&self, key: K, value: V, now: Instant) {
        let mut entries = self.entries.lock();
        if entries.len() >= CACHE_CAPACITY {
            entries.retain(|_, (at, _)| now.duration_since(*at) < self.ttl);
            if entries.len() >= CACHE_CAPACITY {
                return;
            }
        }
        entries.insert(key, (now, value));
    }
}

/// The secure port's gate: always-allowed paths, then authentication, then
/// authorization, each answer cached [`CACHE_TTL`].
pub struct Gate {
    reviewer: Box<dyn Reviewer>,
    always_allow: Vec<String>,
    tokens: TtlCache<[u8; 32], Option<User>>,
    decisions: TtlCache<(User, String, String), Decision>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("always_allow", &self.always_allow).finish_non_exhaustive()
    }
}

/// Why a request is refused: its status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 401, 403 or 500.
    pub status: StatusCode,
    /// A line saying why (as upstream's).
    pub message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], self.message + "\n")
            .into_response()
    }
}

impl Gate {
    /// A gate asking `reviewer`, serving `always_allow` to anyone (a
    /// trailing `*` matches a prefix).
    pub fn new(reviewer: impl Reviewer, always_allow: Vec<String>) -> Self {
        Self {
            reviewer: Box::new(reviewer),
            always_allow,
            tokens: TtlCache::new(CACHE_TTL),
            decisions: TtlCache::new(CACHE_TTL),
        }
    }

    fn always_allowed(&self, path: &str) -> bool {
        self.always_allow.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == p,
        })
    }

    /// Checks a request for `path` with `method` and its `Authorization`
    /// header, if any: `Ok` to serve it.
    pub async fn check(
        &self,
        method: &Method,
        path: &str,
        authorization: Option<&str>,
    ) -> Result<(), Refusal> {
        if self.always_allowed(path) {
            return Ok(());
        }
        let user = match bearer(authorization) {
            None => User::anonymous(),
            Some(token) => self.authenticate(token).await?,
        };
        // As upstream's non-resource verbs: the method, lower-cased; HEAD
        // is a get.
        let verb = if method == Method::HEAD {
            "get".to_string()
        } else {
            method.as_str().to_ascii_lowercase()
        };
        let key = (user, verb, path.to_string());
        let decision = match self.decisions.get(&key, Instant::now()) {
            Some(d) => d,
            None => {
                let (user, verb, path) = &key;
                let d = self.reviewer.authorize(user, verb, path).await.map_err(|e| {
                    tracing::warn!(error = %e, %path, "authorization failed");
                    Refusal {
                        status: StatusCode::INTERNAL_SERVER_ERROR,
                        message: "internal error: authorization failed".to_string(),
                    }
                })?;
                self.decisions.put(key.clone(), d.clone(), Instant::now());
                d
            }
        };
        if decision.allowed {
            return Ok(());
        }
        let (user, verb, path) = &key;
        let mut message = format!("forbidden: User {:?} cannot {verb} path {path:?}", user.name);
        if !decision.reason.is_empty() {
            message.push_str(": ");
            message.push_str(&decision.reason);
        }
        Err(Refusal { status: StatusCode::FORBIDDEN, message })
    }

    async fn authenticate(&self, token: &str) -> Result<User, Refusal> {
        let unauthorized =
            || Refusal { status: StatusCode::UNAUTHORIZED, message: "Unauthorized".to_string() };
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        let user = match self.tokens.get(&key, Instant::now()) {
            Some(user) => user,
            None => {
                let user = self.reviewer.authenticate(token).await.map_err(|e| {
                    tracing::warn!(error = %e, "authentication failed");
                    unauthorized()
                })?;
                self.tokens.put(key, user.clone(), Instant::now());
                user
            }
        };
        user.ok_or_else(unauthorized)
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in
/// any case, as upstream); any other header is no token.
fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Axum middleware: serves the request if `gate` lets it through.
pub async fn middleware(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let authorization = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match gate.check(request.method(), request.uri().path(), authorization).await {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Knows the token `good` (user `alice`, allowed `/metrics`) and
    /// `other` (user `bob`, allowed nothing); `broken` fails to review.
    #[derive(Default, Clone)]
    struct Fake {
        authentications: Arc<AtomicUsize>,
        authorizations: Arc<AtomicUsize>,
    }

    impl Reviewer for Fake {
        fn authenticate(
            &self,
            token: &str,
        ) -> futures::future::BoxFuture<'_, Result<Option<User>, String>> {
            self.authentications.fetch_add(1, Ordering::Relaxed);
            let user = |name: &str| {
                Some(User {
                    name: name.into(),
                    uid: None,
                    groups: vec!["system:authenticated".into()],
                    extra: BTreeMap::new(),
                })
            };
            let answer = match token {
                "good" => Ok(user("alice")),
                "other" => Ok(user("bob")),
                "broken" => Err("connection refused".to_string()),
                _ => Ok(None),
            };
            Box::pin(async move { answer })
        }

        fn authorize<'a>(
            &'a self,
            user: &'a User,
            verb: &'a str,
            path: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<Decision, String>> {
            self.authorizations.fetch_add(1, Ordering::Relaxed);
            let allowed = user.name == "alice" && verb == "get" && path == "/metrics";
            Box::pin(async move { Ok(Decision { allowed, reason: String::new() }) })
        }
    }

    fn gate(fake: &Fake) -> Gate {
        Gate::new(fake.clone(), vec!["/healthz".into(), "/debug/*".into()])
    }

    #[tokio::test]
    async fn checks_as_kube_schedulers_delegated_auth() {
        let fake = Fake::default();
        let gate = gate(&fake);
        let get = Method::GET;
        let status = |r: Result<(), Refusal>| r.err().map(|r| r.status.as_u16()).unwrap_or(200);
        for (method, path, header, want) in [
            (&get, "/metrics", Some("Bearer good"), 200),
            (&Method::HEAD, "/metrics", Some("bearer good"), 200),
            (&get, "/metrics", Some("Bearer other"), 403),
            (&get, "/metrics", None, 403),
            (&get, "/metrics", Some("Basic YWxpY2U6cHc="), 403),
            (&get, "/metrics", Some("Bearer "), 403),
            (&get, "/metrics", Some("Bearer nobody"), 401),
            (&get, "/metrics", Some("Bearer broken"), 401),
            (&Method::POST, "/metrics", Some("Bearer good"), 403),
            (&get, "/healthz", None, 200),
            (&get, "/healthz", Some("Bearer nobody"), 200),
            (&get, "/healthz/x", None, 403),
            (&get, "/debug/anything", None, 200),
            (&get, "/readyz", None, 403),
        ] {
            assert_eq!(
                status(gate.check(method, path, header).await),
                want,
                "{method} {path} {header:?}"
            );
        }
        let refusal = gate.check(&get, "/metrics", Some("Bearer other")).await.unwrap_err();
        assert_eq!(refusal.message, "forbidden: User \"bob\" cannot get path \"/metrics\"");
        let refusal = gate.check(&get, "/metrics", None).await.unwrap_err();
        assert!(refusal.message.contains("system:anonymous"), "{}", refusal.message);
    }

    #[tokio::test]
    async fn answers_are_cached_failures_are_not() {
        let fake = Fake::default();
        let gate = gate(&fake);
        for _ in 0..3 {
            gate.check(&Method::GET, "/metrics", Some("Bearer good")).await.expect("allowed");
            gate.check(&Method::GET, "/metrics", Some("Bearer other")).await.expect_err("denied");
            gate.check(&Method::GET, "/metrics", Some("Bearer nobody")).await.expect_err("401");
            gate.check(&Method::GET, "/metrics", Some("Bearer broken")).await.expect_err("401");
        }
        // good, other, nobody once each; broken every time.
        assert_eq!(fake.authentications.load(Ordering::Relaxed), 3 + 3);
        // alice and bob once each.
        assert_eq!(fake.authorizations.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn cache_entries_expire_and_the_cache_is_bounded() {
        let cache = TtlCache::new(Duration::from_secs(10));
        let t0 = Instant::now();
        cache.put(1u32, "a", t0);
        assert_eq!(cache.get(&1, t0 + Duration::from_secs(9)), Some("a"));
        assert_eq!(cache.get(&1, t0 + Duration::from_secs(10)), None);
        for i in 0..CACHE_CAPACITY as u32 + 10 {
            cache.put(i, "b", t0);
        }
        assert_eq!(cache.entries.lock().len(), CACHE_CAPACITY);
        // Expired entries make room.
        cache.put(u32::MAX, "c", t0 + Duration::from_secs(11));
        assert_eq!(cache.entries.lock().len(), 1);
    }
}
