//! The session's customizations: discovered from disk and the clients' plugins, shown in
//! `SessionState.customizations`, switched by clients, and carried out by starting the CLI
//! with the matching inputs — between turns, never during one.

use super::*;
use crate::customizations::{
    self as cz, CliInputs, ClientPlugin, Decisions, Discovered, Sources, Target, sync::ClientFiles,
};
use ahp_types::actions::{
    SessionCustomizationToggledAction, SessionCustomizationsChangedAction,
    SessionMcpServerStateChangedAction,
};
use ahp_types::state::{ClientPluginCustomization, CustomizationEnablement, McpServerState};

/// How long the MCP servers of a new CLI are watched while some still start.
const MCP_WATCH: Duration = Duration::from_secs(60);
/// How often their state is asked for meanwhile.
const MCP_POLL: Duration = Duration::from_millis(250);

/// Where a session's customizations come from and where its decisions are kept.
#[derive(Debug, Clone)]
pub(crate) struct CustomsSpec {
    pub sources: Sources,
    /// The session's own folder (`decisions.json`, `plugins/`); `None` keeps decisions in
    /// memory and cannot copy client plugins.
    pub dir: Option<PathBuf>,
    /// The host's global decisions file.
    pub global: Option<PathBuf>,
    /// The session's decisions as the shared store keeps them (they win over the file: the
    /// session may have moved here from another host).
    pub stored: Option<Decisions>,
    /// The global decisions as the shared store keeps them (they win over the host's file:
    /// every host of the store shares them).
    pub stored_global: Option<Decisions>,
}

/// The task's part of it.
pub(crate) struct Customs {
    spec: CustomsSpec,
    discovered: Discovered,
    session_decisions: Decisions,
    global: Decisions,
    /// Client plugins by (client id, plugin id).
    plugins: Vec<(String, ClientPlugin)>,
    /// How to reach each client's files.
    files: HashMap<String, Arc<dyn ClientFiles>>,
    /// What the live CLI was started with.
    cli_inputs: Option<CliInputs>,
    /// The agent the current turn asks for.
    pub(super) want_agent: Option<String>,
    /// The agent the session's CLI runs as (`None`: not known — a resumed session keeps the
    /// one its transcript last set).
    applied_agent: Option<Option<String>>,
    /// An `apply_flag_settings` for the agent is on its way.
    agent_applying: bool,
    /// What `active.txt` holds.
    saved_summary: Vec<String>,
}

impl Customs {
    pub(crate) fn new(spec: CustomsSpec) -> Customs {
        let session_decisions = spec.stored.clone().unwrap_or_else(|| {
            spec.dir
                .as_ref()
                .map(|d| Decisions::load(&d.join("decisions.json")))
                .unwrap_or_default()
        });
        let global = spec.stored_global.clone().unwrap_or_else(|| {
            spec.global
                .as_ref()
                .map(|g| Decisions::load(g))
                .unwrap_or_default()
        });
        Customs {
            spec,
            discovered: Discovered::default(),
            session_decisions,
            global,
            plugins: Vec::new(),
            files: HashMap::new(),
            cli_inputs: None,
            want_agent: None,
            applied_agent: None,
            agent_applying: false,
            saved_summary: Vec::new(),
        }
    }
}

impl Task {
    fn tree(&self) -> &[ahp_types::state::Customization] {
        self.session.customizations.as_deref().unwrap_or(&[])
    }

    /// Reads what applies anew and publishes the tree when it changed.
    pub(super) fn refresh_customizations(&mut self) {
        let c = &mut self.customs;
        let plugins: Vec<ClientPlugin> = c.plugins.iter().map(|(_, p)| p.clone()).collect();
        let discovered = cz::discover(&c.spec.sources, &plugins);
        let mut tree = discovered.tree.clone();
        cz::restore(
            &mut tree,
            &[&c.session_decisions, &c.global],
            self.session.customizations.as_deref().unwrap_or(&[]),
        );
        self.customs.discovered = discovered;
        if self.session.customizations.as_ref() != Some(&tree) {
            self.session(StateAction::SessionCustomizationsChanged(
                SessionCustomizationsChangedAction {
                    customizations: tree,
                },
            ));
        }
    }

    /// What the CLI is to be started with now.
    pub(super) fn customization_inputs(&self) -> CliInputs {
        CliInputs::of(
            &self.customs.discovered,
            self.tree(),
            &self.customs.session_decisions.stopped,
        )
    }

    /// Puts the customization inputs on the options of a CLI about to start.
    pub(super) fn apply_customizations(&mut self, opts: &mut SessionOptions) {
        self.refresh_customizations();
        let inputs = self.customization_inputs();
        opts.settings = inputs.settings.clone();
        opts.disallowed_tools
            .extend(inputs.disallowed_tools.iter().cloned());
        opts.plugin_dirs = inputs.plugin_dirs.clone();
        self.customs.cli_inputs = Some(inputs);
        if opts.resume.is_none() {
            // A new Claude session runs as no agent until one is set.
            self.customs.applied_agent = Some(None);
        }
    }

    /// Whether the live CLI was started with other customizations than the state now asks.
    pub(super) fn customizations_changed(&self) -> bool {
        self.customs
            .cli_inputs
            .as_ref()
            .is_some_and(|inputs| *inputs != self.customization_inputs())
    }

    /// Before a prompt: makes the CLI run as the agent the turn picked (`apply_flag_settings`,
    /// which also records it in the transcript). `true` while that is on its way.
    ///
    /// Claude Code fixes a session's system prompt at its first turn: an agent picked then
    /// brings its prompt and tools; one picked later brings its tools and model only.
    pub(super) fn agent_pending(&mut self, cli: &Arc<ClaudeSession>) -> bool {
        if self.customs.agent_applying {
            return true;
        }
        let want = self.customs.want_agent.clone();
        if self.customs.applied_agent.as_ref() == Some(&want) {
            return false;
        }
        self.customs.agent_applying = true;
        let (cli, tx, generation) = (cli.clone(), self.internal_tx.clone(), self.generation);
        tokio::spawn(async move {
            let result = cli
                .request("apply_flag_settings", json!({"settings": {"agent": want}}))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
            let _ = tx.send(Internal::AgentApplied {
                generation,
                agent: want,
                result,
            });
        });
        true
    }

    pub(super) async fn on_agent_applied(
        &mut self,
        generation: u64,
        agent: Option<String>,
        result: Result<(), String>,
    ) {
        self.customs.agent_applying = false;
        if generation != self.generation {
            // Another CLI took over; it is asked again before its prompt.
            self.pump().await;
            return;
        }
        if let Err(e) = &result {
            // The turn runs as Claude Code's default rather than not at all.
            tracing::warn!(session = %self.id, agent = ?agent, error = %e, "the CLI did not take the agent");
        }
        self.customs.applied_agent = Some(agent);
        self.pump().await;
    }

    /// Carries out changed customizations now if nothing runs: a new CLI resumes the session.
    pub(super) async fn apply_between_turns(&mut self) {
        if self.cli_idle() && self.customizations_changed() {
            tracing::info!(session = %self.id, "restarting the CLI for changed customizations");
            self.stop_cli().await;
            self.start_cli(true);
        }
    }

    /// After a CLI started: watches its MCP servers until none is still starting.
    pub(super) fn watch_mcp(&self, cli: Arc<ClaudeSession>) {
        tokio::spawn(watch_mcp(cli, self.internal_tx.clone(), self.generation));
    }

    pub(super) fn on_mcp_status(&mut self, generation: u64, servers: Vec<Value>) {
        if generation != self.generation {
            return;
        }
        let mut tree = self.tree().to_vec();
        let before = tree.len();
        let cwd = self.customs.spec.sources.cwd.clone();
        let changed = cz::apply_mcp_status(
            &mut tree,
            &mut self.customs.discovered.targets,
            &servers,
            &cwd,
        );
        if changed.is_empty() {
            return;
        }
        if tree.len() != before {
            self.session(StateAction::SessionCustomizationsChanged(
                SessionCustomizationsChangedAction {
                    customizations: tree,
                },
            ));
            return;
        }
        for (id, state) in changed {
            if let McpServerState::Error(e) = &state {
                tracing::info!(session = %self.id, server = %id, error = %e.error.message, "an MCP server failed");
            }
            self.session(StateAction::SessionMcpServerStateChanged(Box::new(
                SessionMcpServerStateChangedAction {
                    id,
                    state,
                    channel: None,
                },
            )));
        }
    }

    /// `session/customizationToggled`.
    pub(super) async fn on_toggle(
        &mut self,
        t: SessionCustomizationToggledAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        match self.customs.discovered.targets.get(&t.id) {
            None => return Err(format!("no customization {} in this session", t.id)),
            Some(Target::Hook) => {
                return Err(
                    "Claude Code runs all hooks of its settings or none; one hook cannot be turned off here"
                        .into(),
                );
            }
            Some(_) => {}
        }
        // Each scope's decision is kept where it applies: the global one for every session.
        let (global, here): (Vec<CustomizationEnablement>, Vec<CustomizationEnablement>) = t
            .enablement
            .iter()
            .cloned()
            .partition(|e| matches!(e, CustomizationEnablement::Global { .. }));
        if here.is_empty() {
            self.customs.session_decisions.by_id.remove(&t.id);
        } else {
            self.customs
                .session_decisions
                .by_id
                .insert(t.id.clone(), here);
        }
        if global.is_empty() {
            self.customs.global.by_id.remove(&t.id);
        } else {
            self.customs.global.by_id.insert(t.id.clone(), global);
        }
        self.save_decisions();
        self.publish(
            ChannelKind::Session,
            StateAction::SessionCustomizationToggled(t),
            Some(origin.clone()),
        );
        self.apply_between_turns().await;
        Ok(())
    }

    /// `session/mcpServerStartRequested` / `session/mcpServerStopRequested`.
    pub(super) async fn on_mcp_request(
        &mut self,
        id: &str,
        start: bool,
        action: StateAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        let Some(Target::Mcp(name)) = self.customs.discovered.targets.get(id).cloned() else {
            return Err(format!("{id} is not an MCP server of this session"));
        };
        let was_stopped = self.customs.session_decisions.stopped.contains(&name);
        if start {
            self.customs.session_decisions.stopped.remove(&name);
        } else {
            self.customs.session_decisions.stopped.insert(name.clone());
        }
        self.save_decisions();
        self.publish(ChannelKind::Session, action, Some(origin.clone()));
        if start
            && !was_stopped
            && let Cli::Live(cli) = &self.cli
        {
            // A server that failed: the live CLI tries it again, watched like a start.
            let cli = cli.clone();
            let tx = self.internal_tx.clone();
            let generation = self.generation;
            tokio::spawn(async move {
                if let Err(e) = cli
                    .request("mcp_reconnect", json!({ "serverName": name }))
                    .await
                {
                    tracing::info!(server = %name, error = %e, "the MCP server did not reconnect");
                }
                watch_mcp(cli, tx, generation).await;
            });
        }
        self.apply_between_turns().await;
        Ok(())
    }

    /// The session's decisions as the shared store keeps them.
    pub(super) fn decisions_json(&self) -> Option<String> {
        serde_json::to_string(&self.customs.session_decisions).ok()
    }

    fn save_decisions(&mut self) {
        // With a shared store they travel with the session's record (written under its lease).
        if self.durable.is_some() {
            self.save();
        }
        if let Some(dir) = &self.customs.spec.dir
            && let Err(e) = self
                .customs
                .session_decisions
                .save(&dir.join("decisions.json"))
        {
            tracing::warn!(session = %self.id, error = %e, "customization decisions not saved");
        }
        if let Some(g) = &self.customs.spec.global
            && let Err(e) = self.customs.global.save(g)
        {
            tracing::warn!(error = %e, "global customization decisions not saved");
        }
        // Every host of a shared store uses the same global decisions.
        if let Some(d) = &self.durable {
            match serde_json::to_string(&self.customs.global) {
                Ok(json) => {
                    let shared = d.db.shared.clone();
                    tokio::spawn(async move {
                        if let Err(e) = shared
                            .put_value(crate::customizations::GLOBAL_DECISIONS_KEY, &json)
                            .await
                        {
                            tracing::warn!(error = %e, "global customization decisions not saved in the shared store");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "global customization decisions not serialisable")
                }
            }
        }
    }

    /// How to reach a client's files (for its plugins).
    pub(super) fn set_client_files(&mut self, client_id: String, files: Arc<dyn ClientFiles>) {
        self.customs.files.insert(client_id, files);
    }

    /// The active clients' published plugins: new or changed ones are copied, in jobs.
    pub(super) async fn client_plugins_changed(&mut self) {
        let published: Vec<(String, ClientPluginCustomization)> = self
            .session
            .active_clients
            .iter()
            .flat_map(|c| {
                c.customizations
                    .iter()
                    .flatten()
                    .map(move |p| (c.client_id.clone(), p.clone()))
            })
            .collect();
        // A plugin its client no longer publishes leaves (clients that left keep theirs: a
        // reconnecting window publishes them again).
        let active: std::collections::HashSet<&str> = self
            .session
            .active_clients
            .iter()
            .map(|c| c.client_id.as_str())
            .collect();
        let before = self.customs.plugins.len();
        self.customs.plugins.retain(|(client, p)| {
            !active.contains(client.as_str())
                || published
                    .iter()
                    .any(|(c, q)| c == client && q.id == p.published.id)
        });
        let mut changed = self.customs.plugins.len() != before;
        for (client, p) in published {
            let known = self
                .customs
                .plugins
                .iter()
                .position(|(c, k)| *c == client && k.published.id == p.id);
            if let Some(i) = known
                && self.customs.plugins[i].1.published.nonce == p.nonce
                && self.customs.plugins[i].1.copied.is_some()
            {
                continue;
            }
            changed = true;
            let mut published = p.clone();
            published.client_id = Some(client.clone());
            let copied = self.start_copy(&client, &p);
            let entry = ClientPlugin { published, copied };
            match known {
                Some(i) => self.customs.plugins[i] = (client, entry),
                None => self.customs.plugins.push((client, entry)),
            }
        }
        if changed {
            self.refresh_customizations();
            self.apply_between_turns().await;
        }
    }

    /// Starts copying a plugin; `Some` when it cannot be copied at all.
    fn start_copy(
        &self,
        client: &str,
        p: &ClientPluginCustomization,
    ) -> Option<Result<PathBuf, String>> {
        let Some(dir) = &self.customs.spec.dir else {
            return Some(Err("this host keeps no copies of client plugins".into()));
        };
        let Some(files) = self.customs.files.get(client).cloned() else {
            return Some(Err(
                "the client that published it cannot serve its files".into()
            ));
        };
        let dest = dir.join("plugins").join(plugin_folder(&p.id));
        let tx = self.internal_tx.clone();
        let channel = self.uris.session.clone();
        let (client, id, nonce, uri) = (
            client.to_owned(),
            p.id.clone(),
            p.nonce.clone(),
            p.uri.clone(),
        );
        tokio::spawn(async move {
            let result = cz::sync::copy_plugin(
                &*files,
                &channel,
                &uri,
                &dest,
                cz::sync::CopyLimits::default(),
            )
            .await;
            let _ = tx.send(Internal::PluginCopied {
                client,
                id,
                nonce,
                result,
            });
        });
        None
    }

    pub(super) async fn on_plugin_copied(
        &mut self,
        client: String,
        id: String,
        nonce: Option<String>,
        result: Result<PathBuf, String>,
    ) {
        let Some((_, entry)) = self
            .customs
            .plugins
            .iter_mut()
            .find(|(c, p)| *c == client && p.published.id == id && p.published.nonce == nonce)
        else {
            return;
        };
        if let Err(e) = &result {
            tracing::warn!(session = %self.id, plugin = %id, error = %e, "a client plugin could not be copied");
        }
        entry.copied = Some(result);
        self.refresh_customizations();
        self.apply_between_turns().await;
    }

    /// Marks the commands that are skills with their files.
    pub(super) fn with_skill_files(&self, mut commands: Vec<SlashCommand>) -> Vec<SlashCommand> {
        let skills = cz::skill_files(self.tree(), &self.customs.discovered.targets);
        for c in &mut commands {
            c.skill = skills.get(&c.name).cloned();
        }
        commands
    }

    /// The name Claude Code knows the agent at `uri` by.
    pub(super) fn agent_for(&self, uri: &str) -> Option<String> {
        cz::agent_named_by(self.tree(), &self.customs.discovered.targets, uri)
    }

    /// One line per customization, for `sessions show`, kept beside the decisions (written
    /// when it changed).
    pub(super) fn save_active_summary(&mut self) {
        let Some(dir) = &self.customs.spec.dir else {
            return;
        };
        let lines = cz::summary(self.tree());
        if lines == self.customs.saved_summary {
            return;
        }
        self.customs.saved_summary = lines.clone();
        if let Err(e) = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(dir.join("active.txt"), lines.join("\n") + "\n"))
        {
            tracing::debug!(session = %self.id, error = %e, "active customizations not recorded");
        }
    }
}

/// Asks the CLI for its MCP servers' states, again every [`MCP_POLL`] while one is still
/// starting (for at most [`MCP_WATCH`]), and reports each answer to the task.
async fn watch_mcp(cli: Arc<ClaudeSession>, tx: mpsc::UnboundedSender<Internal>, generation: u64) {
    let until = Instant::now() + MCP_WATCH;
    loop {
        let Ok(answer) = cli.request("mcp_status", json!({})).await else {
            return;
        };
        let servers: Vec<Value> = answer
            .get("mcpServers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let starting = servers
            .iter()
            .any(|s| s.get("status").and_then(Value::as_str) == Some("pending"));
        let sent = tx.send(Internal::McpStatus {
            generation,
            servers,
        });
        if sent.is_err() || !starting || Instant::now() >= until {
            return;
        }
        tokio::time::sleep(MCP_POLL).await;
    }
}

/// A plugin id as a folder name (ids are the client's and may hold anything).
fn plugin_folder(id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}
