//! The node's secrets: the session secret (signs buyers' tokens), the operator credential, the
//! payment webhook secret and the outbox sink secret. Each comes from a file
//! (`--session-secret-file`, ... or the same key in the config file) or from the environment
//! (`BOOKING_SESSION_SECRET`, ...), never from the command line, where every local user could
//! read it in the process list; each must be at least [`SECRET_BYTES_MIN`] bytes. A node without
//! them refuses to start, unless it runs with `--dev`, which fills the missing ones with public
//! development values and refuses every listen address but loopback.
//!
//! Owns finding, checking and holding the secrets. They are held as [`SecretString`], whose
//! `Debug` prints `[REDACTED]`, so a logged `Config` shows none of them; only the code that
//! signs or compares exposes one, and never logs it. Never writes a secret anywhere.

use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};

use crate::config::ConfigError;

/// The fewest bytes a secret may have: 256 bits of a random secret, as for an HMAC-SHA256 key.
pub const SECRET_BYTES_MIN: usize = 32;
/// The longest secret file read (a secret is short; a large file is a mistake).
pub const SECRET_FILE_BYTES_MAX: u64 = 4_096;

/// One of the node's secrets: its flag, environment variable and development value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretKind {
    /// Signs and verifies buyers' session tokens; the same on every node.
    Session,
    /// The bearer credential of every operator call, gRPC `AdminService` included.
    Operator,
    /// Verifies the payment provider's webhooks.
    Webhook,
    /// Signs outbox deliveries to sinks (needed only with `--sink`).
    Sink,
    /// The session secret being rotated out: tokens signed with it are still accepted, none
    /// is issued with it (optional; never filled in by `--dev`).
    SessionPrevious,
}

impl SecretKind {
    /// Every kind, in the order errors name them.
    pub const ALL: [SecretKind; 4] =
        [SecretKind::Session, SecretKind::Operator, SecretKind::Webhook, SecretKind::Sink];

    /// The command-line flag naming the file (and the config file's key, without dashes).
    pub fn flag(self) -> &'static str {
        match self {
            SecretKind::Session => "--session-secret-file",
            SecretKind::Operator => "--operator-token-file",
            SecretKind::Webhook => "--webhook-secret-file",
            SecretKind::Sink => "--sink-secret-file",
            SecretKind::SessionPrevious => "--session-secret-previous-file",
        }
    }

    /// The environment variable holding the value itself.
    pub fn env(self) -> &'static str {
        match self {
            SecretKind::Session => "BOOKING_SESSION_SECRET",
            SecretKind::Operator => "BOOKING_OPERATOR_TOKEN",
            SecretKind::Webhook => "BOOKING_WEBHOOK_SECRET",
            SecretKind::Sink => "BOOKING_SINK_SECRET",
            SecretKind::SessionPrevious => "BOOKING_SESSION_SECRET_PREVIOUS",
        }
    }

    /// The public value `--dev` uses when the secret is not given: fine on a laptop, never on
    /// a network (which `--dev` refuses).
    pub fn development(self) -> &'static str {
        match self {
            SecretKind::Session => "booking-cluster-development-session-secret",
            SecretKind::Operator => "booking-cluster-development-operator-token",
            SecretKind::Webhook => crate::rest::webhook::DEVELOPMENT_WEBHOOK_SECRET,
            SecretKind::Sink => "booking-cluster-development-sink-secret",
            // Never used: `--dev` fills in only required secrets.
            SecretKind::SessionPrevious => "booking-cluster-development-previous-session-secret",
        }
    }
}

/// Where the secrets' files are, from the command line or the config file.
#[derive(Clone, Debug, Default)]
pub struct SecretFiles {
    /// `--session-secret-file`.
    pub session: Option<PathBuf>,
    /// `--operator-token-file`.
    pub operator: Option<PathBuf>,
    /// `--webhook-secret-file`.
    pub webhook: Option<PathBuf>,
    /// `--sink-secret-file`.
    pub sink: Option<PathBuf>,
    /// `--session-secret-previous-file`.
    pub session_previous: Option<PathBuf>,
}

impl SecretFiles {
    fn of(&self, kind: SecretKind) -> Option<&Path> {
        match kind {
            SecretKind::Session => self.session.as_deref(),
            SecretKind::Operator => self.operator.as_deref(),
            SecretKind::Webhook => self.webhook.as_deref(),
            SecretKind::Sink => self.sink.as_deref(),
            SecretKind::SessionPrevious => self.session_previous.as_deref(),
        }
    }
}

/// The node's secrets, checked. `Debug` shows none of them.
#[derive(Clone, Debug)]
pub struct Secrets {
    /// The session secret.
    pub session: SecretString,
    /// The operator credential.
    pub operator: SecretString,
    /// The payment webhook secret.
    pub webhook: SecretString,
    /// The sink secret: `None` for a node without sinks that was not given one.
    pub sink: Option<SecretString>,
    /// The session secret being rotated out, if any: its tokens are still accepted.
    pub session_previous: Option<SecretString>,
    /// Whether any of them is a public development value (`--dev`).
    pub development: bool,
}

impl Secrets {
    /// Finds each secret in its file or in `env`, checks it, and fills the missing ones with the
    /// development values when `dev`; the sink secret is required only when `sinks`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the secret: missing (without `dev`), given both ways,
    /// unreadable, or shorter than [`SECRET_BYTES_MIN`].
    pub fn load(
        files: &SecretFiles,
        env: &dyn Fn(&str) -> Option<String>,
        dev: bool,
        sinks: bool,
    ) -> Result<Secrets, ConfigError> {
        let mut development = false;
        let mut missing = Vec::new();
        let mut found = |kind: SecretKind| -> Result<Option<SecretString>, ConfigError> {
            match given(kind, files.of(kind), env)? {
                Some(secret) => Ok(Some(secret)),
                None if kind == SecretKind::Sink && !sinks => Ok(None),
                None if dev => {
                    development = true;
                    Ok(Some(SecretString::from(kind.development())))
                }
                None => {
                    missing.push(kind);
                    Ok(None)
                }
            }
        };
        let session = found(SecretKind::Session)?;
        let operator = found(SecretKind::Operator)?;
        let webhook = found(SecretKind::Webhook)?;
        let sink = found(SecretKind::Sink)?;
        let session_previous =
            given(SecretKind::SessionPrevious, files.of(SecretKind::SessionPrevious), env)?;
        match (session, operator, webhook) {
            (Some(session), Some(operator), Some(webhook)) if missing.is_empty() => {
                Ok(Secrets { session, operator, webhook, sink, session_previous, development })
            }
            _ => {
                let named: Vec<String> = missing
                    .iter()
                    .map(|kind| format!("{} (or {})", kind.flag(), kind.env()))
                    .collect();
                Err(ConfigError::Invalid(format!(
                    "missing secrets: {}; each at least {SECRET_BYTES_MIN} random bytes (e.g. \
                     `head -c 32 /dev/urandom | base64`), or --dev on loopback for the public \
                     development ones",
                    named.join(", ")
                )))
            }
        }
    }

    /// Secrets for a test's in-process node: fixed, long enough, and not the development ones.
    pub fn for_tests() -> Secrets {
        Secrets {
            session: SecretString::from("test-session-secret-0123456789abcdef"),
            operator: SecretString::from(TEST_OPERATOR_TOKEN),
            webhook: SecretString::from("test-webhook-secret-0123456789abcdef"),
            sink: Some(SecretString::from("test-sink-secret-0123456789abcdef")),
            session_previous: None,
            development: false,
        }
    }

    /// The sink secret, or (for a node without sinks) a placeholder nobody signs with.
    pub fn sink_or_unused(&self) -> &str {
        self.sink.as_ref().map_or("", |secret| secret.expose_secret())
    }
}

/// The operator token of [`Secrets::for_tests`].
pub const TEST_OPERATOR_TOKEN: &str = "test-operator-token-0123456789abcdef";

/// The environment of [`Secrets::for_tests`], for [`crate::Config::load_with`].
pub fn test_env(name: &str) -> Option<String> {
    let secrets = Secrets::for_tests();
    let value = match name {
        "BOOKING_SESSION_SECRET" => &secrets.session,
        "BOOKING_OPERATOR_TOKEN" => &secrets.operator,
        "BOOKING_WEBHOOK_SECRET" => &secrets.webhook,
        "BOOKING_SINK_SECRET" => secrets.sink.as_ref()?,
        _ => return None,
    };
    Some(value.expose_secret().to_owned())
}

/// One secret from its file or the environment, checked; `None` when given neither way.
fn given(
    kind: SecretKind,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SecretString>, ConfigError> {
    let invalid = |why: String| ConfigError::Invalid(format!("{}: {why}", kind.flag()));
    let from_env = env(kind.env()).filter(|value| !value.is_empty());
    let value = match (file, from_env) {
        (Some(_), Some(_)) => {
            return Err(invalid(format!("given both as a file and as {}: choose one", kind.env())));
        }
        (None, None) => return Ok(None),
        (None, Some(value)) => value,
        (Some(path), None) => {
            read(path).map_err(|why| invalid(format!("{}: {why}", path.display())))?
        }
    };
    // A file written by `echo` ends in a newline that is not part of the secret.
    let value = value.trim_end_matches(['\n', '\r']);
    if value.len() < SECRET_BYTES_MIN {
        return Err(invalid(format!(
            "{} bytes; a secret needs at least {SECRET_BYTES_MIN}",
            value.len()
        )));
    }
    Ok(Some(SecretString::from(value.to_owned())))
}

fn read(path: &Path) -> Result<String, String> {
    let metadata = std::fs::metadata(path).map_err(|error| error.to_string())?;
    if metadata.len() > SECRET_FILE_BYTES_MAX {
        return Err(format!(
            "{} bytes; a secret file has at most {SECRET_FILE_BYTES_MAX}",
            metadata.len()
        ));
    }
    std::fs::read_to_string(path).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> =
            pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
        move |name| map.get(name).cloned()
    }

    const LONG: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn every_secret_is_required_without_dev() {
        let error = Secrets::load(&SecretFiles::default(), &env_of(&[]), false, true).unwrap_err();
        let message = error.to_string();
        for kind in SecretKind::ALL {
            assert!(message.contains(kind.flag()) && message.contains(kind.env()), "{message}");
        }
        // Without sinks the sink secret is not needed.
        let env = env_of(&[
            ("BOOKING_SESSION_SECRET", LONG),
            ("BOOKING_OPERATOR_TOKEN", LONG),
            ("BOOKING_WEBHOOK_SECRET", LONG),
        ]);
        let secrets = Secrets::load(&SecretFiles::default(), &env, false, false).unwrap();
        assert!(secrets.sink.is_none() && !secrets.development);
        let error = Secrets::load(&SecretFiles::default(), &env, false, true).unwrap_err();
        assert!(error.to_string().contains("--sink-secret-file"), "{error}");
    }

    #[test]
    fn dev_fills_the_missing_ones_with_the_development_values() {
        let env = env_of(&[("BOOKING_OPERATOR_TOKEN", LONG)]);
        let secrets = Secrets::load(&SecretFiles::default(), &env, true, true).unwrap();
        assert!(secrets.development);
        assert_eq!(secrets.operator.expose_secret(), LONG);
        assert_eq!(secrets.session.expose_secret(), SecretKind::Session.development());
        assert_eq!(secrets.sink_or_unused(), SecretKind::Sink.development());
    }

    #[test]
    fn the_previous_session_secret_is_optional_and_checked_like_the_others() {
        let required = [
            ("BOOKING_SESSION_SECRET", LONG),
            ("BOOKING_OPERATOR_TOKEN", LONG),
            ("BOOKING_WEBHOOK_SECRET", LONG),
        ];
        let secrets = Secrets::load(&SecretFiles::default(), &env_of(&required), true, false);
        assert!(secrets.unwrap().session_previous.is_none(), "not filled in by --dev");
        let mut rotating = required.to_vec();
        rotating.push(("BOOKING_SESSION_SECRET_PREVIOUS", "an-older-secret-0123456789abcdefgh"));
        let secrets = Secrets::load(&SecretFiles::default(), &env_of(&rotating), false, false);
        let previous = secrets.unwrap().session_previous.unwrap();
        assert_eq!(previous.expose_secret(), "an-older-secret-0123456789abcdefgh");
        rotating.pop();
        rotating.push(("BOOKING_SESSION_SECRET_PREVIOUS", "short"));
        let error = Secrets::load(&SecretFiles::default(), &env_of(&rotating), false, false);
        assert!(error.unwrap_err().to_string().contains("--session-secret-previous-file"));
    }

    #[test]
    fn short_doubled_or_unreadable_secrets_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("session");
        std::fs::write(&file, format!("{LONG}\n")).unwrap();
        let files = SecretFiles { session: Some(file.clone()), ..SecretFiles::default() };
        let secrets = Secrets::load(&files, &env_of(&[]), true, false).unwrap();
        assert_eq!(secrets.session.expose_secret(), LONG, "the newline is not the secret's");

        let doubled =
            Secrets::load(&files, &env_of(&[("BOOKING_SESSION_SECRET", LONG)]), true, false);
        assert!(doubled.unwrap_err().to_string().contains("both"));
        let short = Secrets::load(
            &SecretFiles::default(),
            &env_of(&[("BOOKING_WEBHOOK_SECRET", "short")]),
            true,
            false,
        );
        let message = short.unwrap_err().to_string();
        assert!(
            message.contains("--webhook-secret-file") && message.contains("5 bytes"),
            "{message}"
        );
        assert!(!message.contains("short"), "the value is never echoed: {message}");
        let gone =
            SecretFiles { operator: Some(dir.path().join("nope")), ..SecretFiles::default() };
        let message = Secrets::load(&gone, &env_of(&[]), true, false).unwrap_err().to_string();
        assert!(message.contains("--operator-token-file"), "{message}");
    }

    #[test]
    fn debug_shows_no_secret() {
        let secrets = Secrets::for_tests();
        let shown = format!("{secrets:?}");
        assert!(!shown.contains(secrets.session.expose_secret()), "{shown}");
        assert!(!shown.contains(TEST_OPERATOR_TOKEN), "{shown}");
        assert!(!shown.contains(secrets.webhook.expose_secret()), "{shown}");
    }
}
