//! The pages a browser opens: the buyer's page at `/` and the operator's at `/ops`, with their
//! script and style sheet. No build step: the files in `node/assets/` are embedded in the
//! binary as they are (a file's references to the others filled in), and each script or style
//! sheet is served under a name that carries the hash of its content (`/assets/app.3f2a9c1e0b7d4a55.js`), so browsers and caches may keep it
//! for ever (`immutable`) and a new build can never be mixed with an old one. The HTML itself
//! is `no-cache` with an `ETag`, so a browser revalidates it (one `304`) and then loads only
//! what changed.
//!
//! Owns the asset table and the headers: a `Content-Security-Policy` that allows this origin
//! only (no inline code; the API is the same origin), `X-Content-Type-Options: nosniff`.
//! Outside the API's layers: a page costs no token and is never forwarded. Never serves a file
//! that is not in the table.

use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// How long a browser may keep a hashed asset: its name changes with its content.
const ASSET_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// Pages are revalidated on every load (cheap: a `304` when unchanged).
const PAGE_CACHE_CONTROL: &str = "no-cache";

/// This origin only: scripts, styles, images (and `data:` images), and the API's calls and
/// event streams. No inline scripts or styles, no frames.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// The embedded files: name in `node/assets/`, content type, content. A file may reference
/// the files before it (`{{asset:dom.js}}` in a script, `{{asset:app.js}}` in a page): each is
/// served with those references filled in, so its hash covers the names of what it loads.
const FILES: [(&str, &str, &str); 6] = [
    ("dom.js", "text/javascript; charset=utf-8", include_str!("../../assets/dom.js")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../assets/app.js")),
    ("ops.js", "text/javascript; charset=utf-8", include_str!("../../assets/ops.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../../assets/app.css")),
    ("index.html", "text/html; charset=utf-8", include_str!("../../assets/index.html")),
    ("ops.html", "text/html; charset=utf-8", include_str!("../../assets/ops.html")),
];

/// One file as served: its URL path, type, bytes and entity tag.
#[derive(Debug)]
struct Served {
    /// The name as the page references it (`app.js`).
    name: &'static str,
    /// The path it is served under (`/assets/app.<hash>.js`, or the page's own path).
    path: String,
    content_type: &'static str,
    body: String,
    etag: String,
}

/// Every file with its references filled in and its hashed name (a page keeps its own path).
/// Built once, in the order of [`FILES`].
static SERVED: LazyLock<Vec<Served>> = LazyLock::new(|| {
    let mut served: Vec<Served> = Vec::with_capacity(FILES.len());
    for (name, content_type, template) in FILES {
        let mut body = template.to_owned();
        for earlier in &served {
            body = body.replace(&format!("{{{{asset:{}}}}}", earlier.name), &earlier.path);
        }
        assert!(!body.contains("{{asset:"), "{name} names an asset not embedded before it");
        let hash = hash_of(&body);
        let path = match name {
            "index.html" => "/".to_owned(),
            "ops.html" => "/ops".to_owned(),
            _ => {
                let (stem, extension) = name.rsplit_once('.').expect("names have an extension");
                format!("/assets/{stem}.{hash}.{extension}")
            }
        };
        served.push(Served { name, path, content_type, body, etag: format!("\"{hash}\"") });
    }
    served
});

/// The first 16 hex digits of the content's SHA-256.
fn hash_of(content: &str) -> String {
    let digest = Sha256::digest(content.as_bytes());
    digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

/// The routes of the pages and their assets.
pub fn router() -> Router {
    Router::new()
        .route("/", get(|headers: HeaderMap| async move { page("index.html", &headers) }))
        .route("/ops", get(|headers: HeaderMap| async move { page("ops.html", &headers) }))
        .route("/assets/{file}", get(asset))
        // Browsers ask for an icon on every page; an empty answer keeps their consoles quiet.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
}

fn find(name: &str) -> Option<&'static Served> {
    SERVED.iter().find(|served| served.name == name)
}

fn page(name: &str, request: &HeaderMap) -> Response {
    let served = find(name).expect("every page is embedded");
    respond(served, PAGE_CACHE_CONTROL, request)
}

async fn asset(Path(file): Path<String>, request: HeaderMap) -> Response {
    let path = format!("/assets/{file}");
    match SERVED.iter().find(|served| served.path == path) {
        Some(served) => respond(served, ASSET_CACHE_CONTROL, &request),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// The file, or `304` when the request already has this version.
fn respond(served: &Served, cache_control: &'static str, request: &HeaderMap) -> Response {
    let matches = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == served.etag));
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, served.content_type)], served.body.clone()).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache_control));
    headers.insert(header::ETAG, HeaderValue::from_str(&served.etag).expect("hex in quotes"));
    headers
        .insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(path: &str, if_none_match: Option<&str>) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::get(path);
        if let Some(tag) = if_none_match {
            request = request.header(header::IF_NONE_MATCH, tag);
        }
        let response = router().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status, parts.headers, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// The `/assets/...` paths a text names in quotes.
    fn references(text: &str) -> Vec<String> {
        text.split(['"', '\''])
            .filter(|part| part.starts_with("/assets/"))
            .map(str::to_owned)
            .collect()
    }

    #[tokio::test]
    async fn pages_reference_their_assets_by_hashed_names_that_are_served_immutable() {
        for page in ["/", "/ops"] {
            let (status, headers, body) = get(page, None).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            assert_eq!(headers[header::CACHE_CONTROL], PAGE_CACHE_CONTROL);
            assert!(headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("'self'"));
            assert!(!body.contains("{{asset:"), "{page} has an unfilled reference");
            // The page's assets, and what they import in turn (the scripts import `dom.js`).
            let mut assets = references(&body);
            assert!(assets.len() >= 2, "{page} references {assets:?}");
            let mut checked = Vec::new();
            while let Some(asset) = assets.pop() {
                if checked.contains(&asset) {
                    continue;
                }
                let (status, headers, content) = get(&asset, None).await;
                assets.extend(references(&content));
                checked.push(asset.clone());
                assert_eq!(status, StatusCode::OK, "{asset}");
                assert_eq!(headers[header::CACHE_CONTROL], ASSET_CACHE_CONTROL);
                // The name carries the hash of exactly what is served.
                assert!(asset.contains(&hash_of(&content)), "{asset}");
                let etag = headers[header::ETAG].to_str().unwrap().to_owned();
                let (status, _, _) = get(&asset, Some(&etag)).await;
                assert_eq!(status, StatusCode::NOT_MODIFIED, "{asset}");
            }
            assert!(checked.iter().any(|asset| asset.starts_with("/assets/dom.")), "{checked:?}");
            let etag = headers[header::ETAG].to_str().unwrap().to_owned();
            assert_eq!(get(page, Some(&etag)).await.0, StatusCode::NOT_MODIFIED);
        }
    }

    #[tokio::test]
    async fn unknown_and_unhashed_assets_are_not_found() {
        assert_eq!(get("/assets/app.js", None).await.0, StatusCode::NOT_FOUND);
        assert_eq!(get("/assets/..%2FCargo.toml", None).await.0, StatusCode::NOT_FOUND);
        assert_eq!(get("/assets/app.0000000000000000.js", None).await.0, StatusCode::NOT_FOUND);
    }
}
