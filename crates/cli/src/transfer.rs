//! `sessions export` / `sessions import`: one session as a JSONL file, to move it by hand.
//!
//! Line 1 is a header (`{"type":"claude-host-session","version":1,"sessionId","projectKey",
//! "record"}`); every other line is one transcript entry, `{"subpath":null|"subagents/…",
//! "entry":{…}}`, in transcript order.

use anyhow::{Context as _, bail};
use claude_host_agent::mirror::{file_for, key_for, mirrored_lines, write_transcript};
use claude_host_store::{Database, SessionRecord, Store, TranscriptKey};
use serde_json::{Value, json};
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

const KIND: &str = "claude-host-session";
const VERSION: u64 = 1;

/// A session's transcripts: the main one first, then each subpath.
type Transcripts = Vec<(Option<String>, Vec<String>)>;

fn record_json(r: &SessionRecord) -> Value {
    json!({"id": r.id, "resource": r.resource, "title": r.title, "model": r.model, "effort": r.effort,
           "permission_mode": r.permission_mode, "cwd": r.cwd, "created_at": r.created_at,
           "updated_at": r.updated_at, "archived": r.archived, "read": r.read})
}

fn record_from(v: &Value, id: &str) -> Option<SessionRecord> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(SessionRecord {
        id: id.to_owned(),
        resource: s("resource"),
        title: s("title"),
        model: s("model"),
        effort: s("effort"),
        permission_mode: s("permission_mode"),
        cwd: s("cwd").unwrap_or_default(),
        created_at: v.get("created_at")?.as_i64()?,
        updated_at: v.get("updated_at")?.as_i64()?,
        archived: v.get("archived").and_then(Value::as_bool).unwrap_or(false),
        read: v.get("read").and_then(Value::as_bool).unwrap_or(false),
        host: None,
        decisions: None,
    })
}

/// The session's transcripts from this host's disk, else from the shared database.
async fn gather(
    config: &Path,
    db: Option<&Database>,
    id: &str,
) -> anyhow::Result<(String, Transcripts)> {
    let projects = config.join("projects");
    if let Ok(main) = claude_host_sdk::transcripts::find_session(config, id) {
        let key = key_for(&projects, &main)
            .with_context(|| format!("{} is not a session transcript", main.display()))?;
        let mut out = vec![(None, mirrored_lines(&main)?)];
        let mut subs = Vec::new();
        walk(&main.with_extension(""), &mut subs);
        subs.sort();
        for path in subs {
            if let Some(k) = key_for(&projects, &path) {
                out.push((k.subpath, mirrored_lines(&path)?));
            }
        }
        return Ok((key.project_key, out));
    }
    let Some(db) = db else {
        bail!("no session {id} under {}", projects.display());
    };
    let t = &db.transcripts;
    let project = t
        .project_of(id)
        .await?
        .with_context(|| format!("no session {id} here or in the shared database"))?;
    let main = TranscriptKey::main(&project, id);
    let mut out = vec![(None, t.load(&main).await?.unwrap_or_default())];
    for sub in t.list_subkeys(&project, id).await? {
        let key = TranscriptKey {
            subpath: Some(sub.clone()),
            ..main.clone()
        };
        out.push((Some(sub), t.load(&key).await?.unwrap_or_default()));
    }
    Ok((project, out))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().and_then(|x| x.to_str()) == Some("jsonl") {
            out.push(p);
        }
    }
}

/// `sessions export ID [--out FILE]`.
pub(crate) async fn export(
    config: &Path,
    db: Option<&Database>,
    store: Arc<dyn Store>,
    id: &str,
    out: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let (project, transcripts) = gather(config, db, id).await?;
    let record = store.get(id).await.ok().flatten();
    let mut text = json!({"type": KIND, "version": VERSION, "sessionId": id, "projectKey": project,
                          "record": record.as_ref().map(record_json)})
    .to_string();
    text.push('\n');
    let mut entries = 0;
    for (subpath, lines) in &transcripts {
        for line in lines {
            let entry: Value = serde_json::from_str(line)
                .with_context(|| format!("a transcript line of {id} is not JSON"))?;
            text.push_str(&json!({"subpath": subpath, "entry": entry}).to_string());
            text.push('\n');
            entries += 1;
        }
    }
    match out {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    eprintln!(
        "Exported session {id}: {entries} entries, {} subagent transcripts.",
        transcripts.len() - 1
    );
    Ok(ExitCode::SUCCESS)
}

/// `sessions import FILE [--force]`.
pub(crate) async fn import(
    config: &Path,
    db: Option<&Database>,
    store: Arc<dyn Store>,
    file: &Path,
    force: bool,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let reader: Box<dyn std::io::BufRead> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?,
        ))
    };
    let mut lines = reader.lines();
    let header: Value = serde_json::from_str(&lines.next().transpose()?.unwrap_or_default())
        .ok()
        .filter(|h: &Value| h.get("type").and_then(Value::as_str) == Some(KIND))
        .with_context(|| {
            format!(
                "{} is not a claude-host session export (its first line is not a {KIND} header)",
                file.display()
            )
        })?;
    if header.get("version").and_then(Value::as_u64) != Some(VERSION) {
        bail!(
            "{} is a session export of version {}; this claude-host reads version {VERSION}",
            file.display(),
            header.get("version").unwrap_or(&Value::Null)
        );
    }
    let field = |k: &str| {
        header
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("the export's header has no {k}"))
    };
    let id = field("sessionId")?;
    let project = field("projectKey")?;
    let mut transcripts: Vec<(TranscriptKey, Vec<String>)> = Vec::new();
    for (n, line) in lines.enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line)
            .with_context(|| format!("line {} of {} is not JSON", n + 2, file.display()))?;
        let subpath = v.get("subpath").and_then(Value::as_str).map(str::to_owned);
        let entry = v
            .get("entry")
            .with_context(|| format!("line {} of {} has no entry", n + 2, file.display()))?
            .to_string();
        let key = TranscriptKey {
            project_key: project.clone(),
            session_id: id.clone(),
            subpath,
        };
        key.validate()?;
        match transcripts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, lines)) => lines.push(entry),
            None => transcripts.push((key, vec![entry])),
        }
    }
    if !transcripts.iter().any(|(k, _)| k.subpath.is_none()) {
        bail!("{} holds no main transcript for {id}", file.display());
    }
    let projects = config.join("projects");
    let main_file = file_for(&projects, &TranscriptKey::main(&project, &id));
    if !force && claude_host_sdk::transcripts::find_session(config, &id).is_ok() {
        bail!("session {id} is already here; --force replaces it");
    }
    let mut entries = 0;
    for (key, lines) in &transcripts {
        let path = file_for(&projects, key);
        write_transcript(&path, lines)
            .with_context(|| format!("cannot write {}", path.display()))?;
        entries += lines.len();
    }
    // With a shared database, the import is a writer like any host: it takes the session's
    // lease (refused while another host drives it), writes under it and gives it back.
    let lease = match db {
        Some(db) => Some(
            db.leases
                .acquire(
                    &id,
                    &crate::setup::host_name(),
                    std::time::Duration::from_secs(60),
                )
                .await
                .with_context(|| format!("cannot import session {id} into the shared database"))?,
        ),
        None => None,
    };
    let fence = lease.as_ref().map(claude_host_store::Lease::fence);
    if let Some(db) = db {
        if force {
            db.transcripts
                .delete(&TranscriptKey::main(&project, &id))
                .await?;
        }
        for (key, lines) in &transcripts {
            for chunk in lines.chunks(500) {
                db.transcripts.append(key, chunk, fence.as_ref()).await?;
            }
        }
    }
    if let Some(r) = header.get("record").and_then(|r| record_from(r, &id)) {
        store.put(&r, fence.as_ref()).await?;
    }
    if let (Some(db), Some(fence)) = (db, &fence) {
        db.leases.release(&id, fence).await?;
    }
    if as_json {
        println!(
            "{}",
            json!({"imported": id, "entries": entries, "path": main_file})
        );
    } else {
        println!(
            "Imported session {id} ({entries} entries) into {}.",
            main_file.display()
        );
        eprintln!("Resume it with: claude-host run --resume {id}");
    }
    Ok(ExitCode::SUCCESS)
}
