//! The CLI: its frames (read all the time), its start in a job beside the task (with a
//! warm-up turn when it starts ahead of a prompt), its end.

use super::*;
use claude_host_sdk::WarmUpError;

/// How long each step of a warm-up turn may take (listing hooks, the turn, the cut).
const WARM_UP_LIMIT: Duration = Duration::from_secs(10);
/// How long stopping a starting CLI waits for its warm-up turn to be cut.
const WARM_UP_SETTLE: Duration = Duration::from_secs(2);

/// A CLI that started, for the task.
pub(crate) struct StartedCli {
    cli: Box<ClaudeSession>,
    commands: Vec<SlashCommand>,
    /// Transcript lines reported during a warm-up turn, for the store's copy.
    mirrored: Vec<Frame>,
    /// A warm-up turn ran and was cut.
    warmed: bool,
}

/// What has to be done to the transcript before a CLI starts the session.
struct TranscriptFix {
    config_dir: Option<PathBuf>,
    id: String,
    /// The transcript holds only a cut warm-up turn: remove it, the session starts afresh.
    remove: bool,
    /// A warm-up turn that may be uncut: resume before it.
    uncut: Option<String>,
}

impl TranscriptFix {
    /// Applies the fix to the disk and to `opts`.
    async fn apply(self, opts: &mut SessionOptions) {
        if !self.remove && self.uncut.is_none() {
            return;
        }
        let Some(config) = self.config_dir else {
            return;
        };
        let id = self.id.clone();
        let uncut = self.uncut.clone();
        let remove = self.remove;
        // `Some(parent)`: resume at it; `None`: nothing precedes, the transcript is removed.
        let found = tokio::task::spawn_blocking(move || -> Option<Option<String>> {
            let parent = match &uncut {
                Some(u) => {
                    let index =
                        claude_host_sdk::transcripts::TranscriptIndex::of_session(&config, &id)
                            .ok()?;
                    let entry = index.entry(index.first_with_uuid(u)?).ok()??;
                    entry
                        .get("parentUuid")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                }
                None => None,
            };
            if parent.is_none() || remove {
                remove_warm_up_transcript(&config, &id);
                return Some(None);
            }
            Some(parent)
        })
        .await
        .ok()
        .flatten();
        match found {
            Some(Some(parent)) => {
                tracing::info!(session = %self.id, "resuming before a warm-up turn that was not cut");
                if opts.resume_session_at.is_none() {
                    opts.resume_session_at = Some(parent);
                }
            }
            Some(None) => {
                opts.resume = None;
                opts.resume_session_at = None;
                opts.session_id = Some(self.id);
            }
            None => {}
        }
    }
}

/// Removes a transcript that holds only a warm-up turn (blocking).
fn remove_warm_up_transcript(config: &std::path::Path, id: &str) {
    match claude_host_sdk::transcripts::delete_session(config, id) {
        Ok(()) | Err(claude_host_sdk::transcripts::TranscriptError::NotFound(_)) => {}
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "could not remove a transcript that holds only a warm-up turn");
        }
    }
}

impl Task {
    pub(super) async fn on_frame(&mut self, item: Option<Result<Frame, SessionError>>) {
        match item {
            Some(Ok(frame)) if frame.kind == FrameKind::TranscriptMirror => {
                if let Some(d) = &self.durable {
                    d.mirror.frame(&frame.raw);
                }
            }
            Some(Ok(frame)) => match self.track_tasks(&frame).typed() {
                Ok(typed) => self.on_typed(typed),
                Err(e) => {
                    tracing::warn!(session = %self.id, error = %e, "a frame with unexpected fields; skipped");
                }
            },
            Some(Err(e @ SessionError::Exited { .. })) => self.cli_exited(e),
            // The SDK's reader has logged it, with a bound on how often.
            Some(Err(e)) => tracing::debug!(session = %self.id, error = %e, "skipping a bad frame"),
            None => self.cli_exited(SessionError::Write("the CLI's output ended".into())),
        }
        if self
            .turn
            .as_ref()
            .is_some_and(|t| t.phase == Phase::Waiting)
        {
            self.pump().await;
        }
    }

    pub(super) fn on_typed(&mut self, typed: Typed) {
        if let Some(settling) = &self.settling {
            let ends = match &typed {
                Typed::Result(_) => true,
                Typed::SessionState(s) => s.run_state() == RunState::Idle,
                _ => false,
            };
            if ends {
                tracing::debug!(session = %self.id, killed = settling.killed, "the interrupted turn settled");
                self.settling = None;
                self.pump_later();
            }
            return;
        }
        if let Typed::TaskNotification(n) = &typed {
            self.notes.push(n.describe());
            self.on_task_notification(n);
        }
        // A subagent's frames are its chat's, whether or not a turn of the main chat runs
        // (a background subagent outlives the turn that started it).
        if let Some(call) = subagents::subagent_of(&typed) {
            let call = call.to_owned();
            self.on_subagent_frame(&call, &typed);
            return;
        }
        if self.turn.is_none() {
            if !mapper::shows_a_turn(&typed) {
                return;
            }
            self.adopt();
        }
        if self.turn.as_ref().is_some_and(|t| t.storing.is_some()) {
            // The turn is over, its completion waits for the store (moments, bounded by the
            // lease): the CLI has gone idle, nothing of it is to be shown.
            tracing::debug!(session = %self.id, "a frame while the completed turn is stored; skipped");
            return;
        }
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        let mut end: Option<ResultFrame> = None;
        let mut out = Vec::new();
        let mut consumed = Vec::new();
        let mut idle_adopted = false;
        match typed {
            Typed::CommandLifecycle(c) => {
                if !turn.command.is_empty() && c.command_uuid == turn.command {
                    turn.ours = Some(c.command_state());
                }
                if c.command_state() == CommandState::Started {
                    consumed.push(c.command_uuid);
                }
            }
            Typed::SessionState(s) if s.run_state() == RunState::Idle => {
                // The queue drained: a result held back for steering ends the turn.
                end = turn.held.take();
                if end.is_none() && turn.command.is_empty() && turn.phase == Phase::Sent {
                    // A turn Claude Code started on its own that went idle without a
                    // `result`: nothing runs any more, so it is over.
                    idle_adopted = true;
                }
            }
            Typed::Result(r) => {
                if turn.phase == Phase::Waiting || turn.ours == Some(CommandState::Queued) {
                    // A turn the CLI ran before our command started.
                    tracing::debug!(session = %self.id, "a result before our command started; skipped");
                } else if !self.steering.is_empty() || turn.steered {
                    // A steering message still to run, or one that ran: this result ends only
                    // a step; the turn ends when the CLI goes idle.
                    turn.held = Some(r);
                } else {
                    end = Some(r);
                }
            }
            other => out = turn.mapper.map(&other),
        }
        self.turn = Some(turn);
        self.publish_mapped(&ChannelKind::Chat, out);
        for uuid in consumed {
            if let Some(at) = self.steering.iter().position(|s| s.cli_uuid == uuid) {
                let s = self.steering.remove(at);
                self.chat(actions::pending_removed(
                    PendingMessageKind::Steering,
                    &s.id,
                ));
            }
        }
        if let Some(r) = end {
            self.end_turn_with(&r);
        } else if idle_adopted && let Some(turn) = self.turn.as_mut() {
            tracing::debug!(session = %self.id, turn = %turn.id, "a turn of the CLI's own ended idle");
            let end = turn.mapper.complete();
            self.complete_turn(end);
        }
    }

    pub(super) fn cli_exited(&mut self, error: SessionError) {
        if matches!(self.cli, Cli::None | Cli::Starting(_)) {
            return;
        }
        tracing::info!(session = %self.id, error = %error, "the CLI exited");
        if let Some(m) = &self.meters {
            m.crashed();
        }
        self.cli = Cli::None;
        self.settling = None;
        self.refuse_waiting();
        self.end_all_subagents(|| {
            subagents::ChildEnd::Failed("the Claude Code CLI exited".to_owned())
        });
        // A turn whose result came is over whatever the CLI does now; it waits for the store.
        if self
            .turn
            .as_ref()
            .is_some_and(|t| t.phase == Phase::Sent && t.storing.is_none())
        {
            self.fail_turn(
                "cli_exited",
                &error.to_string(),
                ChatSessionError::Session(error),
            );
        }
        // A turn still waiting starts a new CLI that resumes the session.
        self.pump_later();
    }

    /// The prompt limit of the session's model (the default model's when none is chosen).
    fn compact_window(&self) -> Option<i64> {
        let model = self.settings.model.as_deref();
        self.models
            .iter()
            .find(|m| model.is_none_or(|id| m.id == id))
            .and_then(|m| m.max_prompt_tokens)
    }

    /// Starts a CLI for the session; `ahead`: ahead of a prompt (nobody waits for it yet),
    /// so it may run a warm-up turn first.
    pub(super) fn start_cli(&mut self, ahead: bool) {
        self.generation += 1;
        self.materializations += 1;
        if let Some(m) = &self.meters {
            m.started();
        }
        self.restart_needed = false;
        let generation = self.generation;
        let mut opts = self.opts.clone();
        if self.resumable {
            opts.resume = Some(self.id.clone());
            opts.session_id = None;
            opts.resume_session_at = self.resume_at.take();
        } else {
            opts.session_id = Some(self.id.clone());
            opts.resume = None;
        }
        opts.model = self.settings.model.clone();
        opts.effort = self.settings.effort.clone();
        opts.permission_mode = self.settings.permission_mode.clone();
        if self.allow_bypass {
            // The CLI refuses bypassPermissions as root without this exact value.
            opts.extra_env.push(("IS_SANDBOX".into(), "1".into()));
        }
        if let Some(window) = self.compact_window() {
            // The CLI compacts against its own idea of the context window; the upstream's
            // prompt limit (Copilot's is often far smaller) is the one that fails a turn.
            opts.extra_env
                .push(("CLAUDE_CODE_AUTO_COMPACT_WINDOW".into(), window.to_string()));
        }
        // Each line of the transcript is also reported, for the shared store.
        opts.session_mirror = self.durable.is_some();
        self.apply_customizations(&mut opts);
        self.cli_settings = self.settings.clone();
        let servers = self.client_tool_servers(generation);
        let tx = self.internal_tx.clone();
        let bridge = Arc::new(Bridge {
            tx: tx.clone(),
            generation,
            edits: self.edits.clone(),
        });
        let hooks = self.edits.is_some().then(crate::edits::tracker::hooks);
        let fix = TranscriptFix {
            config_dir: self.config_dir(),
            id: self.id.clone(),
            remove: !self.resumable && std::mem::take(&mut self.warmed_empty),
            uncut: self.uncut_warm_up.take(),
        };
        let warm_up = (ahead && self.warm_up).then(|| uuid::Uuid::new_v4().to_string());
        self.warm_up_in_flight = warm_up.clone();
        let wanted = Arc::new(std::sync::atomic::AtomicBool::new(warm_up.is_some()));
        self.warm_up_wanted = wanted.clone();
        let id = self.id.clone();
        let job = tokio::spawn(async move {
            let mut uncut_warm_up = None;
            let result = async {
                let mut opts = opts;
                fix.apply(&mut opts).await;
                let cli = ClaudeSession::spawn_with_mcp(opts, bridge, servers)
                    .map_err(|e| e.to_string())?;
                let init = cli
                    .initialize(hooks, json!({}))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut started = StartedCli {
                    cli: Box::new(cli),
                    commands: crate::completions::slash_commands(&init),
                    mirrored: Vec::new(),
                    warmed: false,
                };
                let Some(uuid) = warm_up.filter(|_| wanted.load(Ordering::SeqCst)) else {
                    return Ok(started);
                };
                let begun = Instant::now();
                match started.cli.warm_up(&uuid, WARM_UP_LIMIT).await {
                    Ok(w) => {
                        tracing::debug!(session = %id, took = ?begun.elapsed(), "warmed up");
                        started.mirrored = w.mirrored;
                        started.warmed = true;
                        Ok(started)
                    }
                    Err(e @ (WarmUpError::Hooked(_) | WarmUpError::Listing(_))) => {
                        tracing::debug!(session = %id, reason = %e, "no warm-up turn");
                        Ok(started)
                    }
                    // Its transcript lines stay out of the store's copy: the next CLI resumes
                    // before them.
                    Err(WarmUpError::NotCut {
                        uuid,
                        reason,
                        mirrored: _,
                    }) => {
                        tracing::warn!(session = %id, %reason, "a warm-up turn was not cut; its CLI is stopped");
                        // Dropping the CLI kills its group; the next resumes before the turn.
                        drop(started);
                        uncut_warm_up = Some(uuid);
                        Err("the warm-up turn was not cut".to_owned())
                    }
                }
            }
            .await;
            // If the task is gone, the CLI is dropped here, which kills its group.
            let _ = tx.send(Internal::Started {
                generation,
                result,
                uncut_warm_up,
            });
        });
        self.cli = Cli::Starting(job);
    }

    /// Closes the live CLI (gracefully when nothing else holds it, else by killing its group).
    pub(super) async fn stop_cli(&mut self) {
        match std::mem::replace(&mut self.cli, Cli::None) {
            Cli::Live(cli) => match Arc::try_unwrap(cli) {
                Ok(cli) => {
                    let _ = cli.close().await;
                }
                Err(shared) => shared.kill(),
            },
            Cli::Starting(mut job) => {
                // Whatever the job still reports is stale.
                self.generation += 1;
                if let Some(uuid) = self.warm_up_in_flight.take() {
                    // Before the session's first turn, all its transcript can hold is this.
                    if !self.resumable {
                        self.warmed_empty = true;
                    }
                    // A warm-up turn is cut within a few hundred milliseconds: let it finish,
                    // so the transcript does not keep it. Its CLI, handed over in a message
                    // this task no longer takes, dies with that message.
                    if tokio::time::timeout(WARM_UP_SETTLE, &mut job).await.is_ok() {
                        self.settling = None;
                        return;
                    }
                    // Stopped midway, it may be in the transcript, uncut.
                    self.uncut_warm_up = Some(uuid);
                }
                job.abort();
                // The aborted job drops a half-started CLI, which kills its group.
                let _ = job.await;
            }
            Cli::None => {}
        }
        self.settling = None;
    }

    /// Removes the transcript of a session that had a warm-up turn and no turn of its own:
    /// it holds nothing of the user's, and a later resume would bring the warm-up back.
    pub(super) async fn forget_warm_up_transcript(&mut self) {
        if self.resumable || !std::mem::take(&mut self.warmed_empty) {
            return;
        }
        let Some(config) = self.config_dir() else {
            return;
        };
        let id = self.id.clone();
        let _ = tokio::task::spawn_blocking(move || remove_warm_up_transcript(&config, &id)).await;
    }

    pub(super) async fn on_internal(&mut self, msg: Internal) {
        match msg {
            Internal::Started {
                generation,
                result,
                uncut_warm_up,
            } => {
                if generation != self.generation || self.closing {
                    return;
                }
                self.warm_up_in_flight = None;
                if uncut_warm_up.is_some() {
                    self.uncut_warm_up = uncut_warm_up;
                    self.cli = Cli::None;
                    // Someone already waiting gets a CLI without a warm-up.
                    if self.turn.is_some() || !self.warm_waiters.is_empty() {
                        self.start_cli(false);
                    }
                    return;
                }
                match result {
                    Ok(started) => {
                        if let Some(d) = &self.durable {
                            for f in &started.mirrored {
                                d.mirror.frame(&f.raw);
                            }
                        }
                        if started.warmed && !self.resumable {
                            self.warmed_empty = true;
                        }
                        let cli: Arc<ClaudeSession> = Arc::from(started.cli);
                        self.watch_mcp(cli.clone());
                        self.cli = Cli::Live(cli);
                        self.slash_commands = started.commands;
                        for w in std::mem::take(&mut self.warm_waiters) {
                            self.deliver(w, Ok(()));
                        }
                        // A new process has not heard of the typing yet.
                        self.draft_told_at = None;
                        self.tell_draft_activity();
                        self.sync_settings();
                        self.pump().await;
                    }
                    Err(e) => {
                        tracing::warn!(session = %self.id, error = %e, "the CLI did not start");
                        self.cli = Cli::None;
                        for w in std::mem::take(&mut self.warm_waiters) {
                            self.deliver(w, Err(ChatSessionError::Start(e.clone())));
                        }
                        let msg = format!("cannot start Claude Code: {e}");
                        self.fail_turn("cli_start_failed", &msg, ChatSessionError::Start(e));
                    }
                }
            }
            Internal::Permission {
                generation,
                request,
                proposed,
                reply,
            } => {
                self.on_permission(generation, *request, proposed, reply)
                    .await
            }
            Internal::Withdrawn {
                generation,
                tool_use_id,
            } => {
                if generation == self.generation
                    && let Some(w) = self.waiting.remove(&tool_use_id)
                {
                    self.refuse(&tool_use_id, w);
                }
            }
            Internal::Stored { turn_id, result } => self.turn_stored(&turn_id, result),
            Internal::Applied { generation, result } => {
                self.applied(generation, result);
                self.pump().await;
            }
            Internal::SubagentRead { call, end, turns } => {
                self.subagent_read(&call, end, turns);
            }
            Internal::ClientTool {
                generation,
                tool_use_id,
                name,
                reply,
            } => {
                self.on_client_tool(generation, tool_use_id, name, reply)
                    .await;
            }
            Internal::Edited { generation, record } => self.on_edited(generation, record),
            Internal::Terminal { uri, event } => self.on_terminal_event(&uri, event),
            Internal::Rewound {
                files,
                keep,
                result,
                reply,
            } => self.rewound(files, keep, result, reply).await,
            Internal::PutBack {
                files,
                result,
                reply,
            } => self.on_put_back(files, result, reply),
            Internal::Pump => {
                self.next_queued();
                self.pump().await;
                self.apply_between_turns().await;
                self.save_active_summary();
            }
            Internal::AgentApplied {
                generation,
                agent,
                result,
            } => self.on_agent_applied(generation, agent, result).await,
            Internal::McpStatus {
                generation,
                servers,
            } => self.on_mcp_status(generation, servers),
            Internal::PluginCopied {
                client,
                id,
                nonce,
                result,
            } => self.on_plugin_copied(client, id, nonce, result).await,
        }
    }
}
