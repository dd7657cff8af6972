mod core;
mod protocol;
mod vscode;
mod window;
mod wire;

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::ActionEnvelope;
use ahp_types::state::ChatState;
use claude_host_agent::{Agent, AgentConfig, GITHUB_RESOURCE, ProxyModels};
use claude_host_ahp::{Host, HostConfig, ServeConfig, ServerHandle};
use claude_host_testkit::fake::FakeUpstream;
use claude_host_upstream::Upstream;
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::http_client;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const TOKEN: &str = "test-connection-token_0123";
pub(crate) const GITHUB_TOKEN: &str = "gho_fake_github_token";
pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) struct Env {
    pub fake: FakeUpstream,
    pub host: Arc<Host>,
    pub server: Option<ServerHandle>,
    pub dir: tempfile::TempDir,
    pub url: String,
}

pub(crate) async fn env_with(host_config: HostConfig) -> Env {
    env_serving(host_config, |_| {}).await
}

pub(crate) async fn env_serving(
    host_config: HostConfig,
    tweak: impl FnOnce(&mut ServeConfig),
) -> Env {
    env_full(host_config, |_| {}, tweak).await
}

pub(crate) async fn env_full(
    host_config: HostConfig,
    tweak_agent: impl FnOnce(&mut AgentConfig),
    tweak: impl FnOnce(&mut ServeConfig),
) -> Env {
    env_of(false, false, host_config, tweak_agent, tweak).await
}

/// A fake upstream, a temporary home with its `work` folder, and a host serving it (with a
/// session store when `with_store`, holding a GitHub credential when `signed_in`).
async fn env_of(
    with_store: bool,
    signed_in: bool,
    host_config: HostConfig,
    tweak_agent: impl FnOnce(&mut AgentConfig),
    tweak: impl FnOnce(&mut ServeConfig),
) -> Env {
    let fake = FakeUpstream::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    let store = match with_store {
        true => Some(store_in(dir.path()).await),
        false => None,
    };
    let (host, server) = serve(
        dir.path(),
        &fake.url(),
        store,
        host_config,
        tweak_agent,
        tweak,
        signed_in,
    )
    .await;
    let url = format!("ws://{}/?tkn={TOKEN}", server.addr());
    Env {
        fake,
        host,
        server: Some(server),
        dir,
        url,
    }
}

/// A host and its server over `dir` (its `work` folder, its `.claude` config, and with
/// `store`, the session store), models from the fake at `fake_url`. With `signed_in`, the
/// agent takes a GitHub token before the host starts, as `serve` does with a stored
/// credential.
#[allow(clippy::too_many_arguments)]
async fn serve(
    dir: &std::path::Path,
    fake_url: &str,
    store: Option<Arc<dyn claude_host_store::Store>>,
    host_config: HostConfig,
    tweak_agent: impl FnOnce(&mut AgentConfig),
    tweak: impl FnOnce(&mut ServeConfig),
    signed_in: bool,
) -> (Arc<Host>, ServerHandle) {
    let fake_url = fake_url.to_owned();
    let factory = move |token: &str| -> Arc<dyn Upstream> {
        Arc::new(CopilotUpstream::new(
            http_client().unwrap(),
            token.to_owned(),
            CopilotEndpoints::single_host(&fake_url),
            ClientIdentity::default(),
            CopilotOptions::default(),
        ))
    };
    let proxy = claude_host_proxy::start(
        Default::default(),
        Arc::new(claude_host_upstream::signed_out::SignedOut),
    )
    .await
    .unwrap();
    let mut config = AgentConfig::new(
        claude_host_testkit::cli::pinned_cli().unwrap(),
        dir.join("work"),
    );
    config.config_dir = Some(dir.join(".claude"));
    config.edits_dir = Some(dir.join("edits"));
    config.customizations_dir = Some(dir.join("customizations"));
    config
        .extra_env
        .push(("HOME".into(), dir.display().to_string()));
    tweak_agent(&mut config);
    let agent = Arc::new(Agent::new(
        config,
        Arc::new(ProxyModels::signed_out(proxy, Arc::new(factory))),
        store,
    ));
    if signed_in {
        assert!(
            agent
                .authenticate(GITHUB_RESOURCE, GITHUB_TOKEN)
                .await
                .unwrap()
        );
    }
    let host = Host::new(agent, host_config).await;
    let mut serve = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        connection_token: Some(TOKEN.into()),
        ..Default::default()
    };
    tweak(&mut serve);
    let server = claude_host_ahp::start(serve, host.clone()).await.unwrap();
    (host, server)
}

/// A host with a session store, which [`Env::restart`] can stop and start again over the
/// same files on the same port.
pub(crate) async fn env_with_store() -> Env {
    env_of(true, false, HostConfig::default(), |_| {}, |_| {}).await
}

async fn store_in(dir: &std::path::Path) -> Arc<dyn claude_host_store::Store> {
    Arc::new(
        claude_host_store::SqliteStore::open(&dir.join("sessions.sqlite"))
            .await
            .unwrap(),
    )
}

pub(crate) async fn env() -> Env {
    env_with(HostConfig::default()).await
}

/// A host that holds a GitHub credential from its start (`claude-host login`, `GH_TOKEN`).
pub(crate) async fn env_signed_in() -> Env {
    env_of(false, true, HostConfig::default(), |_| {}, |_| {}).await
}

impl Env {
    pub async fn client(&self) -> Client {
        let t = ahp_ws::WebSocketTransport::connect(&self.url)
            .await
            .unwrap();
        Client::connect(t, ClientConfig::default()).await.unwrap()
    }

    /// A connected, initialized and authenticated client.
    pub async fn ready_client(&self, id: &str) -> Client {
        let c = self.client().await;
        initialize(&c, id).await;
        let _: Value = c
            .request(
                "authenticate",
                json!({"channel": "ahp-root://", "resource": GITHUB_RESOURCE, "token": GITHUB_TOKEN}),
            )
            .await
            .unwrap();
        c
    }

    /// Stops the host (its sessions and CLIs) and its server, then starts a new one over the
    /// same files and port, as a host restart does.
    pub async fn restart(&mut self) {
        let server = self.server.take().unwrap();
        let addr = server.addr();
        server.shutdown().await;
        self.host.shutdown().await;
        let (host, server) = serve(
            self.dir.path(),
            &self.fake.url(),
            Some(store_in(self.dir.path()).await),
            HostConfig::default(),
            |_| {},
            |s| s.listen = addr,
            false,
        )
        .await;
        self.host = host;
        self.server = Some(server);
    }

    pub fn work(&self) -> std::path::PathBuf {
        self.dir.path().join("work")
    }

    /// Creates a session; returns its session and chat URIs.
    pub async fn create_session(&self, c: &Client) -> (String, String) {
        let id = uuid::Uuid::new_v4();
        let session = format!("ahp-session:/{id}");
        let _: Value = c
            .request(
                "createSession",
                json!({"channel": session, "provider": "claude",
                       "workingDirectories": [claude_host_protocol::uri::file_uri(&self.work())]}),
            )
            .await
            .unwrap();
        let chat = claude_host_protocol::uri::default_chat_uri(&session);
        (session, chat)
    }

    /// The server's own reduced state of a chat.
    pub async fn server_chat_state(&self, chat: &str) -> Value {
        match self.host.snapshot(chat).await.unwrap() {
            ahp_types::state::SnapshotState::Chat(s) => serde_json::to_value(*s).unwrap(),
            _ => panic!("not a chat"),
        }
    }

    /// The server's own state of a session channel.
    pub async fn server_session_state(&self, session: &str) -> ahp_types::state::SessionState {
        match self.host.snapshot(session).await.unwrap() {
            ahp_types::state::SnapshotState::Session(s) => *s,
            _ => panic!("not a session"),
        }
    }
}

pub(crate) async fn initialize(c: &Client, id: &str) -> ahp_types::commands::InitializeResult {
    c.initialize(
        id.into(),
        ahp_types::version::SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .map(|v| (*v).to_owned())
            .collect(),
        vec!["ahp-root://".into()],
    )
    .await
    .unwrap()
}

/// A chat as one client reduces it from a snapshot and the actions after it.
pub(crate) struct Mirror {
    pub state: ChatState,
    pub envelopes: Vec<ActionEnvelope>,
    pub sub: ahp::SessionSubscription,
}

impl Mirror {
    pub async fn subscribe(c: &Client, chat: &str) -> Mirror {
        Mirror::subscribe_with(c, chat, None).await
    }

    /// Subscribes with a snapshot `view` (`view.turns`: the newest turns only).
    pub async fn subscribe_with(
        c: &Client,
        chat: &str,
        view: Option<ahp_types::commands::SubscribeView>,
    ) -> Mirror {
        let (result, sub) = c
            .subscribe_with_options(chat.into(), None, view)
            .await
            .unwrap();
        let state = match result.snapshot.unwrap().state {
            ahp_types::state::SnapshotState::Chat(s) => *s,
            other => panic!("not a chat snapshot: {other:?}"),
        };
        Mirror {
            state,
            envelopes: Vec::new(),
            sub,
        }
    }

    /// Applies the next action; returns its envelope.
    pub async fn next(&mut self) -> ActionEnvelope {
        loop {
            let ev = tokio::time::timeout(WAIT, self.sub.recv())
                .await
                .expect("an action in time")
                .expect("the client is running");
            if let SubscriptionEvent::Action(env) = ev {
                if env.rejection_reason.is_none() {
                    ahp::reducers::apply_action_to_chat(&mut self.state, &env.action);
                }
                self.envelopes.push(env.clone());
                return env;
            }
        }
    }

    /// Applies actions until one of type `ty` (returned).
    pub async fn until(&mut self, ty: &str) -> ActionEnvelope {
        loop {
            let env = self.next().await;
            if kind(&env) == ty {
                return env;
            }
        }
    }

    pub fn json(&self) -> Value {
        serde_json::to_value(&self.state).unwrap()
    }
}

pub(crate) fn rule(
    when: claude_host_testkit::fake::Match,
    reply: claude_host_testkit::fake::Reply,
) -> claude_host_testkit::fake::Rule {
    claude_host_testkit::fake::Rule {
        when,
        reply,
        times: None,
    }
}

/// Reads a subscription until an action of type `ty` (with an origin, when `echo`).
pub(crate) async fn until_kind(
    sub: &mut ahp::SessionSubscription,
    ty: &str,
    echo: bool,
) -> ActionEnvelope {
    loop {
        let ev = tokio::time::timeout(WAIT, sub.recv())
            .await
            .expect("an action in time")
            .expect("the client is running");
        if let SubscriptionEvent::Action(env) = ev
            && kind(&env) == ty
            && (!echo || env.origin.is_some())
        {
            return env;
        }
    }
}

pub(crate) fn kind(env: &ActionEnvelope) -> String {
    serde_json::to_value(&env.action).unwrap()["type"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

pub(crate) fn user_turn(turn_id: &str, text: &str) -> ahp_types::actions::StateAction {
    serde_json::from_value(json!({"type": "chat/turnStarted", "turnId": turn_id,
        "startedAt": claude_host_protocol::time::now_rfc3339(),
        "message": {"text": text, "origin": {"kind": "user"}}}))
    .unwrap()
}
