//! GitHub sign-in with the OAuth device flow (RFC 8628).

use crate::{describe_reqwest, trim_base};
use serde::Deserialize;
use std::time::Duration;

/// The OAuth client id Copilot clients use.
pub const DEFAULT_CLIENT_ID: &str = "Iv1.b507a08c87ecfe98";
/// The scope requested by default.
pub const DEFAULT_SCOPE: &str = "read:user";

/// What `POST /login/device/code` returned.
#[derive(Debug, Clone, Deserialize)]
pub struct DeviceCode {
    /// Secret code used when polling.
    pub device_code: String,
    /// The code the user types.
    pub user_code: String,
    /// Where the user types it.
    pub verification_uri: String,
    /// Seconds until the codes expire.
    #[serde(default = "default_expires")]
    pub expires_in: u64,
    /// Minimum seconds between polls.
    #[serde(default = "default_interval")]
    pub interval: u64,
}

fn default_expires() -> u64 {
    900
}
fn default_interval() -> u64 {
    5
}

/// Progress while waiting for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollProgress {
    /// Still waiting; the number of polls so far.
    Pending(u32),
    /// GitHub asked us to slow down; the new interval.
    SlowDown(Duration),
}

/// Why sign-in failed.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The code expired before the user approved it.
    #[error("the device code expired before it was approved; run `claude-host login` again")]
    Expired,
    /// The user declined.
    #[error("sign-in was declined on GitHub (access_denied)")]
    AccessDenied,
    /// GitHub could not be reached.
    #[error("cannot reach GitHub: {0}")]
    Transport(String),
    /// GitHub answered with an error we cannot continue from.
    #[error("GitHub refused the sign-in: {0}")]
    Refused(String),
}

#[derive(Deserialize)]
struct TokenPoll {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
}

/// A granted token.
#[derive(Clone)]
pub struct GrantedToken {
    /// The OAuth token.
    pub access_token: String,
    /// The granted scope.
    pub scope: Option<String>,
}

/// The device flow against one GitHub instance.
#[derive(Debug, Clone)]
pub struct DeviceFlow {
    http: reqwest::Client,
    github_url: String,
    client_id: String,
    scope: String,
    slow_down_step: Duration,
}

impl DeviceFlow {
    /// A flow against `github_url` (`https://github.com` or a GHE host).
    pub fn new(http: reqwest::Client, github_url: &str, client_id: &str, scope: &str) -> Self {
        DeviceFlow {
            http,
            github_url: trim_base(github_url),
            client_id: client_id.to_owned(),
            scope: scope.to_owned(),
            slow_down_step: Duration::from_secs(5),
        }
    }

    /// How much to add to the interval on `slow_down` (RFC 8628 says 5 s; tests shorten it).
    pub fn with_slow_down_step(mut self, step: Duration) -> Self {
        self.slow_down_step = step;
        self
    }

    /// Asks GitHub for a device and user code.
    pub async fn request_code(&self) -> Result<DeviceCode, LoginError> {
        let resp = self
            .http
            .post(format!("{}/login/device/code", self.github_url))
            .header("accept", "application/json")
            .json(&serde_json::json!({"client_id": self.client_id, "scope": self.scope}))
            .send()
            .await
            .map_err(|e| LoginError::Transport(describe_reqwest(&e)))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| LoginError::Transport(describe_reqwest(&e)))?;
        if !status.is_success() {
            return Err(LoginError::Refused(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| LoginError::Refused(format!("unexpected device-code reply: {e}")))
    }

    /// Polls until the user approves, declines or the code expires, reporting progress.
    pub async fn poll(
        &self,
        code: &DeviceCode,
        mut progress: impl FnMut(PollProgress),
    ) -> Result<GrantedToken, LoginError> {
        let mut interval = Duration::from_secs(code.interval);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(code.expires_in);
        let mut polls = 0u32;
        loop {
            tokio::time::sleep(interval).await;
            if tokio::time::Instant::now() >= deadline {
                return Err(LoginError::Expired);
            }
            polls += 1;
            let resp = self
                .http
                .post(format!("{}/login/oauth/access_token", self.github_url))
                .header("accept", "application/json")
                .json(&serde_json::json!({
                    "client_id": self.client_id,
                    "device_code": code.device_code,
                    "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                }))
                .send()
                .await
                .map_err(|e| LoginError::Transport(describe_reqwest(&e)))?;
            let body = resp
                .bytes()
                .await
                .map_err(|e| LoginError::Transport(describe_reqwest(&e)))?;
            let poll: TokenPoll = serde_json::from_slice(&body)
                .map_err(|e| LoginError::Refused(format!("unexpected token reply: {e}")))?;
            if let Some(token) = poll.access_token.filter(|t| !t.is_empty()) {
                return Ok(GrantedToken {
                    access_token: token,
                    scope: poll.scope,
                });
            }
            match poll.error.as_deref() {
                Some("authorization_pending") => progress(PollProgress::Pending(polls)),
                Some("slow_down") => {
                    // RFC 8628 §3.5: every slow_down adds 5 s to the interval for good.
                    interval += self.slow_down_step;
                    progress(PollProgress::SlowDown(interval));
                }
                Some("expired_token") => return Err(LoginError::Expired),
                Some("access_denied") => return Err(LoginError::AccessDenied),
                Some(other) => {
                    return Err(LoginError::Refused(format!(
                        "{other}{}",
                        poll.error_description
                            .map(|d| format!(": {d}"))
                            .unwrap_or_default()
                    )));
                }
                None => {
                    return Err(LoginError::Refused(
                        "reply had neither a token nor an error".into(),
                    ));
                }
            }
        }
    }
}
