mod client_tools;
mod core;
mod faults;
mod host;
mod interactive;
mod restore;
mod subagents;
mod turns;

use ahp_types::actions::StateAction;
use claude_host_agent::{
    Agent, AgentConfig, ProxyModels, SessionEvent, SessionHandle, StandaloneSession,
};
use claude_host_proxy::{ProxyConfig, ProxyHandle};
use claude_host_sdk::SessionOptions;
use claude_host_testkit::fake::FakeUpstream;
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::http_client;
use std::sync::Arc;

pub(crate) struct Env {
    pub fake: FakeUpstream,
    pub proxy: ProxyHandle,
    pub dir: tempfile::TempDir,
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
    Env { fake, proxy, dir }
}

impl Env {
    pub fn opts(&self) -> SessionOptions {
        let mut o = SessionOptions::new(
            claude_host_testkit::cli::pinned_cli().unwrap(),
            self.dir.path().join("work"),
            self.proxy.base_url(),
            self.proxy.auth_token("agent-test"),
        );
        o.config_dir = Some(self.dir.path().join(".claude"));
        o.extra_env
            .push(("HOME".into(), self.dir.path().display().to_string()));
        o.include_partial_messages = true;
        o
    }

    /// An agent over the same fake (through a proxy of its own), optionally with a store.
    pub async fn agent(&self, store: Option<Arc<dyn claude_host_store::Store>>) -> Agent {
        self.agent_with(store, |_| {}).await
    }

    /// As [`Env::agent`], with the configuration changed first.
    pub async fn agent_with(
        &self,
        store: Option<Arc<dyn claude_host_store::Store>>,
        tweak: impl FnOnce(&mut AgentConfig),
    ) -> Agent {
        let copilot = CopilotUpstream::new(
            http_client().unwrap(),
            "gho_fake_github_token".into(),
            CopilotEndpoints::single_host(&self.fake.url()),
            ClientIdentity::default(),
            CopilotOptions::default(),
        );
        let proxy = claude_host_proxy::start(
            ProxyConfig::default(),
            Arc::new(claude_host_upstream::signed_out::SignedOut),
        )
        .await
        .unwrap();
        let mut config = AgentConfig::new(
            claude_host_testkit::cli::pinned_cli().unwrap(),
            self.dir.path().join("work"),
        );
        config.config_dir = Some(self.dir.path().join(".claude"));
        config
            .extra_env
            .push(("HOME".into(), self.dir.path().display().to_string()));
        tweak(&mut config);
        Agent::new(
            config,
            Arc::new(ProxyModels::with_upstream(proxy, Arc::new(copilot), None)),
            store,
        )
    }

    pub fn session(&self, opts: SessionOptions) -> SessionHandle {
        claude_host_agent::standalone_session(StandaloneSession::new(opts))
    }
}

/// A session's chat actions as a test reads them.
/// Each turn's state (`complete`, `error`, …), oldest first.
pub(crate) async fn turn_states(s: &SessionHandle) -> Vec<String> {
    s.state()
        .await
        .turns
        .iter()
        .map(|t| {
            serde_json::to_value(t.state)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

pub(crate) use claude_host_testkit::turn_markdown;

/// A meter whose counters a test reads back (through the SDK's in-memory exporter).
pub(crate) struct TestMeter {
    provider: opentelemetry_sdk::metrics::SdkMeterProvider,
    exporter: opentelemetry_sdk::metrics::InMemoryMetricExporter,
}

impl TestMeter {
    pub(crate) fn new() -> TestMeter {
        let exporter = opentelemetry_sdk::metrics::InMemoryMetricExporter::default();
        let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
            .with_reader(
                opentelemetry_sdk::metrics::PeriodicReader::builder(exporter.clone()).build(),
            )
            .build();
        TestMeter { provider, exporter }
    }

    pub(crate) fn meter(&self) -> opentelemetry::metrics::Meter {
        opentelemetry::metrics::MeterProvider::meter(&self.provider, "test")
    }

    /// The running total of counter `name` (0 before anything counted).
    pub(crate) fn total(&self, name: &str) -> u64 {
        use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
        self.provider.force_flush().unwrap();
        let exports = self.exporter.get_finished_metrics().unwrap();
        // Cumulative: the newest export that has the counter holds its total.
        exports
            .iter()
            .rev()
            .flat_map(|r| r.scope_metrics().flat_map(|s| s.metrics()))
            .find(|m| m.name() == name)
            .map_or(0, |m| match m.data() {
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    sum.data_points().map(|p| p.value()).sum()
                }
                other => panic!("{name} is not a u64 counter: {other:?}"),
            })
    }
}

pub(crate) struct Actions {
    sub: claude_host_agent::SessionSubscription,
    chat: String,
}

impl Actions {
    pub async fn of(s: &SessionHandle) -> Actions {
        Actions {
            sub: s.subscribe().await.unwrap().1,
            chat: s.chat_uri().to_owned(),
        }
    }

    fn chat_action(&self, e: SessionEvent) -> Option<StateAction> {
        match e {
            SessionEvent::Action(p) => (p.channel() == self.chat).then(|| p.action().clone()),
            SessionEvent::Resync(_) => panic!("the test subscriber fell behind"),
        }
    }

    /// Every chat action published so far (none may have been skipped).
    pub async fn drain(&mut self) -> Vec<StateAction> {
        let events = self.sub.drain().await;
        events
            .into_iter()
            .filter_map(|e| self.chat_action(e))
            .collect()
    }

    /// The next chat action.
    pub async fn recv(&mut self) -> StateAction {
        loop {
            let e = tokio::time::timeout(std::time::Duration::from_secs(60), self.sub.recv())
                .await
                .expect("an action in time")
                .expect("the session is running");
            if let Some(a) = self.chat_action(e) {
                return a;
            }
        }
    }
}

pub(crate) fn kind(a: &StateAction) -> String {
    serde_json::to_value(a).unwrap()["type"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub(crate) use claude_host_testkit::cli::group_gone;
