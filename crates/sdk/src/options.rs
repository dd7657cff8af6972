//! How a session's CLI is started: argv and environment.

use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that decides how the CLI is spawned.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The CLI executable.
    pub cli: PathBuf,
    /// Working directory.
    pub cwd: PathBuf,
    /// `ANTHROPIC_BASE_URL`: the claude-host proxy.
    pub base_url: String,
    /// `ANTHROPIC_AUTH_TOKEN`: `<nonce>.<sessionId>`. Passed in the environment, never argv.
    pub auth_token: String,
    /// `CLAUDE_CONFIG_DIR` (transcripts live under it).
    pub config_dir: Option<PathBuf>,
    /// `--model`.
    pub model: Option<String>,
    /// `--permission-mode`.
    pub permission_mode: Option<String>,
    /// `--effort` (`low`, `medium`, `high`, `xhigh`, `max`).
    pub effort: Option<String>,
    /// `--resume <id>`.
    pub resume: Option<String>,
    /// `--session-id <id>` for a new session.
    pub session_id: Option<String>,
    /// `--fork-session` (with `resume`).
    pub fork_session: bool,
    /// `--resume-session-at <message uuid>`.
    pub resume_session_at: Option<String>,
    /// `--include-partial-messages` (stream events).
    pub include_partial_messages: bool,
    /// `--setting-sources`; `None` loads all sources.
    pub setting_sources: Option<Vec<String>>,
    /// `--allowedTools`.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`.
    pub disallowed_tools: Vec<String>,
    /// `--mcp-config` (`{"mcpServers": …}`).
    pub mcp_config: Option<Value>,
    /// `--add-dir`, repeated.
    pub additional_directories: Vec<PathBuf>,
    /// `--settings <json>`: flag settings, the highest-precedence source short of policy.
    pub settings: Option<Value>,
    /// `--plugin-dir`, repeated.
    pub plugin_dirs: Vec<PathBuf>,
    /// `--agent`: the session's main thread runs as this agent.
    pub agent: Option<String>,
    /// Told of the CLI's session, so nothing in it outlives a host killed with SIGKILL.
    pub keeper: Option<std::sync::Arc<crate::Keeper>>,
    /// `--max-thinking-tokens`.
    pub max_thinking_tokens: Option<u32>,
    /// `--replay-user-messages`.
    pub replay_user_messages: bool,
    /// `--session-mirror`.
    pub session_mirror: bool,
    /// Route permission prompts to the host (`--permission-prompt-tool=stdio`).
    pub permission_prompts_to_host: bool,
    /// Further arguments, appended as given.
    pub extra_args: Vec<String>,
    /// Further environment variables (e.g. `IS_SANDBOX=1` for bypassPermissions as root).
    pub extra_env: Vec<(String, String)>,
    /// Longest stdout line accepted; longer lines become a typed error for that frame.
    pub max_line_bytes: usize,
    /// Default timeout of host → CLI control requests.
    pub control_timeout: Duration,
    /// How long a graceful close waits before killing.
    pub close_timeout: Duration,
}

/// Variables inherited from the host: what the CLI and its tools need, nothing else.
const INHERITED: &[&str] = &[
    "HOME",
    "PATH",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TMPDIR",
    "TERM",
    "TZ",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// OpenTelemetry's standard variables, passed on to the CLI when the host has them.
const OTEL_VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_LOGS_EXPORT_INTERVAL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SERVICE_NAME",
];

/// Claude Code's own switches for the telemetry above.
const CLAUDE_TELEMETRY_VARS: &[&str] = &[
    "CLAUDE_CODE_ENABLE_TELEMETRY",
    "OTEL_LOG_USER_PROMPTS",
    "OTEL_LOG_TOOL_DETAILS",
];

/// The `CLAUDE_CODE_ENTRYPOINT` claude-host reports (User-Agent suffix, transcripts).
pub const ENTRYPOINT: &str = "sdk-claude-host";

impl SessionOptions {
    /// Options with the defaults the official SDK uses.
    pub fn new(cli: PathBuf, cwd: PathBuf, base_url: String, auth_token: String) -> Self {
        SessionOptions {
            cli,
            cwd,
            base_url,
            auth_token,
            config_dir: None,
            model: None,
            permission_mode: None,
            effort: None,
            resume: None,
            session_id: None,
            fork_session: false,
            resume_session_at: None,
            include_partial_messages: false,
            setting_sources: None,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            mcp_config: None,
            additional_directories: Vec::new(),
            settings: None,
            plugin_dirs: Vec::new(),
            agent: None,
            keeper: None,
            max_thinking_tokens: None,
            replay_user_messages: false,
            session_mirror: false,
            permission_prompts_to_host: true,
            extra_args: Vec::new(),
            extra_env: Vec::new(),
            max_line_bytes: 64 * 1024 * 1024,
            control_timeout: Duration::from_secs(60),
            close_timeout: Duration::from_secs(5),
        }
    }

    /// The argv, as the official SDK builds it.
    pub fn argv(&self) -> Vec<String> {
        let mut a: Vec<String> = [
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
        ]
        .map(str::to_owned)
        .to_vec();
        if self.permission_prompts_to_host {
            a.push("--permission-prompt-tool=stdio".into());
        }
        let mut flag = |name: &str, v: &Option<String>| {
            if let Some(v) = v {
                a.push(format!("--{name}={v}"));
            }
        };
        flag("model", &self.model);
        flag("permission-mode", &self.permission_mode);
        flag("effort", &self.effort);
        flag("resume", &self.resume);
        flag("session-id", &self.session_id);
        flag("resume-session-at", &self.resume_session_at);
        if self.fork_session {
            a.push("--fork-session".into());
        }
        if self.include_partial_messages {
            a.push("--include-partial-messages".into());
        }
        if let Some(s) = &self.setting_sources {
            a.push(format!("--setting-sources={}", s.join(",")));
        }
        if !self.allowed_tools.is_empty() {
            a.push(format!("--allowedTools={}", self.allowed_tools.join(",")));
        }
        if !self.disallowed_tools.is_empty() {
            a.push(format!(
                "--disallowedTools={}",
                self.disallowed_tools.join(",")
            ));
        }
        if let Some(m) = &self.mcp_config {
            a.push("--mcp-config".into());
            a.push(m.to_string());
        }
        for d in &self.additional_directories {
            a.push(format!("--add-dir={}", d.display()));
        }
        if let Some(s) = &self.settings {
            a.push("--settings".into());
            a.push(s.to_string());
        }
        for d in &self.plugin_dirs {
            a.push(format!("--plugin-dir={}", d.display()));
        }
        if let Some(agent) = &self.agent {
            a.push(format!("--agent={agent}"));
        }
        if let Some(t) = self.max_thinking_tokens {
            a.push(if t == 0 {
                "--thinking=disabled".into()
            } else {
                format!("--max-thinking-tokens={t}")
            });
        }
        if self.replay_user_messages {
            a.push("--replay-user-messages".into());
        }
        if self.session_mirror {
            a.push("--session-mirror".into());
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }

    /// The complete environment: an allowlist of the host's variables (read through `host`)
    /// plus what claude-host sets. `ANTHROPIC_API_KEY`, `NODE_OPTIONS` and every other
    /// variable are left out by construction.
    pub fn env(&self, host: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = INHERITED
            .iter()
            .filter_map(|k| host(k).map(|v| ((*k).to_owned(), v)))
            .collect();
        for k in ["LC_ALL", "LC_CTYPE", "LC_MESSAGES"] {
            if let Some(v) = host(k) {
                env.push((k.into(), v));
            }
        }
        // Claude Code exports its own telemetry where the user points OpenTelemetry (as VS
        // Code's agent passes these on).
        for k in OTEL_VARS.iter().chain(CLAUDE_TELEMETRY_VARS) {
            if let Some(v) = host(k) {
                env.push(((*k).into(), v));
            }
        }
        let set = [
            ("ANTHROPIC_BASE_URL", self.base_url.clone()),
            ("ANTHROPIC_AUTH_TOKEN", self.auth_token.clone()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("CLAUDE_CODE_SDK_READS_SESSION_STATE", "1".to_owned()),
            ("CLAUDE_CODE_ENTRYPOINT", ENTRYPOINT.to_owned()),
            // The host speaks to the version it pinned; an interactive CLI would otherwise
            // update the user's global install behind its back (`npm -g`).
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ];
        env.extend(set.into_iter().map(|(k, v)| (k.to_owned(), v)));
        if let Some(d) = &self.config_dir {
            env.push(("CLAUDE_CONFIG_DIR".into(), d.display().to_string()));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_and_env_follow_the_sdk() {
        let mut o = SessionOptions::new(
            "/bin/claude".into(),
            "/w".into(),
            "http://127.0.0.1:1".into(),
            "n.s".into(),
        );
        o.model = Some("sonnet".into());
        o.resume = Some("abc".into());
        o.include_partial_messages = true;
        o.disallowed_tools = vec!["AskUserQuestion".into()];
        o.settings = Some(serde_json::json!({"skillOverrides": {"x": "off"}}));
        o.plugin_dirs = vec!["/p".into()];
        o.agent = Some("rev".into());
        let argv = o.argv();
        assert_eq!(
            argv,
            [
                "--output-format",
                "stream-json",
                "--verbose",
                "--input-format",
                "stream-json",
                "--permission-prompt-tool=stdio",
                "--model=sonnet",
                "--resume=abc",
                "--include-partial-messages",
                "--disallowedTools=AskUserQuestion",
                "--settings",
                r#"{"skillOverrides":{"x":"off"}}"#,
                "--plugin-dir=/p",
                "--agent=rev"
            ]
        );
        assert!(!argv.iter().any(|a| a.contains("n.s")), "secret on argv");
        let host = |k: &str| match k {
            "HOME" => Some("/h".to_owned()),
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:4318".to_owned()),
            "CLAUDE_CODE_ENABLE_TELEMETRY" => Some("1".to_owned()),
            "ANTHROPIC_API_KEY" | "NODE_OPTIONS" | "GH_TOKEN" => Some("secret".to_owned()),
            _ => None,
        };
        let env = o.env(&host);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HOME"), Some("/h"));
        assert_eq!(
            get("OTEL_EXPORTER_OTLP_ENDPOINT"),
            Some("http://127.0.0.1:4318"),
            "OpenTelemetry settings reach the CLI"
        );
        assert_eq!(get("CLAUDE_CODE_ENABLE_TELEMETRY"), Some("1"));
        assert_eq!(get("ANTHROPIC_AUTH_TOKEN"), Some("n.s"));
        assert_eq!(get("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), Some("1"));
        assert_eq!(get("CLAUDE_CODE_ENTRYPOINT"), Some(ENTRYPOINT));
        for k in ["ANTHROPIC_API_KEY", "NODE_OPTIONS", "GH_TOKEN"] {
            assert_eq!(get(k), None, "{k} leaked");
        }
    }
}
