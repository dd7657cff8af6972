mod faults;
mod real_cli;
mod transcripts;

use async_trait::async_trait;
use claude_host_proxy::{ProxyConfig, ProxyHandle};
use claude_host_sdk::{Callbacks, ClaudeSession, PermissionResult, SessionOptions};
use claude_host_testkit::fake::FakeUpstream;
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::http_client;
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(crate) struct Env {
    pub fake: FakeUpstream,
    pub proxy: ProxyHandle,
    pub dir: tempfile::TempDir,
    /// Process groups of every CLI this test started; all must be gone when it ends.
    pub groups: Mutex<Vec<i32>>,
}

impl Drop for Env {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for pgid in self.groups.lock().unwrap().iter() {
            // Signal 0 only checks existence. Sessions are dropped (groups killed) by now;
            // the kernel and tokio's reaper may need a moment.
            #[allow(unsafe_code)]
            while unsafe { libc::kill(-pgid, 0) } == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "process group {pgid} outlived its test"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

pub(crate) async fn env() -> Env {
    let fake = FakeUpstream::start().await.unwrap();
    let copilot = CopilotUpstream::new(
        http_client().unwrap(),
        "gho_fake_github_token".into(),
        CopilotEndpoints::single_host(&fake.url()),
        ClientIdentity::default(),
        CopilotOptions::default(),
    );
    let proxy = claude_host_proxy::start(ProxyConfig::default(), Arc::new(copilot))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    Env {
        fake,
        proxy,
        dir,
        groups: Mutex::new(Vec::new()),
    }
}

impl Env {
    pub fn spawn(&self, opts: SessionOptions, cb: Arc<Recorder>) -> ClaudeSession {
        self.spawn_mcp(opts, cb, Vec::new())
    }

    pub fn spawn_mcp(
        &self,
        opts: SessionOptions,
        cb: Arc<Recorder>,
        servers: Vec<claude_host_sdk::SdkMcpServer>,
    ) -> ClaudeSession {
        let s = ClaudeSession::spawn_with_mcp(opts, cb, servers).unwrap();
        self.groups.lock().unwrap().push(s.pgid().unwrap());
        s
    }

    pub fn cwd(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn opts(&self) -> SessionOptions {
        let mut o = SessionOptions::new(
            claude_host_testkit::cli::pinned_cli().unwrap(),
            self.cwd(),
            self.proxy.base_url(),
            self.proxy.auth_token(&uuid::Uuid::new_v4().to_string()),
        );
        o.config_dir = Some(self.dir.path().join(".claude"));
        o.extra_env
            .push(("HOME".into(), self.dir.path().display().to_string()));
        o.control_timeout = Duration::from_secs(30);
        o
    }
}

/// What the test decides for each `can_use_tool`, in order.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    Allow,
    Deny(&'static str),
    /// Never answer; record the cancellation when the CLI withdraws the request.
    Park,
}

#[derive(Default)]
pub(crate) struct Recorder {
    pub decisions: Mutex<VecDeque<Decision>>,
    pub permission_requests: Mutex<Vec<Map<String, Value>>>,
    pub hooks: Mutex<Vec<(String, Value)>>,
    pub cancelled: Mutex<Vec<String>>,
    pub event: tokio::sync::Notify,
}

impl Recorder {
    pub fn with(decisions: Vec<Decision>) -> Arc<Recorder> {
        Arc::new(Recorder {
            decisions: Mutex::new(decisions.into()),
            ..Recorder::default()
        })
    }
}

#[async_trait]
impl Callbacks for Recorder {
    async fn can_use_tool(
        &self,
        request: Map<String, Value>,
        cancel: CancellationToken,
    ) -> PermissionResult {
        let input = request.get("input").cloned().unwrap_or(Value::Null);
        let tool = request
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        self.permission_requests.lock().unwrap().push(request);
        self.event.notify_waiters();
        let decision = self
            .decisions
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Decision::Deny("no decision scripted"));
        match decision {
            Decision::Allow => PermissionResult::Allow {
                updated_input: input,
                updated_permissions: None,
            },
            Decision::Deny(m) => PermissionResult::Deny {
                message: m.into(),
                interrupt: false,
            },
            Decision::Park => {
                cancel.cancelled().await;
                self.cancelled.lock().unwrap().push(tool);
                self.event.notify_waiters();
                PermissionResult::Deny {
                    message: "cancelled".into(),
                    interrupt: false,
                }
            }
        }
    }

    async fn hook_callback(
        &self,
        callback_id: String,
        input: Value,
        _cancel: CancellationToken,
    ) -> Value {
        self.hooks.lock().unwrap().push((callback_id, input));
        serde_json::json!({"continue": true})
    }
}

/// True once no process of the group is left.
pub(crate) use claude_host_testkit::cli::group_gone;
