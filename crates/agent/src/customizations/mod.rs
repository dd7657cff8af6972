//! What customizes a session's Claude Code: `CLAUDE.md` rules, agents, skills, commands,
//! hooks and MCP servers in the user's and the project's `.claude`, and plugins (a client's
//! own, copied to the host). [`discover`] reads them into AHP customization containers; the
//! session reduces toggles into that tree with the official reducer, and [`CliInputs::of`]
//! turns what is switched off into what the CLI is started with (`--settings` keys that only
//! hide things, `--disallowedTools`, `--plugin-dir`) — the user's own files are never written.

pub mod scan;
pub mod sync;

use ahp_types::state::{
    AgentCustomization, ChildCustomization, ClientPluginCustomization, Customization,
    CustomizationEnablement, CustomizationErrorState, CustomizationLoadState,
    CustomizationLoadedState, CustomizationLoadingState, CustomizationType, DirectoryCustomization,
    ErrorInfo, HookCustomization, McpServerCustomization, McpServerErrorState, McpServerReadyState,
    McpServerStartingState, McpServerState, McpServerStoppedState, PluginCustomization,
    PromptCustomization, RuleCustomization, SkillCustomization,
};
use claude_host_protocol::uri::file_uri;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Where a session's customizations come from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The user's Claude folder (`$CLAUDE_CONFIG_DIR`, else `~/.claude`).
    pub user_dir: PathBuf,
    /// The user's `.claude.json` (user- and local-scope MCP servers).
    pub claude_json: PathBuf,
    /// The session's working directory.
    pub cwd: PathBuf,
}

impl Sources {
    /// The sources for a CLI started with `config_dir` (`CLAUDE_CONFIG_DIR`) and `home`.
    pub fn new(config_dir: Option<&Path>, home: &Path, cwd: &Path) -> Sources {
        let (user_dir, claude_json) = match config_dir {
            Some(d) => (d.to_path_buf(), d.join(".claude.json")),
            None => (home.join(".claude"), home.join(".claude.json")),
        };
        Sources {
            user_dir,
            claude_json,
            cwd: cwd.to_path_buf(),
        }
    }
}

/// What a customization id stands for in Claude Code, so switching it off can be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A skill or a command (both are skills to Claude Code): `skillOverrides: off`.
    Skill(String),
    /// A subagent type: `--disallowedTools Agent(name)`.
    Agent(String),
    /// A `CLAUDE.md` file: `claudeMdExcludes`.
    Rule(PathBuf),
    /// An MCP server: `deniedMcpServers`.
    Mcp(String),
    /// A client's plugin: its `--plugin-dir` is left out.
    ClientPlugin(String),
    /// A plugin installed from a marketplace (`name@marketplace`), and whether the user's
    /// settings enable it: `enabledPlugins` in the flag settings says otherwise.
    Installed {
        /// `name@marketplace`.
        key: String,
        /// Whether `enabledPlugins` of the settings files turns it on.
        in_settings: bool,
    },
    /// Hooks: Claude Code runs all of a settings file's hooks or none.
    Hook,
    /// A container: its children are what it switches.
    Container,
}

/// A client plugin copied to the host (or not).
#[derive(Debug, Clone)]
pub struct ClientPlugin {
    /// What the client published.
    pub published: ClientPluginCustomization,
    /// The host folder it was copied to; `None` while it is being copied.
    pub copied: Option<Result<PathBuf, String>>,
}

/// The discovered tree and what each id stands for.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    /// Containers (and bare MCP servers), in display order.
    pub tree: Vec<Customization>,
    /// Every id's target.
    pub targets: HashMap<String, Target>,
    /// The folders of client plugins that loaded, by plugin id.
    pub plugin_dirs: Vec<(String, PathBuf)>,
}

/// Reads everything that applies to a session. Blocking (small files).
pub fn discover(sources: &Sources, plugins: &[ClientPlugin]) -> Discovered {
    let mut d = Discovered::default();
    d.scope(sources, true);
    for p in plugins {
        d.client_plugin(p);
    }
    d
}

/// What applies to every session of this user: the user's own folder and MCP servers (the
/// agent's `customizations`). Blocking (small files).
pub fn discover_user(sources: &Sources) -> Vec<Customization> {
    let mut d = Discovered::default();
    d.scope(sources, false);
    d.tree
}

fn loaded() -> Option<CustomizationLoadState> {
    Some(CustomizationLoadState::Loaded(CustomizationLoadedState {}))
}

fn load_error(message: String) -> Option<CustomizationLoadState> {
    Some(CustomizationLoadState::Error(CustomizationErrorState {
        message,
    }))
}

fn directory(
    id: String,
    uri: String,
    name: String,
    contents: CustomizationType,
    children: Vec<ChildCustomization>,
    load: Option<CustomizationLoadState>,
    writable: bool,
) -> Customization {
    Customization::Directory(DirectoryCustomization {
        id,
        uri,
        name,
        icons: None,
        range: None,
        meta: None,
        client_id: None,
        load,
        children: Some(children),
        enabled: true,
        contents,
        writable,
    })
}

/// A child of kind `kind` for a markdown file.
fn child(kind: &CustomizationType, id: String, f: &scan::Found) -> ChildCustomization {
    let uri = file_uri(&f.path);
    let description = f
        .error
        .clone()
        .or_else(|| f.meta.get("description").map(str::to_owned));
    let no_user = f.meta.flag("user-invocable").map(|b| !b);
    let no_model = f.meta.flag("disable-model-invocation");
    match kind {
        CustomizationType::Agent => ChildCustomization::Agent(AgentCustomization {
            id,
            uri,
            name: f.name.clone(),
            icons: None,
            range: None,
            meta: None,
            enabled: None,
            description,
            model: f.meta.get("model").map(str::to_owned),
            tools: f.meta.list("tools"),
            disable_model_invocation: no_model,
            disable_user_invocation: no_user,
        }),
        CustomizationType::Skill => ChildCustomization::Skill(SkillCustomization {
            id,
            uri,
            name: f.name.clone(),
            icons: None,
            range: None,
            meta: None,
            enabled: None,
            description,
            disable_model_invocation: no_model,
            disable_user_invocation: no_user,
        }),
        _ => ChildCustomization::Prompt(PromptCustomization {
            id,
            uri,
            name: f.name.clone(),
            icons: None,
            range: None,
            meta: None,
            enabled: None,
            description,
        }),
    }
}

fn kind_word(kind: &CustomizationType) -> &'static str {
    match kind {
        CustomizationType::Agent => "agent",
        CustomizationType::Skill => "skill",
        _ => "command",
    }
}

impl Discovered {
    /// The user's folder, and with `project` the project's too.
    fn scope(&mut self, sources: &Sources, project: bool) {
        let project_dir = sources.cwd.join(".claude");
        let mut scopes = vec![("user", sources.user_dir.clone(), "User")];
        if project {
            scopes.push(("project", project_dir.clone(), "Project"));
        }
        for (scope, dir, label) in &scopes {
            let always = *scope == "project";
            for kind in [
                CustomizationType::Agent,
                CustomizationType::Skill,
                CustomizationType::Prompt,
            ] {
                let sub = match kind {
                    CustomizationType::Agent => "agents",
                    CustomizationType::Skill => "skills",
                    _ => "commands",
                };
                self.folder(scope, &dir.join(sub), label, kind, always);
            }
        }
        self.rules(sources, project);
        self.hooks("user", &[sources.user_dir.join("settings.json")], "User");
        if project {
            self.hooks(
                "project",
                &[
                    project_dir.join("settings.json"),
                    project_dir.join("settings.local.json"),
                ],
                "Project",
            );
        }
        self.mcp(sources, project);
        self.installed_plugins(sources, project);
    }

    fn folder(
        &mut self,
        scope: &str,
        dir: &Path,
        label: &str,
        kind: CustomizationType,
        always: bool,
    ) {
        if !always && !dir.is_dir() {
            return;
        }
        let found = match kind {
            CustomizationType::Agent => scan::agents(dir),
            CustomizationType::Skill => scan::skills(dir),
            _ => scan::commands(dir),
        };
        let word = kind_word(&kind);
        let mut children = Vec::new();
        for f in &found {
            let id = format!("{scope}:{word}:{}", f.name);
            self.targets.insert(
                id.clone(),
                if kind == CustomizationType::Agent {
                    Target::Agent(f.name.clone())
                } else {
                    Target::Skill(f.name.clone())
                },
            );
            children.push(child(&kind, id, f));
        }
        let id = format!("{scope}:{word}s");
        self.targets.insert(id.clone(), Target::Container);
        let errors: Vec<&str> = found.iter().filter_map(|f| f.error.as_deref()).collect();
        let load = if errors.is_empty() {
            loaded()
        } else {
            Some(CustomizationLoadState::Degraded(
                ahp_types::state::CustomizationDegradedState {
                    message: errors.join("; "),
                },
            ))
        };
        self.tree.push(directory(
            id,
            file_uri(dir),
            format!("{label} {word}s"),
            kind,
            children,
            load,
            scope == "project",
        ));
    }

    fn rules(&mut self, sources: &Sources, project: bool) {
        let mut children = Vec::new();
        for (path, user) in scan::memory_files(&sources.user_dir, &sources.cwd) {
            if !user && !project {
                continue;
            }
            let id = format!("rule:{}", path.display());
            self.targets.insert(id.clone(), Target::Rule(path.clone()));
            let name = if user {
                "~/.claude/CLAUDE.md".to_owned()
            } else {
                path.strip_prefix(&sources.cwd)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| path.display().to_string())
            };
            children.push(ChildCustomization::Rule(RuleCustomization {
                id,
                uri: file_uri(&path),
                name,
                icons: None,
                range: None,
                meta: None,
                enabled: None,
                description: Some("Instructions Claude Code reads at the start".to_owned()),
                always_apply: Some(true),
                globs: None,
            }));
        }
        self.targets.insert("rules".into(), Target::Container);
        self.tree.push(directory(
            "rules".into(),
            file_uri(&sources.cwd),
            "CLAUDE.md".into(),
            CustomizationType::Rule,
            children,
            loaded(),
            false,
        ));
    }

    fn hooks(&mut self, scope: &str, files: &[PathBuf], label: &str) {
        let mut children = Vec::new();
        let mut errors = Vec::new();
        for file in files {
            match scan::json_file(file) {
                Ok(Some(v)) => {
                    for h in scan::hooks(&v) {
                        let shown = if h.matcher.is_empty() {
                            h.event.clone()
                        } else {
                            format!("{} ({})", h.event, h.matcher)
                        };
                        let id = format!("hook:{}#{}/{}", file.display(), h.event, h.matcher);
                        self.targets.insert(id.clone(), Target::Hook);
                        children.push(ChildCustomization::Hook(HookCustomization {
                            id,
                            uri: file_uri(file),
                            name: format!("{shown}: {}", h.commands.join("; ")),
                            icons: None,
                            range: None,
                            meta: None,
                            enabled: None,
                        }));
                    }
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if children.is_empty() && errors.is_empty() {
            return;
        }
        let id = format!("{scope}:hooks");
        self.targets.insert(id.clone(), Target::Hook);
        let dir = files
            .first()
            .and_then(|f| f.parent())
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let load = if errors.is_empty() {
            loaded()
        } else {
            load_error(errors.join("; "))
        };
        self.tree.push(directory(
            id,
            file_uri(&dir),
            format!("{label} hooks"),
            CustomizationType::Hook,
            children,
            load,
            false,
        ));
    }

    /// MCP servers, a container per file that declares them: the project's `.mcp.json`, the
    /// user's `.claude.json` (its own and this folder's entry). A file that cannot be read
    /// is a container in error.
    fn mcp(&mut self, sources: &Sources, project: bool) {
        if project {
            let mcp_json = sources.cwd.join(".mcp.json");
            let read = scan::json_file(&mcp_json).map(|v| v.map(|v| scan::mcp_servers(&v)));
            self.mcp_container("project:mcp", "Project MCP servers", &mcp_json, read);
        }
        let read = scan::json_file(&sources.claude_json).map(|v| {
            v.map(|v| {
                let mut servers = scan::mcp_servers(&v);
                let cwd = sources.cwd.display().to_string();
                if project && let Some(p) = v.get("projects").and_then(|p| p.get(&cwd)) {
                    servers.extend(scan::mcp_servers(p));
                }
                servers
            })
        });
        self.mcp_container("user:mcp", "User MCP servers", &sources.claude_json, read);
    }

    fn mcp_container(
        &mut self,
        id: &str,
        label: &str,
        file: &Path,
        read: Result<Option<Vec<(String, String)>>, String>,
    ) {
        let (servers, load) = match read {
            Ok(None) => return,
            Ok(Some(s)) if s.is_empty() => return,
            Ok(Some(s)) => (s, loaded()),
            Err(e) => {
                tracing::info!(error = %e, "MCP servers not read");
                (Vec::new(), load_error(e))
            }
        };
        let mut children = Vec::new();
        for (name, _) in servers {
            let cid = mcp_id(&name);
            if self.targets.contains_key(&cid) {
                continue;
            }
            self.targets.insert(cid.clone(), Target::Mcp(name.clone()));
            children.push(ChildCustomization::McpServer(Box::new(mcp_entry(
                cid,
                file_uri(file),
                &name,
                McpServerState::Stopped(McpServerStoppedState {}),
            ))));
        }
        self.targets.insert(id.to_owned(), Target::Container);
        self.tree.push(directory(
            id.to_owned(),
            file_uri(file),
            label.to_owned(),
            CustomizationType::McpServer,
            children,
            load,
            false,
        ));
    }

    /// Plugins installed from marketplaces (`plugins/installed_plugins.json`), enabled or not
    /// by `enabledPlugins` in the settings files.
    fn installed_plugins(&mut self, sources: &Sources, project: bool) {
        let registry = sources
            .user_dir
            .join("plugins")
            .join("installed_plugins.json");
        let installed = match scan::json_file(&registry) {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::info!(error = %e, "installed plugins not read");
                return;
            }
        };
        let mut settings_files = vec![sources.user_dir.join("settings.json")];
        if project {
            let dir = sources.cwd.join(".claude");
            settings_files.push(dir.join("settings.json"));
            settings_files.push(dir.join("settings.local.json"));
        }
        let mut enabled: BTreeMap<String, bool> = BTreeMap::new();
        for f in settings_files {
            if let Ok(Some(v)) = scan::json_file(&f)
                && let Some(m) = v.get("enabledPlugins").and_then(Value::as_object)
            {
                for (k, on) in m {
                    enabled.insert(k.clone(), on.as_bool().unwrap_or(false));
                }
            }
        }
        let cwd = sources.cwd.display().to_string();
        for (key, entry) in installed
            .get("plugins")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            // Version 1 holds one install per plugin, version 2 a list by scope.
            let install = match entry {
                Value::Array(list) => list.iter().find(|i| {
                    i.get("projectPath")
                        .and_then(Value::as_str)
                        .is_none_or(|p| p == cwd)
                }),
                other => Some(other),
            };
            let Some(path) = install
                .and_then(|i| i.get("installPath"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            let dir = PathBuf::from(path);
            let in_settings = enabled.get(key).copied().unwrap_or(false);
            let id = format!("installed:{key}");
            self.targets.insert(
                id.clone(),
                Target::Installed {
                    key: key.clone(),
                    in_settings,
                },
            );
            let (load, children, version) = match scan::plugin_manifest(&dir) {
                Err(e) => (load_error(e), Some(Vec::new()), None),
                Ok((name, version)) => {
                    let children = self.plugin_children(&id, &name, &dir);
                    (loaded(), Some(children), version)
                }
            };
            self.tree.push(Customization::Plugin(PluginCustomization {
                id,
                uri: file_uri(&dir),
                name: key.clone(),
                icons: None,
                range: None,
                meta: None,
                client_id: None,
                load,
                children,
                // What the settings say, as a global decision a client may override.
                enablement: (!in_settings)
                    .then(|| vec![CustomizationEnablement::Global { enabled: false }]),
                version,
            }));
        }
    }

    fn client_plugin(&mut self, p: &ClientPlugin) {
        let pub_ = &p.published;
        self.targets
            .insert(pub_.id.clone(), Target::ClientPlugin(pub_.id.clone()));
        let (load, children, version) = match &p.copied {
            None => (
                Some(CustomizationLoadState::Loading(
                    CustomizationLoadingState {},
                )),
                None,
                pub_.version.clone(),
            ),
            Some(Err(e)) => (load_error(e.clone()), Some(Vec::new()), None),
            Some(Ok(dir)) => match scan::plugin_manifest(dir) {
                Err(e) => (load_error(e), Some(Vec::new()), None),
                Ok((name, version)) => {
                    self.plugin_dirs.push((pub_.id.clone(), dir.clone()));
                    let children = self.plugin_children(&pub_.id, &name, dir);
                    (loaded(), Some(children), version)
                }
            },
        };
        self.tree.push(Customization::Plugin(PluginCustomization {
            id: pub_.id.clone(),
            uri: pub_.uri.clone(),
            name: pub_.name.clone(),
            icons: pub_.icons.clone(),
            range: None,
            meta: None,
            client_id: pub_.client_id.clone(),
            load,
            children,
            enablement: pub_.enablement.clone(),
            version: version.or_else(|| pub_.version.clone()),
        }));
    }

    fn plugin_children(&mut self, id: &str, plugin: &str, dir: &Path) -> Vec<ChildCustomization> {
        let mut out = Vec::new();
        for (kind, found) in [
            (CustomizationType::Agent, scan::agents(&dir.join("agents"))),
            (CustomizationType::Skill, scan::skills(&dir.join("skills"))),
            (
                CustomizationType::Prompt,
                scan::commands(&dir.join("commands")),
            ),
        ] {
            for f in found {
                let cli_name = format!("{plugin}:{}", f.name);
                let cid = format!("{id}:{}:{}", kind_word(&kind), f.name);
                self.targets.insert(
                    cid.clone(),
                    if kind == CustomizationType::Agent {
                        Target::Agent(cli_name.clone())
                    } else {
                        Target::Skill(cli_name.clone())
                    },
                );
                let shown = scan::Found {
                    name: cli_name,
                    ..f
                };
                out.push(child(&kind, cid, &shown));
            }
        }
        if let Ok(Some(v)) = scan::json_file(&dir.join("hooks").join("hooks.json")) {
            for h in scan::hooks(&v) {
                let cid = format!("{id}:hook:{}/{}", h.event, h.matcher);
                self.targets.insert(cid.clone(), Target::Hook);
                out.push(ChildCustomization::Hook(HookCustomization {
                    id: cid,
                    uri: file_uri(&dir.join("hooks").join("hooks.json")),
                    name: format!("{} ({})", h.event, h.matcher),
                    icons: None,
                    range: None,
                    meta: None,
                    enabled: None,
                }));
            }
        }
        if let Ok(Some(v)) = scan::json_file(&dir.join(".mcp.json")) {
            for (name, _) in scan::mcp_servers(&v) {
                let cid = mcp_id(&name);
                self.targets.insert(cid.clone(), Target::Mcp(name.clone()));
                out.push(ChildCustomization::McpServer(Box::new(mcp_entry(
                    cid,
                    file_uri(&dir.join(".mcp.json")),
                    &name,
                    McpServerState::Stopped(McpServerStoppedState {}),
                ))));
            }
        }
        out
    }
}

fn mcp_entry(id: String, uri: String, name: &str, state: McpServerState) -> McpServerCustomization {
    McpServerCustomization {
        id,
        uri,
        name: name.to_owned(),
        icons: None,
        range: None,
        meta: None,
        enablement: None,
        state,
        channel: None,
        mcp_app: None,
    }
}

/// The id of the MCP server `name`.
pub fn mcp_id(name: &str) -> String {
    format!("mcp:{name}")
}

fn enablement_says(e: Option<&Vec<CustomizationEnablement>>) -> bool {
    match e.and_then(|v| v.first()) {
        Some(CustomizationEnablement::Global { enabled })
        | Some(CustomizationEnablement::Workspace { enabled, .. })
        | Some(CustomizationEnablement::Session { enabled }) => *enabled,
        Some(CustomizationEnablement::Unknown(_)) | None => true,
    }
}

fn child_parts(c: &ChildCustomization) -> Option<(&str, bool)> {
    Some(match c {
        ChildCustomization::Agent(x) => (x.id.as_str(), x.enabled.unwrap_or(true)),
        ChildCustomization::Skill(x) => (x.id.as_str(), x.enabled.unwrap_or(true)),
        ChildCustomization::Prompt(x) => (x.id.as_str(), x.enabled.unwrap_or(true)),
        ChildCustomization::Rule(x) => (x.id.as_str(), x.enabled.unwrap_or(true)),
        ChildCustomization::Hook(x) => (x.id.as_str(), x.enabled.unwrap_or(true)),
        ChildCustomization::McpServer(x) => (x.id.as_str(), enablement_says(x.enablement.as_ref())),
        ChildCustomization::Unknown(_) => return None,
    })
}

/// Every id in the tree with whether it is in effect (a child counts only while its container
/// is on).
pub fn effective(tree: &[Customization]) -> Vec<(String, bool)> {
    effective_in(tree)
        .into_iter()
        .map(|(id, on, _)| (id, on))
        .collect()
}

/// [`effective`], with each child's container.
fn effective_in(tree: &[Customization]) -> Vec<(String, bool, Option<String>)> {
    let mut out = Vec::new();
    for c in tree {
        let (id, on, children) = match c {
            Customization::Plugin(p) => (
                p.id.as_str(),
                enablement_says(p.enablement.as_ref()),
                p.children.as_deref(),
            ),
            Customization::Directory(d) => (d.id.as_str(), d.enabled, d.children.as_deref()),
            Customization::McpServer(m) => {
                (m.id.as_str(), enablement_says(m.enablement.as_ref()), None)
            }
            Customization::Unknown(_) => continue,
        };
        out.push((id.to_owned(), on, None));
        for ch in children.into_iter().flatten() {
            if let Some((cid, con)) = child_parts(ch) {
                out.push((cid.to_owned(), on && con, Some(id.to_owned())));
            }
        }
    }
    out
}

/// What the CLI is started with so that what is switched off stays off.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CliInputs {
    /// `--settings` (flag settings: not written anywhere).
    pub settings: Option<Value>,
    /// Added to `--disallowedTools`.
    pub disallowed_tools: Vec<String>,
    /// `--plugin-dir`, repeated.
    pub plugin_dirs: Vec<PathBuf>,
}

impl CliInputs {
    /// The inputs for `tree` (after toggles) with `targets`, `plugin_dirs` and the MCP servers
    /// a client stopped.
    pub fn of(d: &Discovered, tree: &[Customization], stopped: &BTreeSet<String>) -> CliInputs {
        let mut skills = BTreeMap::new();
        let mut excludes = Vec::new();
        let mut denied: BTreeSet<String> = stopped.clone();
        let mut disallowed = Vec::new();
        let mut off_plugins = BTreeSet::new();
        let mut installed = serde_json::Map::new();
        let entries = effective_in(tree);
        let off: BTreeSet<&str> = entries
            .iter()
            .filter(|(_, on, _)| !on)
            .map(|(id, _, _)| id.as_str())
            .collect();
        for (id, on, parent) in &entries {
            // A plugin that is off takes its children with it; they need nothing of their own.
            let plugin_off = parent.as_ref().is_some_and(|p| {
                off.contains(p.as_str())
                    && matches!(
                        d.targets.get(p),
                        Some(Target::ClientPlugin(_) | Target::Installed { .. })
                    )
            });
            if plugin_off {
                continue;
            }
            let (id, on) = (id.clone(), *on);
            if let Some(Target::Installed { key, in_settings }) = d.targets.get(&id)
                && on != *in_settings
            {
                installed.insert(key.clone(), Value::Bool(on));
            }
            if on {
                continue;
            }
            match d.targets.get(&id) {
                Some(Target::Skill(n)) => {
                    skills.insert(n.clone(), json!("off"));
                }
                Some(Target::Agent(n)) => disallowed.push(format!("Agent({n})")),
                Some(Target::Rule(p)) => excludes.push(json!(p.display().to_string())),
                Some(Target::Mcp(n)) => {
                    denied.insert(n.clone());
                }
                Some(Target::ClientPlugin(p)) => {
                    off_plugins.insert(p.clone());
                }
                Some(Target::Hook | Target::Container | Target::Installed { .. }) | None => {}
            }
        }
        let mut settings = serde_json::Map::new();
        if !skills.is_empty() {
            settings.insert(
                "skillOverrides".into(),
                Value::Object(skills.into_iter().collect()),
            );
        }
        if !excludes.is_empty() {
            settings.insert("claudeMdExcludes".into(), Value::Array(excludes));
        }
        if !installed.is_empty() {
            settings.insert("enabledPlugins".into(), Value::Object(installed));
        }
        if !denied.is_empty() {
            settings.insert(
                "deniedMcpServers".into(),
                denied.iter().map(|n| json!({"serverName": n})).collect(),
            );
        }
        CliInputs {
            settings: (!settings.is_empty()).then_some(Value::Object(settings)),
            disallowed_tools: disallowed,
            plugin_dirs: d
                .plugin_dirs
                .iter()
                .filter(|(id, _)| !off_plugins.contains(id))
                .map(|(_, dir)| dir.clone())
                .collect(),
        }
    }
}

/// The lifecycle state of one server in the CLI's `mcp_status` answer.
pub fn mcp_state(status: &Value) -> McpServerState {
    let error = |msg: String| {
        McpServerState::Error(McpServerErrorState {
            error: ErrorInfo {
                error_type: "mcpServer".into(),
                message: msg,
                stack: None,
                meta: None,
            },
        })
    };
    match status.get("status").and_then(Value::as_str) {
        Some("connected") => McpServerState::Ready(McpServerReadyState {}),
        Some("pending") => McpServerState::Starting(McpServerStartingState { blocking: None }),
        Some("disabled") => McpServerState::Stopped(McpServerStoppedState {}),
        Some("needs-auth") => {
            let url = status
                .pointer("/config/url")
                .and_then(Value::as_str)
                .unwrap_or_default();
            serde_json::from_value(json!({"kind": "authRequired", "reason": "required",
                "resource": {"resource": url}, "description": "sign in to this server with `claude /mcp`"}))
                .unwrap_or_else(|_| error("needs authentication".into()))
        }
        Some("failed") => error(
            status
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the server failed to start")
                .to_owned(),
        ),
        other => error(format!("unknown status {}", other.unwrap_or("(none)"))),
    }
}

/// The shared store's key of the global decisions (`SharedValues`).
pub const GLOBAL_DECISIONS_KEY: &str = "customizations/global";

/// Explicit decisions by id, as kept on disk (session scope per session, global scope for the
/// host).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Decisions {
    /// Decisions by customization id.
    #[serde(default)]
    pub by_id: BTreeMap<String, Vec<CustomizationEnablement>>,
    /// MCP servers a client stopped in this session, by name.
    #[serde(default)]
    pub stopped: BTreeSet<String>,
}

impl Decisions {
    /// Reads a decisions file (an absent or unreadable file is no decisions; the latter is
    /// logged).
    pub fn load(path: &Path) -> Decisions {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "customization decisions unreadable; starting without them");
                Decisions::default()
            }),
            Err(_) => Decisions::default(),
        }
    }

    /// Writes it (0600, atomically).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        let body = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&body)?;
        }
        std::fs::rename(tmp, path)
    }
}

/// Finds the agent whose file is `uri` in `tree` and returns the name Claude Code knows it by.
pub fn agent_named_by(
    tree: &[Customization],
    targets: &HashMap<String, Target>,
    uri: &str,
) -> Option<String> {
    for c in tree {
        for ch in children_of(c) {
            if let ChildCustomization::Agent(a) = ch
                && a.uri == uri
                && let Some(Target::Agent(n)) = targets.get(&a.id)
            {
                return Some(n.clone());
            }
        }
    }
    None
}

/// The file of every skill in `tree`, by the name Claude Code lists it under.
pub fn skill_files(
    tree: &[Customization],
    targets: &HashMap<String, Target>,
) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for c in tree {
        for ch in children_of(c) {
            if let ChildCustomization::Skill(s) = ch
                && let Some(Target::Skill(n)) = targets.get(&s.id)
            {
                out.insert(n.clone(), s.uri.clone());
            }
        }
    }
    out
}

/// One line per customization in effect, for `sessions show`.
pub fn summary(tree: &[Customization]) -> Vec<String> {
    let on: HashMap<String, bool> = effective(tree).into_iter().collect();
    let mut out = Vec::new();
    let mut line = |kind: &str, name: &str, id: &str, extra: String| {
        let off = if on.get(id) == Some(&false) {
            " (off)"
        } else {
            ""
        };
        out.push(format!("{kind} {name}{extra}{off}"));
    };
    let state = |s: &McpServerState| match s {
        McpServerState::Ready(_) => " ready".to_owned(),
        McpServerState::Starting(_) => " starting".to_owned(),
        McpServerState::Stopped(_) => " stopped".to_owned(),
        McpServerState::AuthRequired(_) => " needs auth".to_owned(),
        McpServerState::Error(e) => format!(" error: {}", e.error.message),
        McpServerState::Unknown(_) => String::new(),
    };
    for c in tree {
        let children = match c {
            Customization::Plugin(p) => {
                let load = match &p.load {
                    Some(CustomizationLoadState::Error(e)) => format!(" error: {}", e.message),
                    Some(CustomizationLoadState::Loading(_)) => " loading".to_owned(),
                    _ => String::new(),
                };
                line("plugin", &p.name, &p.id, load);
                p.children.as_deref()
            }
            Customization::Directory(d) => d.children.as_deref(),
            Customization::McpServer(m) => {
                line("mcp", &m.name, &m.id, state(&m.state));
                None
            }
            Customization::Unknown(_) => None,
        };
        for ch in children.into_iter().flatten() {
            match ch {
                ChildCustomization::Agent(x) => line("agent", &x.name, &x.id, String::new()),
                ChildCustomization::Skill(x) => line("skill", &x.name, &x.id, String::new()),
                ChildCustomization::Prompt(x) => line("command", &x.name, &x.id, String::new()),
                ChildCustomization::Rule(x) => line("rule", &x.name, &x.id, String::new()),
                ChildCustomization::Hook(x) => line("hook", &x.name, &x.id, String::new()),
                ChildCustomization::McpServer(m) => line("mcp", &m.name, &m.id, state(&m.state)),
                ChildCustomization::Unknown(_) => {}
            }
        }
    }
    out
}

/// The customizations a session had when it last ran (`sessions show`), one line each.
pub fn active_summary(dir: &Path, session_id: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join("sessions").join(session_id).join("active.txt"))
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Removes a session's decisions and plugin copies, with the session.
pub fn delete_session(dir: &Path, session_id: &str) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir.join("sessions").join(session_id)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Sets the state of every MCP server the CLI reports (`mcp_status`), adding the ones it
/// knows that were not discovered; a server left out of the report was denied (stopped).
/// Returns the ids whose state changed.
pub fn apply_mcp_status(
    tree: &mut Vec<Customization>,
    targets: &mut HashMap<String, Target>,
    report: &[Value],
    cwd: &Path,
) -> Vec<(String, McpServerState)> {
    let mut changed = Vec::new();
    let by_name: HashMap<&str, McpServerState> = report
        .iter()
        .filter_map(|s| Some((s.get("name")?.as_str()?, mcp_state(s))))
        .collect();
    let mut seen = BTreeSet::new();
    let mut visit = |m: &mut McpServerCustomization| {
        seen.insert(m.name.clone());
        let next = by_name
            .get(m.name.as_str())
            .cloned()
            .unwrap_or(McpServerState::Stopped(McpServerStoppedState {}));
        if m.state != next {
            m.state = next.clone();
            changed.push((m.id.clone(), next));
        }
    };
    for c in tree.iter_mut() {
        for_each_mcp_mut(c, &mut visit);
    }
    for s in report {
        let Some(name) = s.get("name").and_then(Value::as_str) else {
            continue;
        };
        if seen.contains(name) {
            continue;
        }
        let id = mcp_id(name);
        targets.insert(id.clone(), Target::Mcp(name.to_owned()));
        let state = mcp_state(s);
        tree.push(Customization::McpServer(Box::new(mcp_entry(
            id.clone(),
            file_uri(cwd),
            name,
            state.clone(),
        ))));
        changed.push((id, state));
    }
    changed
}

/// Puts saved decisions back on a freshly discovered tree (by id), keeping the live MCP states
/// of `previous`.
pub fn restore(tree: &mut [Customization], decisions: &[&Decisions], previous: &[Customization]) {
    let mut live: HashMap<String, McpServerState> = HashMap::new();
    for c in previous {
        for_each_mcp(c, &mut |m| {
            live.insert(m.id.clone(), m.state.clone());
        });
    }
    let mut merged: BTreeMap<String, Vec<CustomizationEnablement>> = BTreeMap::new();
    for d in decisions {
        for (id, e) in &d.by_id {
            let entry = merged.entry(id.clone()).or_default();
            for x in e {
                let same_scope = entry
                    .iter()
                    .any(|y| std::mem::discriminant(y) == std::mem::discriminant(x));
                if !same_scope {
                    entry.push(x.clone());
                }
            }
        }
    }
    for list in merged.values_mut() {
        // Most specific first, as the wire contract says.
        list.sort_by_key(|e| match e {
            CustomizationEnablement::Session { .. } => 0,
            CustomizationEnablement::Workspace { .. } => 1,
            CustomizationEnablement::Global { .. } => 2,
            CustomizationEnablement::Unknown(_) => 3,
        });
    }
    for c in tree.iter_mut() {
        for_each_mcp_mut(c, &mut |m| {
            if let Some(s) = live.get(&m.id) {
                m.state = s.clone();
            }
        });
    }
    for (id, enablement) in merged {
        apply_toggle(tree, &id, &enablement);
    }
}

/// Applies explicit decisions to the entry `id`, as the official reducer does for
/// `session/customizationToggled`.
fn apply_toggle(tree: &mut [Customization], id: &str, enablement: &[CustomizationEnablement]) {
    let on = enablement_says(Some(&enablement.to_vec()));
    let provenance = (!enablement.is_empty()).then(|| enablement.to_vec());
    for c in tree.iter_mut() {
        let children = match c {
            Customization::Plugin(p) if p.id == id => {
                p.enablement = provenance;
                return;
            }
            Customization::Directory(d) if d.id == id => {
                d.enabled = on;
                return;
            }
            Customization::McpServer(m) if m.id == id => {
                m.enablement = provenance;
                return;
            }
            Customization::Plugin(PluginCustomization { children, .. })
            | Customization::Directory(DirectoryCustomization { children, .. }) => children,
            _ => continue,
        };
        for ch in children.iter_mut().flatten() {
            match ch {
                ChildCustomization::Agent(x) if x.id == id => x.enabled = Some(on),
                ChildCustomization::Skill(x) if x.id == id => x.enabled = Some(on),
                ChildCustomization::Prompt(x) if x.id == id => x.enabled = Some(on),
                ChildCustomization::Rule(x) if x.id == id => x.enabled = Some(on),
                ChildCustomization::Hook(x) if x.id == id => x.enabled = Some(on),
                ChildCustomization::McpServer(x) if x.id == id => {
                    x.enablement = provenance.clone();
                }
                _ => continue,
            }
            return;
        }
    }
}

/// A container's children (none for a bare MCP server).
fn children_of(c: &Customization) -> &[ChildCustomization] {
    match c {
        Customization::Plugin(p) => p.children.as_deref().unwrap_or(&[]),
        Customization::Directory(d) => d.children.as_deref().unwrap_or(&[]),
        Customization::McpServer(_) | Customization::Unknown(_) => &[],
    }
}

fn for_each_mcp(c: &Customization, f: &mut dyn FnMut(&McpServerCustomization)) {
    match c {
        Customization::McpServer(m) => f(m),
        _ => {
            for ch in children_of(c) {
                if let ChildCustomization::McpServer(m) = ch {
                    f(m);
                }
            }
        }
    }
}

fn for_each_mcp_mut(c: &mut Customization, f: &mut dyn FnMut(&mut McpServerCustomization)) {
    match c {
        Customization::McpServer(m) => f(m),
        Customization::Plugin(PluginCustomization { children, .. })
        | Customization::Directory(DirectoryCustomization { children, .. }) => {
            for ch in children.iter_mut().flatten() {
                if let ChildCustomization::McpServer(m) = ch {
                    f(m);
                }
            }
        }
        Customization::Unknown(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn sources(dir: &Path) -> Sources {
        Sources::new(None, &dir.join("home"), &dir.join("proj"))
    }

    #[test]
    fn the_user_and_the_project_folders_are_read_into_containers() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "home/.claude/agents/helper.md",
            "---\ndescription: Helps\n---\nx",
        );
        write(d, "home/.claude/CLAUDE.md", "user rules");
        write(
            d,
            "proj/.claude/skills/deploy/SKILL.md",
            "---\nname: ship\n---\nx",
        );
        write(
            d,
            "proj/.claude/commands/git/commit.md",
            "---\ndescription: Commit\n---\nx",
        );
        write(d, "proj/CLAUDE.md", "rules");
        write(
            d,
            "proj/.mcp.json",
            r#"{"mcpServers": {"tiny": {"command": "x"}}}"#,
        );
        write(
            d,
            "home/.claude.json",
            &format!(
                r#"{{"mcpServers": {{"mine": {{"url": "http://h"}}}}, "projects": {{"{}": {{"mcpServers": {{"local": {{"command": "y"}}}}}}}}}}"#,
                d.join("proj").display()
            ),
        );
        let found = discover(&sources(d), &[]);
        let ids: Vec<(String, bool)> = effective(&found.tree);
        let has = |id: &str| ids.iter().any(|(i, on)| i == id && *on);
        for id in [
            "user:agents",
            "user:agent:helper",
            "project:skill:ship",
            "project:command:git:commit",
            "mcp:tiny",
            "mcp:mine",
            "mcp:local",
        ] {
            assert!(has(id), "{id} in {ids:?}");
        }
        assert!(
            !has("user:skills"),
            "a user folder that does not exist is not listed"
        );
        assert!(
            has("project:agents"),
            "the project's always are: clients may write there"
        );
        let rules: Vec<&Target> = found
            .targets
            .values()
            .filter(|t| matches!(t, Target::Rule(_)))
            .collect();
        assert_eq!(rules.len(), 2, "the user's and the project's CLAUDE.md");
        assert_eq!(
            found.targets.get("project:command:git:commit"),
            Some(&Target::Skill("git:commit".into()))
        );
    }

    #[test]
    fn what_is_switched_off_becomes_cli_inputs_that_only_hide() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "proj/.claude/agents/rev.md", "---\nname: rev\n---\nx");
        write(d, "proj/.claude/skills/deploy/SKILL.md", "x");
        write(d, "proj/CLAUDE.md", "rules");
        write(
            d,
            "proj/.mcp.json",
            r#"{"mcpServers": {"tiny": {"command": "x"}}}"#,
        );
        let found = discover(&sources(d), &[]);
        let mut tree = found.tree.clone();
        assert_eq!(
            CliInputs::of(&found, &tree, &BTreeSet::new()),
            CliInputs::default()
        );
        let off = vec![CustomizationEnablement::Session { enabled: false }];
        let rule = format!("rule:{}", d.join("proj/CLAUDE.md").display());
        let mut decisions = Decisions::default();
        for id in [
            "project:agent:rev",
            "project:skill:deploy",
            "mcp:tiny",
            &rule,
        ] {
            decisions.by_id.insert(id.to_owned(), off.clone());
        }
        restore(&mut tree, &[&decisions], &[]);
        let inputs = CliInputs::of(&found, &tree, &BTreeSet::new());
        assert_eq!(
            inputs.settings,
            Some(json!({
                "skillOverrides": {"deploy": "off"},
                "claudeMdExcludes": [d.join("proj/CLAUDE.md").display().to_string()],
                "deniedMcpServers": [{"serverName": "tiny"}]}))
        );
        assert_eq!(inputs.disallowed_tools, ["Agent(rev)"]);
        // A container switched off switches its children off.
        let mut tree = found.tree.clone();
        let mut decisions = Decisions::default();
        decisions.by_id.insert("project:skills".into(), off);
        restore(&mut tree, &[&decisions], &[]);
        let inputs = CliInputs::of(&found, &tree, &BTreeSet::new());
        assert_eq!(
            inputs.settings,
            Some(json!({"skillOverrides": {"deploy": "off"}}))
        );
    }

    #[test]
    fn installed_plugins_are_listed_as_the_settings_enable_them_and_toggled_by_flag_settings() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let on = d.join("cache/on");
        let off = d.join("cache/off");
        write(&on, ".claude-plugin/plugin.json", r#"{"name": "onplug"}"#);
        write(&on, "skills/s/SKILL.md", "---\nname: s\n---\nx");
        write(&off, ".claude-plugin/plugin.json", r#"{"name": "offplug"}"#);
        write(
            d,
            "home/.claude/plugins/installed_plugins.json",
            &json!({"version": 2, "plugins": {
                "onplug@mkt": [{"scope": "user", "installPath": on}],
                "offplug@mkt": [{"scope": "user", "installPath": off}]}})
            .to_string(),
        );
        write(
            d,
            "home/.claude/settings.json",
            r#"{"enabledPlugins": {"onplug@mkt": true}}"#,
        );
        let found = discover(&sources(d), &[]);
        let states: BTreeMap<String, bool> = effective(&found.tree).into_iter().collect();
        assert_eq!(states.get("installed:onplug@mkt"), Some(&true));
        assert_eq!(states.get("installed:offplug@mkt"), Some(&false));
        assert_eq!(
            found.targets.get("installed:onplug@mkt:skill:s"),
            Some(&Target::Skill("onplug:s".into()))
        );
        assert_eq!(
            CliInputs::of(&found, &found.tree, &BTreeSet::new()),
            CliInputs::default()
        );
        let mut tree = found.tree.clone();
        let mut decisions = Decisions::default();
        decisions.by_id.insert(
            "installed:onplug@mkt".into(),
            vec![CustomizationEnablement::Session { enabled: false }],
        );
        decisions.by_id.insert(
            "installed:offplug@mkt".into(),
            vec![CustomizationEnablement::Session { enabled: true }],
        );
        restore(&mut tree, &[&decisions], &[]);
        assert_eq!(
            CliInputs::of(&found, &tree, &BTreeSet::new()).settings,
            Some(json!({"enabledPlugins": {"onplug@mkt": false, "offplug@mkt": true}}))
        );
    }

    #[test]
    fn a_malformed_mcp_json_is_a_container_in_error() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "proj/.mcp.json", r#"{"mcpServers": {"#);
        let found = discover(&sources(d), &[]);
        let mcp = found
            .tree
            .iter()
            .find_map(|c| match c {
                Customization::Directory(x) if x.id == "project:mcp" => Some(x),
                _ => None,
            })
            .expect("the project's MCP container");
        let Some(CustomizationLoadState::Error(e)) = &mcp.load else {
            panic!("{mcp:?}")
        };
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
    }

    #[test]
    fn a_session_decision_outranks_a_global_one_and_both_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "proj/.mcp.json",
            r#"{"mcpServers": {"tiny": {"command": "x"}}}"#,
        );
        let found = discover(&sources(d), &[]);
        let mut global = Decisions::default();
        global.by_id.insert(
            "mcp:tiny".into(),
            vec![CustomizationEnablement::Global { enabled: false }],
        );
        let mut session = Decisions::default();
        session.by_id.insert(
            "mcp:tiny".into(),
            vec![CustomizationEnablement::Session { enabled: true }],
        );
        let mut tree = found.tree.clone();
        restore(&mut tree, &[&session, &global], &[]);
        let Customization::Directory(container) = &tree[tree.len() - 1] else {
            panic!("{tree:?}")
        };
        let Some(ChildCustomization::McpServer(m)) =
            container.children.as_ref().and_then(|c| c.first())
        else {
            panic!("{container:?}")
        };
        assert_eq!(
            m.enablement,
            Some(vec![
                CustomizationEnablement::Session { enabled: true },
                CustomizationEnablement::Global { enabled: false }
            ])
        );
        assert_eq!(
            CliInputs::of(&found, &tree, &BTreeSet::new()).settings,
            None
        );
        let path = d.join("state/global.json");
        global.save(&path).unwrap();
        assert_eq!(Decisions::load(&path), global);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_clis_mcp_report_sets_states_and_adds_servers_it_knows() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "proj/.mcp.json",
            r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}"#,
        );
        let mut found = discover(&sources(d), &[]);
        let mut tree = found.tree.clone();
        let report = vec![
            json!({"name": "a", "status": "connected"}),
            json!({"name": "c", "status": "failed", "error": "Connection closed"}),
        ];
        let changed = apply_mcp_status(&mut tree, &mut found.targets, &report, &d.join("proj"));
        let ids: Vec<&str> = changed.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["mcp:a", "mcp:c"], "b is still stopped: not reported");
        assert!(matches!(changed[0].1, McpServerState::Ready(_)));
        let McpServerState::Error(e) = &changed[1].1 else {
            panic!("{changed:?}")
        };
        assert_eq!(e.error.message, "Connection closed");
        assert_eq!(found.targets.get("mcp:c"), Some(&Target::Mcp("c".into())));
        assert!(
            apply_mcp_status(&mut tree, &mut found.targets, &report, &d.join("proj")).is_empty(),
            "nothing changed the second time"
        );
    }
}
