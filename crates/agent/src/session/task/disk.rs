//! What touches the disk: truncating and forking the transcript, and the store's overlay.

use super::*;

impl Task {
    pub(super) fn config_dir(&self) -> Option<PathBuf> {
        claude_host_sdk::transcripts::config_dir(
            self.opts.config_dir.as_deref(),
            &self.opts.extra_env,
        )
    }

    /// The uuid of the last transcript entry of the first `keep_turns` turns (`None`: keep
    /// everything).
    pub(super) async fn anchor(&self, keep_turns: usize) -> Result<Option<String>, String> {
        if !self.resumable {
            return Err("the session has no transcript yet".into());
        }
        let config = self
            .config_dir()
            .ok_or_else(|| "no Claude config directory".to_owned())?;
        let id = self.id.clone();
        tokio::task::spawn_blocking(move || {
            let index = claude_host_sdk::transcripts::TranscriptIndex::of_session(&config, &id)
                .map_err(|e| e.to_string())?;
            let chain = index.main_chain();
            // Turns start at human prompts: cut just before the first prompt not kept.
            let mut prompts = 0;
            let mut next_prompt = None;
            for (at, &i) in chain.iter().enumerate() {
                if !index.is_user(i) {
                    continue;
                }
                let e = index.entry(i).map_err(|e| e.to_string())?;
                if e.as_ref().is_some_and(crate::restore::is_prompt_entry) {
                    if prompts == keep_turns {
                        next_prompt = Some(at);
                        break;
                    }
                    prompts += 1;
                }
            }
            match next_prompt {
                None => Ok(None),
                Some(0) => Err("cannot cut the session before its first turn".to_owned()),
                Some(at) => index
                    .entry(chain[at - 1])
                    .map_err(|e| e.to_string())?
                    .and_then(|e| e.get("uuid").and_then(Value::as_str).map(str::to_owned))
                    .map(Some)
                    .ok_or_else(|| "the transcript entry has no uuid".to_owned()),
            }
        })
        .await
        .map_err(|e| format!("reading the transcript failed: {e}"))?
    }

    pub(super) async fn truncate(
        &mut self,
        keep: Keep,
        echo: Option<(StateAction, ActionOrigin)>,
    ) -> Result<(), String> {
        if self.turn.is_some() {
            return Err("cannot truncate while a turn is running".into());
        }
        let keep_turns = match keep {
            Keep::Turns(n) => n,
            Keep::After(None) => 0,
            Keep::After(Some(id)) => self
                .chat
                .turns
                .iter()
                .position(|t| t.id == id)
                .map(|i| i + 1)
                .ok_or_else(|| format!("no turn {id}"))?,
        };
        let kept_turn = keep_turns
            .checked_sub(1)
            .and_then(|i| self.chat.turns.get(i))
            .map(|t| t.id.clone());
        if keep_turns < self.chat.turns.len() {
            if keep_turns == 0 {
                // Nothing is kept: the next turn starts the Claude session afresh.
                self.stop_cli().await;
                if let (Some(config), true) = (self.config_dir(), self.resumable) {
                    let id = self.id.clone();
                    let deleted = tokio::task::spawn_blocking(move || {
                        claude_host_sdk::transcripts::delete_session(&config, &id)
                    })
                    .await;
                    if !matches!(deleted, Ok(Ok(()))) {
                        tracing::warn!(session = %self.id, "could not delete the truncated session's transcript");
                    }
                }
                self.resumable = false;
                self.resume_at = None;
            } else {
                self.resume_at = self.anchor(keep_turns).await?;
                if let (Some(t), Some(anchor)) = (&self.edits, &self.resume_at) {
                    match t.set_cut(Some((anchor, keep_turns))) {
                        Ok(()) => self.cut_pending = true,
                        Err(e) => {
                            tracing::warn!(session = %self.id, error = %e, "the cut is not kept past this process")
                        }
                    }
                }
                self.restart_needed = true;
            }
        }
        let cut: Vec<String> = self
            .chat
            .turns
            .iter()
            .skip(keep_turns)
            .map(|t| t.id.clone())
            .collect();
        self.drop_edits_of(&cut.iter().map(String::as_str).collect());
        match echo {
            Some((action, origin)) => self.publish(ChannelKind::Chat, action, Some(origin)),
            None => self.chat(StateAction::ChatTruncated(ChatTruncatedAction {
                turn_id: kept_turn,
            })),
        }
        self.prune_subagents();
        Ok(())
    }

    pub(super) async fn fork(
        &mut self,
        keep_turns: usize,
    ) -> Result<ForkedSession, ChatSessionError> {
        if keep_turns == 0 {
            return Err(ChatSessionError::Refused(
                "cannot fork before the first turn".into(),
            ));
        }
        let up_to = self
            .anchor(keep_turns)
            .await
            .map_err(ChatSessionError::Refused)?;
        let config = self
            .config_dir()
            .ok_or_else(|| ChatSessionError::Refused("no Claude config directory".into()))?;
        let id = self.id.clone();
        let new_id = tokio::task::spawn_blocking(move || {
            claude_host_sdk::transcripts::fork_session(&config, &id, up_to.as_deref())
        })
        .await
        .map_err(|e| ChatSessionError::Refused(e.to_string()))?
        .map_err(|e| ChatSessionError::Refused(e.to_string()))?;
        Ok(ForkedSession {
            id: new_id,
            model: self.settings.model.clone(),
            effort: self.settings.effort.clone(),
            permission_mode: self.settings.permission_mode.clone(),
        })
    }

    /// Writes the overlay (off the task: the writer keeps only the latest record).
    pub(super) fn save(&mut self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Overlay::Known(existing) = &self.overlay else {
            return;
        };
        // Nothing is written for a session that never ran (it has no transcript).
        if existing.is_none() && !self.resumable {
            return;
        }
        let record = SessionRecord {
            id: self.id.clone(),
            resource: Some(self.uris.session.clone()),
            title: Some(self.session.title.clone()).filter(|t| !t.is_empty()),
            model: self.settings.model.clone(),
            effort: self.settings.effort.clone(),
            permission_mode: self.settings.permission_mode.clone(),
            cwd: self
                .working_directories
                .first()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            created_at: existing.as_ref().map_or(self.created_at, |r| r.created_at),
            updated_at: now_millis(),
            archived: self.archived,
            read: self.read,
            host: self.durable.as_ref().map(|d| d.host.clone()),
            decisions: self.durable.as_ref().and_then(|_| self.decisions_json()),
        };
        self.overlay = Overlay::Known(Some(record.clone()));
        self.saved += 1;
        let writer = self.writer.get_or_insert_with(|| {
            let (records, mut rx) = watch::channel::<Option<(u64, SessionRecord)>>(None);
            let (done, written) = watch::channel(0u64);
            let fence = self.durable.as_ref().and_then(|d| d.fence.clone());
            let job = tokio::spawn(async move {
                while rx.changed().await.is_ok() {
                    let next = rx.borrow_and_update().clone();
                    let Some((version, r)) = next else { continue };
                    if let Err(e) = store.put(&r, fence.as_ref()).await {
                        tracing::warn!(session = %r.id, error = %e, "could not save the session overlay");
                    }
                    let _ = done.send(version);
                }
            });
            Writer {
                records,
                written,
                job,
            }
        });
        let _ = writer.records.send(Some((self.saved, record)));
    }

    /// Replies once every record saved so far has been written.
    pub(super) fn flush(&self, reply: oneshot::Sender<()>) {
        let Some(w) = &self.writer else {
            let _ = reply.send(());
            return;
        };
        let mut written = w.written.clone();
        let target = self.saved;
        tokio::spawn(async move {
            // A writer that ended has written all it ever will.
            let _ = written.wait_for(|v| *v >= target).await;
            let _ = reply.send(());
        });
    }
}
