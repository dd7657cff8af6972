//! Model, effort and permission mode: checked against the config schema, applied to the live
//! CLI by a job, then shown.

use super::*;

impl Task {
    pub(super) fn normalize_model(&self, model: &str) -> String {
        self.models
            .iter()
            .find(|m| {
                m.id == model
                    || m.meta
                        .as_ref()
                        .and_then(|x| x.get("sdkId"))
                        .and_then(Value::as_str)
                        == Some(model)
            })
            .map_or_else(|| model.to_owned(), |m| m.id.clone())
    }

    pub(super) fn configure(&mut self, mut pending: PendingConfig) {
        if let Some(Value::String(m)) = pending.values.get(config::MODEL) {
            let m = self.normalize_model(m);
            pending.values.insert(config::MODEL.into(), json!(m));
        }
        let checked = match self.session.config.as_ref() {
            Some(c) => config::check(&c.schema, &pending.values),
            None => Ok(()),
        };
        if let Err(why) = checked {
            self.refuse_config(pending, why);
            return;
        }
        if self.applying.is_some() {
            self.config_queue.push_back(pending);
            return;
        }
        let mut target = self.settings.clone();
        let text = |v: &Value| v.as_str().map(str::to_owned);
        if let Some(v) = pending.values.get(config::MODEL) {
            target.model = text(v);
        }
        if let Some(v) = pending.values.get(config::EFFORT) {
            target.effort = text(v);
        }
        if let Some(v) = pending.values.get(config::PERMISSION_MODE) {
            target.permission_mode = text(v);
        }
        pending.target = target;
        match &self.cli {
            Cli::Live(cli) if pending.target != self.cli_settings => {
                let job = self.apply_job(cli.clone(), pending.target.clone());
                self.applying = Some(pending);
                tokio::spawn(job);
            }
            _ => self.commit_config(pending),
        }
    }

    pub(super) fn apply_job(
        &self,
        cli: Arc<ClaudeSession>,
        to: Settings,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let from = self.cli_settings.clone();
        let tx = self.internal_tx.clone();
        let generation = self.generation;
        async move {
            let result = async {
                if from.model != to.model {
                    cli.set_model(to.model.as_deref()).await?;
                }
                if from.effort != to.effort {
                    cli.set_effort(to.effort.as_deref()).await?;
                }
                if from.permission_mode != to.permission_mode {
                    cli.set_permission_mode(to.permission_mode.as_deref().unwrap_or("default"))
                        .await?;
                }
                Ok::<(), claude_host_sdk::ControlError>(())
            }
            .await
            .map_err(|e| e.to_string());
            let _ = tx.send(Internal::Applied { generation, result });
        }
    }

    /// A live CLI started while settings changed: bring it up to date before any prompt.
    pub(super) fn sync_settings(&mut self) {
        if self.applying.is_some() || self.settings == self.cli_settings {
            return;
        }
        if let Cli::Live(cli) = &self.cli {
            let job = self.apply_job(cli.clone(), self.settings.clone());
            self.applying = Some(PendingConfig {
                values: JsonObject::new(),
                target: self.settings.clone(),
                origin: None,
                echo: None,
                reply: None,
                for_turn: false,
            });
            tokio::spawn(job);
        }
    }

    pub(super) fn applied(&mut self, generation: u64, result: Result<(), String>) {
        let Some(pending) = self.applying.take() else {
            return;
        };
        let same_cli = generation == self.generation && matches!(self.cli, Cli::Live(_));
        match result {
            Ok(()) => {
                if same_cli {
                    self.cli_settings = pending.target.clone();
                }
                self.commit_config(pending);
            }
            // That CLI is gone: the next one starts with the new settings.
            Err(_) if !same_cli => self.commit_config(pending),
            Err(e) => {
                tracing::warn!(session = %self.id, error = %e, "the CLI refused a settings change");
                if pending.for_turn {
                    let msg = format!("could not switch the model or effort for this turn: {e}");
                    self.fail_turn(
                        "config_refused",
                        &msg,
                        ChatSessionError::Refused(msg.clone()),
                    );
                }
                self.refuse_config(pending, format!("the CLI refused it: {e}"));
            }
        }
        while self.applying.is_none()
            && let Some(next) = self.config_queue.pop_front()
        {
            self.configure(next);
        }
    }

    pub(super) fn commit_config(&mut self, pending: PendingConfig) {
        if pending.values.is_empty() && pending.echo.is_none() {
            // A sync of a new CLI: the state already shows these settings.
            if let Some(r) = pending.reply {
                self.deliver(r, Ok(()));
            }
            return;
        }
        self.settings = pending.target;
        let action = pending
            .echo
            .unwrap_or_else(|| actions::config_changed(pending.values));
        self.publish(ChannelKind::Session, action, pending.origin);
        if let Some(r) = pending.reply {
            self.deliver(r, Ok(()));
        }
        self.save();
    }

    pub(super) fn refuse_config(&mut self, pending: PendingConfig, why: String) {
        if let Some(r) = pending.reply {
            self.deliver(r, Err(ChatSessionError::Refused(why.clone())));
        }
        if let (Some(echo), Some(origin)) = (pending.echo, pending.origin) {
            self.reject(ChannelKind::Session, echo, origin, why);
        }
    }
}
