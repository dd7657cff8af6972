//! The `Agent`: authentication, models, session creation, listing and shutdown.

use claude_host_agent::{Agent, AgentConfig, AgentError, GITHUB_RESOURCE, NewSession, ProxyModels};
use claude_host_store::{SqliteStore, Store};
use claude_host_testkit::fake::{FakeConfig, FakeUpstream, Match, Reply, Rule};
use claude_host_upstream::Upstream;
use claude_host_upstream::copilot::{
    ClientIdentity, CopilotEndpoints, CopilotOptions, CopilotUpstream,
};
use claude_host_upstream::http_client;
use serde_json::json;
use std::sync::Arc;

const GOOD: &str = "gho_fake_github_token";
const SECOND: &str = "gho_second_account";

struct Host {
    fake: FakeUpstream,
    agent: Agent,
    store: Arc<SqliteStore>,
    dir: tempfile::TempDir,
}

async fn host() -> Host {
    let fake = FakeUpstream::start_with(FakeConfig {
        other_github_tokens: vec![SECOND.into()],
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let url = fake.url();
    let factory = move |token: &str| -> Arc<dyn Upstream> {
        Arc::new(CopilotUpstream::new(
            http_client().unwrap(),
            token.to_owned(),
            CopilotEndpoints::single_host(&url),
            ClientIdentity::default(),
            CopilotOptions::default(),
        ))
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("host.sqlite"))
            .await
            .unwrap(),
    );
    let proxy = claude_host_proxy::start(
        Default::default(),
        Arc::new(claude_host_upstream::signed_out::SignedOut),
    )
    .await
    .unwrap();
    let mut config = AgentConfig::new(
        claude_host_testkit::cli::pinned_cli().unwrap(),
        dir.path().join("work"),
    );
    config.config_dir = Some(dir.path().join(".claude"));
    config
        .extra_env
        .push(("HOME".into(), dir.path().display().to_string()));
    let agent = Agent::new(
        config,
        Arc::new(ProxyModels::signed_out(proxy, Arc::new(factory))),
        Some(store.clone()),
    );
    Host {
        fake,
        agent,
        store,
        dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_runs_before_authentication_and_a_bad_token_changes_nothing() {
    let h = host().await;
    let info = h.agent.info().await;
    assert_eq!(info.provider, "claude");
    assert!(info.models.is_empty(), "no models before sign-in");
    let resources = serde_json::to_value(&info.protected_resources).unwrap();
    assert_eq!(resources[0]["resource"], GITHUB_RESOURCE);
    assert_eq!(resources[0]["required"], true);
    assert!(matches!(
        h.agent.create_session(NewSession::default()).await,
        Err(AgentError::AuthRequired { .. })
    ));
    assert!(matches!(
        h.agent.models().await,
        Err(AgentError::AuthRequired { .. })
    ));
    assert!(
        !h.agent
            .authenticate("https://example.com", GOOD)
            .await
            .unwrap(),
        "not a resource of this agent"
    );
    let refused = h.agent.authenticate(GITHUB_RESOURCE, "gho_wrong").await;
    assert!(
        matches!(refused, Err(AgentError::AuthFailed(_))),
        "{refused:?}"
    );
    assert!(!h.agent.is_authenticated());

    assert!(h.agent.authenticate(GITHUB_RESOURCE, GOOD).await.unwrap());
    let models = h.agent.models().await.unwrap();
    assert!(!models.is_empty());
    let first = serde_json::to_value(&models[0]).unwrap();
    assert_eq!(
        first["_meta"]["isDefault"], true,
        "the default first: {first}"
    );
    // Claude models first, then the plan's other chat models, each naming its API.
    let claude_count = models
        .iter()
        .take_while(|m| m.id.starts_with("claude-"))
        .count();
    assert!(claude_count > 0 && claude_count < models.len());
    let gpt = serde_json::to_value(models.iter().find(|m| m.id == "gpt-5.4").unwrap()).unwrap();
    assert_eq!(gpt["_meta"]["endpoint"], "/responses", "{gpt}");
    assert_eq!(gpt["_meta"]["group"], "OpenAI", "{gpt}");
    let with_effort = models
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .find(|m| !m["configSchema"].is_null())
        .expect("a model with effort levels");
    // VS Code's effort chip: the `thinkingLevel` option, with labels.
    let level = &with_effort["configSchema"]["properties"]["thinkingLevel"];
    assert_eq!(level["enum"], json!(["low", "medium", "high"]));
    assert_eq!(level["enumLabels"], json!(["Low", "Medium", "High"]));
    assert_eq!(level["default"], "medium");
    // What the picker and the context gauge read.
    assert!(
        with_effort["maxPromptTokens"].as_i64().unwrap() > 0,
        "{with_effort}"
    );
    assert!(with_effort["maxOutputTokens"].as_i64().unwrap() > 0);
    assert!(with_effort["supportsVision"].is_boolean());
    // A wrong token later leaves the working one in place.
    let mints = h.fake.mint_count();
    assert!(
        h.agent
            .authenticate(GITHUB_RESOURCE, "gho_wrong")
            .await
            .is_err()
    );
    assert!(h.agent.authenticate(GITHUB_RESOURCE, GOOD).await.unwrap());
    assert_eq!(
        h.fake.mint_count(),
        mints + 1,
        "the same token again is a no-op"
    );
    assert!(matches!(
        h.agent
            .create_session(NewSession {
                model: Some("gpt-9-unheard-of".into()),
                ..Default::default()
            })
            .await,
        Err(AgentError::UnknownModel { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_provisional_listed_with_cli_sessions_and_survive_a_token_change() {
    let h = host().await;
    h.agent.authenticate(GITHUB_RESOURCE, GOOD).await.unwrap();
    h.fake.push(Rule {
        when: Match::LastUserContains("hello host".into()),
        reply: Reply::text("Hi from the host."),
        times: None,
    });
    let s = h.agent.create_session(NewSession::default()).await.unwrap();
    let id = s.id().to_owned();
    assert!(s.resource().ends_with(&id));
    assert!(!s.is_materialized());
    assert!(
        h.store.list(true).await.unwrap().is_empty(),
        "nothing written yet"
    );
    assert!(
        h.agent.list_sessions().await.is_empty(),
        "a provisional session is not listed"
    );
    s.send("hello host").await.unwrap();
    assert_eq!(
        s.session_id().as_deref(),
        Some(id.as_str()),
        "the URI names the Claude session"
    );

    // A second account signs in: same proxy, the session goes on.
    assert!(h.agent.authenticate(GITHUB_RESOURCE, SECOND).await.unwrap());
    s.send("still there?").await.unwrap();
    assert_eq!(
        serde_json::to_value(s.state().await).unwrap()["turns"][1]["state"],
        "complete"
    );

    // The user's own `claude -p` in the same config directory, through the host's proxy.
    let endpoint = h.agent.models_access().endpoint("terminal").unwrap();
    let (base_url, token) = (endpoint.base_url, endpoint.token);
    let cli_id = claude_host_testkit::cli::plain_claude_p(
        "from the terminal",
        &[],
        h.dir.path(),
        &h.dir.path().join(".claude"),
        &h.dir.path().join("work"),
        &base_url,
        &token,
    )
    .unwrap();

    let list = h.agent.list_sessions().await;
    let ours = list.iter().find(|l| l.id == id).expect("the host session");
    assert!(ours.from_host);
    assert_eq!(ours.title, "hello host");
    let theirs = list
        .iter()
        .find(|l| l.id == cli_id)
        .expect("the CLI session");
    assert!(!theirs.from_host);
    assert_eq!(theirs.title, "from the terminal");

    let restored = h.agent.open_session(&cli_id).await.unwrap();
    let turns = serde_json::to_value(restored.state().await).unwrap()["turns"].clone();
    assert_eq!(turns[0]["message"]["text"], "from the terminal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_every_session_once() {
    let h = host().await;
    h.agent.authenticate(GITHUB_RESOURCE, GOOD).await.unwrap();
    let a = h
        .agent
        .create_session(NewSession {
            warm: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(a.is_materialized(), "warm starts the CLI at create");
    let b = h.agent.create_session(NewSession::default()).await.unwrap();
    b.send("hi").await.unwrap();
    let groups = [a.cli_pgid().await.unwrap(), b.cli_pgid().await.unwrap()];
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        tokio::join!(h.agent.shutdown(), h.agent.shutdown());
    })
    .await
    .unwrap();
    for g in groups {
        assert!(super::group_gone(g).await, "group {g} still alive");
    }
    h.agent.shutdown().await;
    assert!(matches!(
        h.agent.create_session(NewSession::default()).await,
        Err(AgentError::ShutDown)
    ));
}
