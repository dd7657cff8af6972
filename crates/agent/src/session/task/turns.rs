//! Turns: opened in the state at once, sent to the CLI when it can take them, ended by its
//! `result` (or a cancel, or the CLI's end); the prompt queue and steering.

use super::*;

impl Task {
    pub(super) async fn prompt(&mut self, text: String, done: Done) {
        if self.closing {
            self.deliver(done, Err(ChatSessionError::Closed));
            return;
        }
        let message = actions::message(&text, MessageKind::User);
        if self.turn.is_some() || !self.queue.is_empty() {
            let id = uuid::Uuid::new_v4().to_string();
            self.chat(actions::pending_set(
                PendingMessageKind::Queued,
                &id,
                message.clone(),
            ));
            self.queue.push_back(Queued {
                id,
                message,
                done: Some(done),
            });
            return;
        }
        self.turns_started += 1;
        let turn_id = crate::restore::new_turn_id();
        self.start_turn(turn_id, message, None, Some(done));
        self.pump().await;
    }

    /// Opens a turn in the state; the prompt goes to the CLI as soon as it can ([`Task::pump`]).
    pub(super) fn start_turn(
        &mut self,
        turn_id: String,
        message: Message,
        echo: Option<(StateAction, ActionOrigin)>,
        done: Option<Done>,
    ) {
        self.start_turn_from(turn_id, message, echo, done, None);
    }

    pub(super) fn start_turn_from(
        &mut self,
        turn_id: String,
        message: Message,
        echo: Option<(StateAction, ActionOrigin)>,
        done: Option<Done>,
        queued_id: Option<String>,
    ) {
        let text = message.text.clone();
        self.customs.want_agent = message.agent.as_ref().and_then(|a| self.agent_for(&a.uri));
        match echo {
            Some((action, origin)) => self.publish(ChannelKind::Chat, action, Some(origin)),
            None => self.chat(actions::turn_started(&turn_id, message, queued_id)),
        }
        self.notes.clear();
        // The first prompt names the session.
        if self.session.title.is_empty() {
            let title: String = text.lines().next().unwrap_or("").chars().take(80).collect();
            if !title.is_empty() {
                self.session(actions::title_changed(&title));
                let mut c = summary_changes();
                c.title = Some(title);
                self.notice(c);
            }
        }
        self.session(actions::chat_status(
            &self.uris.chat.clone(),
            status::IN_PROGRESS,
        ));
        self.notice_status(status::IN_PROGRESS);
        self.turn = Some(ActiveTurn {
            mapper: TurnMapper::new(&turn_id),
            // The turn id comes back from the transcript when the session is restored.
            command: crate::restore::prompt_uuid(&turn_id),
            id: turn_id,
            content: Value::String(text),
            phase: Phase::Waiting,
            ours: None,
            held: None,
            steered: false,
            storing: None,
            done,
        });
    }

    /// A turn Claude Code started by itself: a turn of its own, named after what prompted it.
    pub(super) fn adopt(&mut self) {
        self.turns_started += 1;
        let turn_id = format!("turn-{}", self.turns_started);
        let text = if self.notes.is_empty() {
            "Claude Code continued on its own".to_owned()
        } else {
            self.notes.join("; ")
        };
        self.start_turn(
            turn_id.clone(),
            actions::message(&text, MessageKind::SystemNotification),
            None,
            None,
        );
        if let Some(t) = self.turn.as_mut() {
            t.phase = Phase::Sent;
            t.command.clear();
            t.ours = Some(CommandState::Started);
        }
        tracing::info!(session = %self.id, turn = %turn_id, "Claude Code started a turn on its own");
    }

    /// Moves a waiting turn forward: starts the CLI, or writes the prompt once nothing else
    /// has to happen first.
    pub(super) async fn pump(&mut self) {
        let waiting = self
            .turn
            .as_ref()
            .is_some_and(|t| t.phase == Phase::Waiting);
        if !waiting || self.settling.is_some() || self.applying.is_some() || self.closing {
            return;
        }
        if (self.restart_needed || self.client_tools_changed() || self.customizations_changed())
            && let Cli::Live(_) = &self.cli
        {
            // Between turns only: a new CLI resumes the session with what changed.
            tracing::info!(session = %self.id, "restarting the CLI for new options or client tools");
            self.stop_cli().await;
        }
        match &self.cli {
            // A prompt waits for it: no warm-up turn, unless one has begun.
            Cli::Starting(_) => self.warm_up_wanted.store(false, Ordering::SeqCst),
            Cli::None => self.start_cli(false),
            Cli::Live(cli) => {
                let cli = cli.clone();
                if self.agent_pending(&cli) {
                    return;
                }
                let Some((command, content)) = self
                    .turn
                    .as_ref()
                    .map(|t| (t.command.clone(), t.content.clone()))
                else {
                    return;
                };
                self.report_human_message();
                let written = tokio::time::timeout(
                    WRITE_TIMEOUT,
                    cli.send_user(content, Some(&command), None),
                )
                .await;
                match written {
                    Ok(Ok(())) => {
                        self.resumable = true;
                        if let Some(t) = self.turn.as_mut() {
                            t.phase = Phase::Sent;
                        }
                        if std::mem::take(&mut self.cut_pending)
                            && let Some(t) = &self.edits
                            && let Err(e) = t.set_cut(None)
                        {
                            tracing::warn!(session = %self.id, error = %e, "a cut that is done could not be forgotten");
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(session = %self.id, error = %e, "cannot send the prompt to the CLI");
                        cli.kill();
                        // Its end is ours to report now; queued turns start a new CLI.
                        self.cli = Cli::None;
                        self.fail_turn("cli_exited", &e.to_string(), ChatSessionError::Session(e));
                    }
                    Err(_) => {
                        tracing::warn!(session = %self.id, "the CLI did not take the prompt in time; killing it");
                        cli.kill();
                        self.cli = Cli::None;
                        let msg = "the Claude Code CLI stopped reading its input";
                        self.fail_turn("cli_stuck", msg, ChatSessionError::Start(msg.into()));
                    }
                }
            }
        }
    }

    /// Asks for a [`Task::pump`] on the next loop turn (for handlers that cannot await).
    /// Tells the model edge that the next message to the CLI is a human's: the request that
    /// carries it is the user's (a premium request on Copilot), and no other.
    fn report_human_message(&self) {
        if let Some(p) = &self.prompts {
            p.human_message(&self.id);
        }
    }

    pub(super) fn pump_later(&self) {
        let _ = self.internal_tx.send(Internal::Pump);
    }

    /// Ends the running turn with `actions` (its last action ends it in the state).
    pub(super) fn finish_turn(
        &mut self,
        end: Vec<StateAction>,
        outcome: Result<(), ChatSessionError>,
    ) {
        self.refuse_turn_waiting();
        self.clear_steering();
        if let Some(p) = &self.prompts {
            p.turn_ended(&self.id);
        }
        let failed = end.iter().any(|a| matches!(a, StateAction::ChatError(_)));
        self.chat_all(end);
        let Some(turn) = self.turn.take() else {
            return;
        };
        let st = if failed { status::ERROR } else { status::IDLE };
        self.session(actions::chat_status(&self.uris.chat.clone(), st));
        self.notice_status(st);
        if let Some(done) = turn.done {
            self.deliver(done, outcome.map(|()| turn.id.clone()));
        }
        self.save();
        self.next_queued();
    }

    pub(super) fn fail_turn(&mut self, kind: &str, message: &str, error: ChatSessionError) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let end = turn.mapper.fail(kind, message);
        self.finish_turn(end, Err(error));
    }

    pub(super) fn end_turn_with(&mut self, result: &ResultFrame) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let end = turn.mapper.finish(result);
        self.complete_turn(end);
    }

    /// Ends the running turn with `end`. A completion under a lease is held back until the
    /// mirror has stored the turn's lines (`Internal::Stored`): a client must not see a turn
    /// complete that the next host will not have. Without a lease (no shared store, or
    /// unleased by choice) it ends at once, as before.
    pub(super) fn complete_turn(&mut self, end: Vec<StateAction>) {
        let completes = end
            .iter()
            .any(|a| matches!(a, StateAction::ChatTurnComplete(_)));
        let mirror = self
            .durable
            .as_ref()
            .filter(|d| d.fence.is_some())
            .map(|d| d.mirror.clone());
        match (completes, mirror, self.turn.as_mut()) {
            (true, Some(mirror), Some(turn)) => {
                turn.storing = Some(end);
                let session = self.id.clone();
                let turn_id = turn.id.clone();
                let tx = self.internal_tx.clone();
                tokio::spawn(async move {
                    let result = mirror.stored(&session).await;
                    let _ = tx.send(Internal::Stored { turn_id, result });
                });
            }
            _ => self.finish_turn(end, Ok(())),
        }
    }

    /// The mirror answered for a completed turn held back for it.
    pub(super) fn turn_stored(&mut self, turn_id: &str, result: Result<(), String>) {
        let Some(turn) = self.turn.as_mut().filter(|t| t.id == turn_id) else {
            // The turn ended meanwhile (its lease was lost, it was cancelled).
            return;
        };
        let Some(end) = turn.storing.take() else {
            return;
        };
        match result {
            Ok(()) => self.finish_turn(end, Ok(())),
            Err(why) => {
                let message = format!(
                    "the turn finished but could not be stored in the shared session store ({why}); it is not complete"
                );
                tracing::error!(session = %self.id, turn = %turn_id, %message, "a completed turn was not stored");
                self.fail_turn(
                    "notStored",
                    &message,
                    ChatSessionError::Refused(message.clone()),
                );
            }
        }
    }

    /// Ends the running turn as cancelled now; the CLI is interrupted and its remaining frames
    /// of that turn are dropped until it settles (or it is killed after the grace period).
    pub(super) fn cancel_turn(&mut self, origin: Option<ActionOrigin>, echo: Option<StateAction>) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let sent = turn.phase == Phase::Sent;
        let end = match echo {
            Some(a) => {
                turn.mapper.cancel();
                vec![a]
            }
            None => turn.mapper.cancel(),
        };
        self.refuse_waiting();
        self.clear_steering();
        // The interrupt stops the subagents too; what they still print is dropped.
        self.end_all_subagents(|| subagents::ChildEnd::Cancelled);
        for a in end {
            self.publish(ChannelKind::Chat, a, origin.clone());
        }
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.session(actions::chat_status(&self.uris.chat.clone(), status::IDLE));
        self.notice_status(status::IDLE);
        if let Some(done) = turn.done {
            self.deliver(done, Ok(turn.id.clone()));
        }
        if sent && let Cli::Live(cli) = &self.cli {
            self.settling = Some(Settling {
                deadline: Instant::now() + self.abort_grace,
                killed: false,
            });
            let cli = cli.clone();
            tokio::spawn(async move {
                if let Err(e) = cli.interrupt().await {
                    tracing::warn!(error = %e, "the CLI did not take the interrupt");
                }
            });
        }
        self.save();
        self.next_queued();
    }

    /// Starts the next queued message as a turn, once the chat is idle.
    pub(super) fn next_queued(&mut self) {
        if self.turn.is_some() || self.closing {
            return;
        }
        let Some(q) = self.queue.pop_front() else {
            return;
        };
        self.chat(actions::pending_removed(PendingMessageKind::Queued, &q.id));
        self.turns_started += 1;
        let turn_id = crate::restore::new_turn_id();
        self.start_turn_from(turn_id, q.message, None, q.done, Some(q.id));
        self.pump_later();
    }

    pub(super) async fn steer(
        &mut self,
        id: &str,
        message: Message,
        origin: Option<ActionOrigin>,
        echo: Option<StateAction>,
    ) -> Result<(), String> {
        let cli = match (&self.cli, self.steerable()) {
            (Cli::Live(c), true) => c.clone(),
            _ => return Err("no turn is running to steer".into()),
        };
        let text = message.text.clone();
        let action =
            echo.unwrap_or_else(|| actions::pending_set(PendingMessageKind::Steering, id, message));
        self.publish(ChannelKind::Chat, action, origin);
        // The CLI takes the message's uuid as its transcript id: a restore names the turn
        // this prompt becomes after the client's id.
        let cli_uuid = crate::restore::prompt_uuid(id);
        self.steering.push(Steering {
            id: id.to_owned(),
            cli_uuid: cli_uuid.clone(),
        });
        self.report_human_message();
        let written = tokio::time::timeout(
            WRITE_TIMEOUT,
            cli.send_user(Value::String(text), Some(&cli_uuid), Some("now")),
        )
        .await;
        if matches!(written, Ok(Ok(()))) {
            if let Some(t) = self.turn.as_mut() {
                t.steered = true;
            }
        } else {
            self.steering.retain(|s| s.cli_uuid != cli_uuid);
            self.chat(actions::pending_removed(PendingMessageKind::Steering, id));
            tracing::warn!(session = %self.id, "a steering message could not be sent");
        }
        Ok(())
    }

    /// Whether a steering message has a running turn to land in.
    pub(super) fn steerable(&self) -> bool {
        matches!(self.cli, Cli::Live(_))
            && self.turn.as_ref().is_some_and(|t| t.phase == Phase::Sent)
    }

    /// Marks every steering message as handed over.
    pub(super) fn clear_steering(&mut self) {
        for s in std::mem::take(&mut self.steering) {
            self.chat(actions::pending_removed(
                PendingMessageKind::Steering,
                &s.id,
            ));
        }
    }
}
