//! Actions clients dispatch on the session's channels: each is carried out and echoed with
//! its origin, or refused with a reason, in order with everything else.

use super::*;

/// The longest title a client may set (titles are listed everywhere; generated ones are short).
const MAX_TITLE_CHARS: usize = 1_000;
/// The largest draft a client may store in a chat (pasted images included).
const MAX_DRAFT_BYTES: usize = 8 << 20;

impl Task {
    pub(super) async fn dispatch(
        &mut self,
        kind: ChannelKind,
        action: StateAction,
        origin: ActionOrigin,
        content: Option<Value>,
    ) {
        let copy = action.clone();
        let outcome = match (kind.clone(), action) {
            (ChannelKind::Chat, StateAction::ChatTurnStarted(a)) => {
                let accepted = self.client_turn(a, &origin, content);
                if accepted.is_ok() {
                    // Now, not on a later loop turn: with a live CLI the prompt is on its
                    // stdin before this command is done.
                    self.pump().await;
                }
                accepted
            }
            (
                k @ (ChannelKind::Chat | ChannelKind::Subagent(_)),
                StateAction::ChatToolCallConfirmed(a),
            ) => self.client_confirm(&k, a, &origin),
            (
                k @ (ChannelKind::Chat | ChannelKind::Subagent(_)),
                StateAction::ChatToolCallComplete(a),
            ) => self.client_complete(&k, a, &origin),
            (
                k @ (ChannelKind::Chat | ChannelKind::Subagent(_)),
                StateAction::ChatInputCompleted(a),
            ) => self.client_answer(&k, a, &origin),
            (ChannelKind::Chat, StateAction::ChatPendingMessageSet(a)) => {
                self.client_pending(a, &origin).await
            }
            (ChannelKind::Chat, StateAction::ChatPendingMessageRemoved(a)) => {
                self.client_unqueue(a, &origin)
            }
            (ChannelKind::Chat, StateAction::ChatQueuedMessagesReordered(a)) => {
                self.client_reorder(a, &origin)
            }
            (ChannelKind::Chat, StateAction::ChatTurnCancelled(a)) => {
                self.client_cancel(a, &origin)
            }
            (ChannelKind::Chat, StateAction::ChatTruncated(a)) => {
                self.truncate(
                    Keep::After(a.turn_id.clone()),
                    Some((StateAction::ChatTruncated(a), origin.clone())),
                )
                .await
            }
            (ChannelKind::Chat, StateAction::ChatDraftChanged(d))
                if serde_json::to_vec(&d).map_or(0, |v| v.len()) > MAX_DRAFT_BYTES =>
            {
                // A draft is kept in every snapshot of the chat, for every client.
                Err(format!(
                    "the draft is larger than {} MiB; attach large files instead of pasting them",
                    MAX_DRAFT_BYTES >> 20
                ))
            }
            (ChannelKind::Session, StateAction::SessionTitleChanged(t))
                if t.title.chars().count() > MAX_TITLE_CHARS =>
            {
                Err(format!(
                    "a title has at most {MAX_TITLE_CHARS} characters; this one has {}",
                    t.title.chars().count()
                ))
            }
            (
                ChannelKind::Chat,
                a @ (StateAction::ChatDraftChanged(_)
                | StateAction::ChatIsReadChanged(_)
                | StateAction::ChatIsArchivedChanged(_)
                | StateAction::ChatInputAnswerChanged(_)),
            ) => {
                // Typing a prompt: its CLI should be ready when it is sent.
                if let StateAction::ChatDraftChanged(d) = &a {
                    self.on_draft(d.draft.is_some());
                }
                self.publish(ChannelKind::Chat, a, Some(origin.clone()));
                Ok(())
            }
            (ChannelKind::Session, StateAction::SessionConfigChanged(mut a)) => {
                // VS Code's keys, mapped; the echo shows what they became.
                match config::map_client_keys(&mut a.config) {
                    Ok(()) => {
                        self.configure(PendingConfig {
                            values: a.config.clone(),
                            target: Settings::default(),
                            origin: Some(origin.clone()),
                            echo: Some(StateAction::SessionConfigChanged(a)),
                            reply: None,
                            for_turn: false,
                        });
                        Ok(())
                    }
                    Err(why) => Err(why),
                }
            }
            (ChannelKind::Session, StateAction::SessionTitleChanged(t)) => {
                let title = t.title.clone();
                self.publish(
                    ChannelKind::Session,
                    StateAction::SessionTitleChanged(t),
                    Some(origin.clone()),
                );
                let mut c = summary_changes();
                c.title = Some(title);
                self.notice(c);
                self.save();
                Ok(())
            }
            (ChannelKind::Session, StateAction::SessionIsArchivedChanged(x)) => {
                self.archived = x.is_archived;
                self.publish(
                    ChannelKind::Session,
                    StateAction::SessionIsArchivedChanged(x),
                    Some(origin.clone()),
                );
                self.save();
                Ok(())
            }
            (ChannelKind::Session, StateAction::SessionIsReadChanged(x)) => {
                self.read = x.is_read;
                self.publish(
                    ChannelKind::Session,
                    StateAction::SessionIsReadChanged(x),
                    Some(origin.clone()),
                );
                self.save();
                Ok(())
            }
            (
                ChannelKind::Session,
                a @ (StateAction::SessionActiveClientSet(_)
                | StateAction::SessionActiveClientRemoved(_)),
            ) => {
                let set = matches!(a, StateAction::SessionActiveClientSet(_));
                match &a {
                    StateAction::SessionActiveClientSet(s) => {
                        self.client_back(&s.active_client.client_id);
                    }
                    StateAction::SessionActiveClientRemoved(r) => self.client_left(&r.client_id),
                    _ => {}
                }
                self.publish(ChannelKind::Session, a, Some(origin.clone()));
                if set {
                    self.client_plugins_changed().await;
                }
                Ok(())
            }
            (ChannelKind::Session, StateAction::SessionCustomizationToggled(t)) => {
                self.on_toggle(t, &origin).await
            }
            (ChannelKind::Session, StateAction::SessionMcpServerStartRequested(r)) => {
                let id = r.id.clone();
                let a = StateAction::SessionMcpServerStartRequested(r);
                self.on_mcp_request(&id, true, a, &origin).await
            }
            (ChannelKind::Session, StateAction::SessionMcpServerStopRequested(r)) => {
                let id = r.id.clone();
                let a = StateAction::SessionMcpServerStopRequested(r);
                self.on_mcp_request(&id, false, a, &origin).await
            }
            (_, StateAction::Unknown(v)) => Err(format!(
                "{} is malformed or not an action this host knows",
                v.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("the action")
            )),
            (ChannelKind::Session, a) => Err(format!(
                "{} is not accepted on a session channel",
                actions::kind(&a)
            )),
            (ChannelKind::Chat, a) => Err(format!(
                "{} cannot be dispatched by a client",
                actions::kind(&a)
            )),
            (ChannelKind::Subagent(_), a) => Err(format!(
                "a subagent's chat is read-only: {} cannot be dispatched on it",
                actions::kind(&a)
            )),
            (ChannelKind::Terminal(uri), a) => match self.terminal_action(&uri, &a) {
                Ok(()) => {
                    self.publish(ChannelKind::Terminal(uri.clone()), a, Some(origin.clone()));
                    Ok(())
                }
                Err(why) => Err(why),
            },
            (ChannelKind::Changeset(_), a) => Err(format!(
                "{} is not accepted on a changeset; use invokeChangesetOperation",
                actions::kind(&a)
            )),
        };
        if let Err(why) = outcome {
            self.reject(kind, copy, origin, why);
        }
    }

    pub(super) fn client_turn(
        &mut self,
        a: ChatTurnStartedAction,
        origin: &ActionOrigin,
        content: Option<Value>,
    ) -> Result<(), String> {
        if a.turn_id.is_empty() {
            return Err("chat/turnStarted needs a turnId".into());
        }
        if self.turn.is_some() {
            return Err("a turn is already running in this chat".into());
        }
        if self.closing {
            return Err("the session is closing".into());
        }
        if let Some(agent) = &a.message.agent
            && self.agent_for(&agent.uri).is_none()
        {
            return Err(format!("no agent {} in this session", agent.uri));
        }
        // The model and effort picked for this turn become the session's.
        let mut values = JsonObject::new();
        if let Some(m) = &a.message.model {
            let model = self.normalize_model(&m.id);
            if self.settings.model.as_deref() != Some(model.as_str()) {
                values.insert(config::MODEL.into(), json!(model));
            }
            // VS Code sends the model's `thinkingLevel` option; other clients may say `effort`.
            let effort = m.config.as_ref().and_then(|c| {
                c.get(crate::models::THINKING_LEVEL)
                    .or_else(|| c.get(config::EFFORT))
            });
            if let Some(e) = effort
                && self.settings.effort.as_ref().map(|s| json!(s)).as_ref() != Some(e)
            {
                values.insert(config::EFFORT.into(), e.clone());
            }
        }
        if let Some(schema) = self.session.config.as_ref().map(|c| &c.schema) {
            config::check(schema, &values)?;
        }
        let turn_id = a.turn_id.clone();
        let message = a.message.clone();
        self.start_turn(
            turn_id,
            message,
            Some((StateAction::ChatTurnStarted(a), origin.clone())),
            None,
        );
        if let (Some(content), Some(t)) = (content, self.turn.as_mut()) {
            t.content = content;
        }
        if !values.is_empty() {
            self.configure(PendingConfig {
                values,
                target: Settings::default(),
                origin: None,
                echo: None,
                reply: None,
                for_turn: true,
            });
        }
        Ok(())
    }

    /// Refuses an answer dispatched on another chat than the one its request is in.
    fn in_its_chat(&self, kind: &ChannelKind, id: &str) -> Result<(), String> {
        match self.waiting.get(id) {
            Some(w) if w.chat() != kind => Err(format!(
                "{id} waits in another chat of this session; answer it there"
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn client_confirm(
        &mut self,
        kind: &ChannelKind,
        a: ChatToolCallConfirmedAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        self.in_its_chat(kind, &a.tool_call_id)?;
        let decision = if a.approved {
            Confirmation::Approve
        } else {
            Confirmation::Deny
        };
        let id = a.tool_call_id.clone();
        self.confirm(
            &id,
            decision,
            Some(origin.clone()),
            Some(StateAction::ChatToolCallConfirmed(a)),
        )
        .map_err(|e| e.to_string())
    }

    pub(super) fn client_answer(
        &mut self,
        kind: &ChannelKind,
        a: ChatInputCompletedAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        self.in_its_chat(kind, &a.request_id)?;
        let id = a.request_id.clone();
        let answer = InputReply {
            response: a.response,
            answers: a.answers.clone().unwrap_or_default(),
        };
        self.answer(
            &id,
            answer,
            Some(origin.clone()),
            Some(StateAction::ChatInputCompleted(a)),
        )
        .map_err(|e| e.to_string())
    }

    pub(super) async fn client_pending(
        &mut self,
        a: ChatPendingMessageSetAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        if a.id.is_empty() {
            return Err("a pending message needs an id".into());
        }
        match a.kind {
            PendingMessageKind::Steering if !self.steerable() => {
                // VS Code sends a message typed right after a stop as steering when it still
                // shows the cancelled turn running; with no turn to steer it runs as the next
                // turn (as a queued message would) instead of being refused and lost.
                tracing::info!(session = %self.id, "a steering message with no turn running; it starts a turn");
                let (id, message) = (a.id.clone(), a.message.clone());
                self.publish(
                    ChannelKind::Chat,
                    StateAction::ChatPendingMessageSet(a),
                    Some(origin.clone()),
                );
                self.chat(actions::pending_removed(PendingMessageKind::Steering, &id));
                self.queue.push_back(Queued {
                    id,
                    message,
                    done: None,
                });
                self.next_queued();
                Ok(())
            }
            PendingMessageKind::Steering => {
                let id = a.id.clone();
                let message = a.message.clone();
                self.steer(
                    &id,
                    message,
                    Some(origin.clone()),
                    Some(StateAction::ChatPendingMessageSet(a)),
                )
                .await
            }
            PendingMessageKind::Queued => {
                match self.queue.iter_mut().find(|q| q.id == a.id) {
                    Some(q) => q.message = a.message.clone(),
                    None => self.queue.push_back(Queued {
                        id: a.id.clone(),
                        message: a.message.clone(),
                        done: None,
                    }),
                }
                self.publish(
                    ChannelKind::Chat,
                    StateAction::ChatPendingMessageSet(a),
                    Some(origin.clone()),
                );
                self.next_queued();
                Ok(())
            }
        }
    }

    pub(super) fn client_unqueue(
        &mut self,
        a: ChatPendingMessageRemovedAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        if a.kind != PendingMessageKind::Queued {
            return Err("a steering message cannot be taken back once sent".into());
        }
        let before = self.queue.len();
        self.queue.retain(|q| q.id != a.id);
        if self.queue.len() == before {
            return Err(format!("no queued message {}", a.id));
        }
        self.publish(
            ChannelKind::Chat,
            StateAction::ChatPendingMessageRemoved(a),
            Some(origin.clone()),
        );
        Ok(())
    }

    pub(super) fn client_reorder(
        &mut self,
        a: ChatQueuedMessagesReorderedAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        let mut rest: Vec<Queued> = self.queue.drain(..).collect();
        for id in &a.order {
            if let Some(at) = rest.iter().position(|q| &q.id == id) {
                self.queue.push_back(rest.remove(at));
            }
        }
        self.queue.extend(rest);
        self.publish(
            ChannelKind::Chat,
            StateAction::ChatQueuedMessagesReordered(a),
            Some(origin.clone()),
        );
        Ok(())
    }

    pub(super) fn client_cancel(
        &mut self,
        a: ChatTurnCancelledAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        match &self.turn {
            Some(t) if t.id == a.turn_id => {
                self.cancel_turn(
                    Some(origin.clone()),
                    Some(StateAction::ChatTurnCancelled(a)),
                );
                Ok(())
            }
            // A cancel that raced the turn's end, or of a message still queued: harmless,
            // acknowledged (VS Code waits for the echo), and a queued message is dropped.
            _ => {
                let queued = self.queue.iter().any(|q| q.id == a.turn_id);
                if queued {
                    self.queue.retain(|q| q.id != a.turn_id);
                    self.chat(actions::pending_removed(
                        PendingMessageKind::Queued,
                        &a.turn_id,
                    ));
                }
                self.publish(
                    ChannelKind::Chat,
                    StateAction::ChatTurnCancelled(a),
                    Some(origin.clone()),
                );
                Ok(())
            }
        }
    }
}
