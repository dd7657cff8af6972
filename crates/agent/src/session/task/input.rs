//! The CLI's permission requests as pending confirmations and questions, settled by a client.

use super::*;

impl Task {
    pub(super) async fn on_permission(
        &mut self,
        generation: u64,
        request: CanUseTool,
        proposed: Option<crate::edits::FileChange>,
        reply: oneshot::Sender<PermissionResult>,
    ) {
        let live = match &self.cli {
            Cli::Live(c) if generation == self.generation => c.clone(),
            _ => {
                let _ = reply.send(deny("Session is no longer active"));
                return;
            }
        };
        // Everything the CLI wrote before this request is already queued: take it first, so
        // the tool call the request is about is in the state.
        while let Some(item) = live.try_recv_frame() {
            self.on_frame(Some(item)).await;
        }
        let id = request.tool_use_id.clone();
        let tool = request.tool_name.clone();
        tracing::debug!(session = %self.id, %tool, call = %id, "the CLI asks to use a tool");
        // A subagent's tool call is asked about in its chat.
        let (kind, turn_id) = match self.subagent_asking(&id, &tool) {
            Some(call) => (ChannelKind::Subagent(call.clone()), call),
            None => {
                let Some(turn) = self.turn.as_mut() else {
                    let _ = reply.send(deny("no turn in progress"));
                    return;
                };
                let turn_id = turn.id.clone();
                let start = turn.mapper.asked(&id, &tool);
                if let Some(a) = start {
                    self.publish_mapped(&ChannelKind::Chat, vec![a]);
                }
                (ChannelKind::Chat, turn_id)
            }
        };
        let chat_uri = match &kind {
            ChannelKind::Subagent(call) => subagent_chat_uri(&self.uris.session, call),
            _ => self.uris.chat.clone(),
        };
        if tool == "AskUserQuestion" {
            let req = questions::request(&id, &request.input);
            self.publish(kind.clone(), actions::input_requested(req.clone()), None);
            self.session(actions::chat_input_needed(&chat_uri, req));
            self.waiting.insert(
                id,
                Waiter::Question {
                    chat: kind,
                    reply,
                    input: request.input,
                },
            );
        } else {
            let plan = tool == "ExitPlanMode";
            let ready = if plan {
                // The CLI hands over an empty input; the plan is in the model's tool call.
                let text = request
                    .input
                    .get("plan")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| {
                        self.model_input(&id)
                            .and_then(|i| i.get("plan").and_then(Value::as_str).map(str::to_owned))
                    })
                    .unwrap_or_default();
                Ready {
                    invocation: text,
                    input: request.input.to_string(),
                    confirmed: None,
                    title: Some("Approve this plan and start editing?".into()),
                }
            } else {
                Ready {
                    invocation: request.description.clone().unwrap_or_else(|| tool.clone()),
                    input: request.input.to_string(),
                    confirmed: None,
                    title: Some(
                        request
                            .title
                            .clone()
                            .unwrap_or_else(|| format!("Allow {tool}?")),
                    ),
                }
            };
            let mut action = actions::tool_call_ready(&turn_id, &id, ready);
            if let (StateAction::ChatToolCallReady(r), Some(c)) = (&mut action, &proposed) {
                r.edits = Some(ahp_types::state::FileEditCollection {
                    items: vec![c.file_edit(&self.id)],
                });
            }
            self.publish_mapped(&kind, vec![action]);
            if let Some(call) = self.pending_call(&kind, &id) {
                self.session(actions::tool_confirmation_needed(&chat_uri, &turn_id, call));
            }
            self.waiting.insert(
                id,
                Waiter::Tool {
                    chat: kind,
                    turn_id,
                    reply,
                    always: session_rule(&tool, &request.extra),
                    input: request.input,
                    plan,
                },
            );
        }
        self.notice_status(status::INPUT_NEEDED);
    }

    /// The running turn's tool call `id`, when it waits for a confirmation.
    pub(super) fn pending_call(
        &self,
        kind: &ChannelKind,
        id: &str,
    ) -> Option<ToolCallConfirmationState> {
        let chat = match kind {
            ChannelKind::Subagent(call) => self.subagent_chat(call)?,
            _ => &self.chat,
        };
        chat.active_turn
            .as_ref()?
            .response_parts
            .iter()
            .find_map(|p| match p {
                ResponsePart::ToolCall(c) => match &c.tool_call {
                    ToolCallState::PendingConfirmation(s) if s.tool_call_id == id => {
                        Some(ToolCallConfirmationState::PendingConfirmation(s.clone()))
                    }
                    _ => None,
                },
                _ => None,
            })
    }

    /// The input of a tool call of the running turn, as the model sent it.
    pub(super) fn model_input(&self, id: &str) -> Option<Value> {
        let parts = &self.chat.active_turn.as_ref()?.response_parts;
        parts.iter().find_map(|p| {
            let ResponsePart::ToolCall(c) = p else {
                return None;
            };
            let input = match &c.tool_call {
                ToolCallState::Running(s) if s.tool_call_id == id => s.tool_input.as_ref(),
                ToolCallState::PendingConfirmation(s) if s.tool_call_id == id => {
                    s.tool_input.as_ref()
                }
                ToolCallState::Completed(s) if s.tool_call_id == id => s.tool_input.as_ref(),
                _ => None,
            }?;
            match input {
                ToolInput::Inline(text) => serde_json::from_str(text).ok(),
                ToolInput::ContentRef(_) => None,
            }
        })
    }

    pub(super) fn confirm(
        &mut self,
        id: &str,
        decision: Confirmation,
        origin: Option<ActionOrigin>,
        echo: Option<StateAction>,
    ) -> Result<(), ChatSessionError> {
        let Some(Waiter::Tool {
            chat,
            turn_id,
            reply,
            input,
            plan,
            always,
        }) = self.take_waiter(id, true)
        else {
            return Err(ChatSessionError::NotPending(id.to_owned()));
        };
        let approved = decision != Confirmation::Deny;
        let result = match (approved, plan) {
            (true, false) => PermissionResult::Allow {
                updated_input: input,
                updated_permissions: (decision == Confirmation::ApproveForSession)
                    .then_some(always),
            },
            // The CLI applies the mode change itself; asking it to from inside its own
            // permission callback would deadlock its control channel.
            (true, true) => PermissionResult::Allow {
                updated_input: input,
                updated_permissions: Some(json!([{"type": "setMode",
                    "mode": "acceptEdits", "destination": "session"}])),
            },
            (false, false) => deny(DECLINED),
            (false, true) => deny(PLAN_DECLINED),
        };
        let _ = reply.send(result);
        let action = echo.unwrap_or_else(|| actions::tool_call_confirmed(&turn_id, id, approved));
        self.publish(chat, action, origin);
        self.session(actions::input_needed_removed(id));
        if plan && approved {
            self.settings.permission_mode = Some("acceptEdits".into());
            self.cli_settings.permission_mode = Some("acceptEdits".into());
            let mut v = JsonObject::new();
            v.insert(config::PERMISSION_MODE.into(), json!("acceptEdits"));
            self.session(actions::config_changed(v));
        }
        if self.waiting.is_empty() {
            self.notice_status(status::IN_PROGRESS);
        }
        Ok(())
    }

    pub(super) fn answer(
        &mut self,
        id: &str,
        answer: InputReply,
        origin: Option<ActionOrigin>,
        echo: Option<StateAction>,
    ) -> Result<(), ChatSessionError> {
        let Some(Waiter::Question { chat, reply, input }) = self.take_waiter(id, false) else {
            return Err(ChatSessionError::NotPending(id.to_owned()));
        };
        let result = if answer.response == ChatInputResponseKind::Accept {
            PermissionResult::Allow {
                updated_input: questions::answered_input(input, &answer.answers),
                updated_permissions: None,
            }
        } else {
            deny(QUESTION_CANCELLED)
        };
        let _ = reply.send(result);
        let action = echo.unwrap_or_else(|| {
            actions::input_completed(id, answer.response, answer.answers.clone())
        });
        self.publish(chat, action, origin);
        self.session(actions::input_needed_removed(id));
        if self.waiting.is_empty() {
            self.notice_status(status::IN_PROGRESS);
        }
        Ok(())
    }

    /// Takes a waiter of the right kind (a tool confirmation, or a question).
    pub(super) fn take_waiter(&mut self, id: &str, tool: bool) -> Option<Waiter> {
        let matches = match self.waiting.get(id)? {
            Waiter::Tool { .. } => tool,
            Waiter::Question { .. } => !tool,
        };
        if matches {
            self.waiting.remove(id)
        } else {
            None
        }
    }

    /// Refuses everything parked: tools denied, questions cancelled, each shown.
    pub(super) fn refuse_waiting(&mut self) {
        let parked: Vec<(String, Waiter)> = self.waiting.drain().collect();
        self.refuse_parked(parked);
        self.refuse_client_calls(client::Unanswered::Cancelled, false);
    }

    /// Refuses what the main chat's turn left parked; a background subagent's requests
    /// outlive it.
    pub(super) fn refuse_turn_waiting(&mut self) {
        let ids: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, w)| *w.chat() == ChannelKind::Chat)
            .map(|(id, _)| id.clone())
            .collect();
        let parked = ids
            .into_iter()
            .filter_map(|id| self.waiting.remove(&id).map(|w| (id, w)))
            .collect();
        self.refuse_parked(parked);
        self.refuse_client_calls(client::Unanswered::Cancelled, true);
    }

    fn refuse_parked(&mut self, parked: Vec<(String, Waiter)>) {
        for (id, w) in parked {
            self.refuse(&id, w);
        }
    }

    pub(super) fn refuse(&mut self, id: &str, w: Waiter) {
        match w {
            Waiter::Tool {
                chat,
                turn_id,
                reply,
                ..
            } => {
                let _ = reply.send(deny(DECLINED));
                self.publish(
                    chat,
                    actions::tool_call_confirmed(&turn_id, id, false),
                    None,
                );
            }
            Waiter::Question { chat, reply, .. } => {
                let _ = reply.send(deny(QUESTION_CANCELLED));
                self.publish(
                    chat,
                    actions::input_completed(id, ChatInputResponseKind::Cancel, HashMap::new()),
                    None,
                );
            }
        }
        self.session(actions::input_needed_removed(id));
    }
}

/// The permission update that allows calls like this one from now on: the CLI's own
/// `permission_suggestions` when it made some (the narrowest rule, such as the command, where
/// Claude Code would keep it), else a rule allowing the tool for the session.
fn session_rule(tool: &str, extra: &claude_host_protocol::frames::Extra) -> Value {
    match extra.get("permission_suggestions") {
        Some(Value::Array(s)) if !s.is_empty() => Value::Array(s.clone()),
        _ => json!([{"type": "addRules", "rules": [{"toolName": tool}],
            "behavior": "allow", "destination": "session"}]),
    }
}
