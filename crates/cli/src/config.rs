//! The config file: `$XDG_CONFIG_HOME/claude-host/config.toml` (or `~/.config/…`, or the file
//! `CLAUDE_HOST_CONFIG` names), holding any option that has a flag.
//!
//! Keys are the long flags (`upstream = "copilot"`, `cli-idle-secs = 0`); a subcommand's
//! options go in its table (`[serve]`, `[sessions.list]`). clap already orders a flag before
//! its environment variable before its default; a file value becomes the option's default, so
//! the order is flag > environment > file > built-in default with no second parser of options,
//! and each file value goes through the option's own value parser. Reading the file takes the
//! `toml` crate alone (docs/CONFIG.md says why not figment or config).

use anyhow::{Context as _, anyhow, bail};
use clap::builder::Resettable;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Names the file instead of the XDG location.
pub(crate) const CONFIG_ENV: &str = "CLAUDE_HOST_CONFIG";

/// Where the config file is read from: `CLAUDE_HOST_CONFIG`, else
/// `$XDG_CONFIG_HOME/claude-host/config.toml`, else `~/.config/claude-host/config.toml`.
pub(crate) fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    // The XDG spec ignores a relative value.
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::home_dir().map(|h| h.join(".config")))?;
    Some(base.join("claude-host").join("config.toml"))
}

/// One option the file set: the subcommand path (empty at the top level) and the option's id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FileSetting {
    pub path: Vec<String>,
    pub id: String,
}

/// The config file as read and applied.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The file, whether or not it exists.
    pub path: Option<PathBuf>,
    /// Whether it exists.
    pub found: bool,
    /// The options whose default it replaced (left out when a flag or environment variable
    /// conflicting with them was given).
    pub applied: BTreeSet<FileSetting>,
    /// Every option it sets, applied or not, with its values.
    pub settings: Vec<(FileSetting, Vec<String>)>,
}

/// Parses the command line with the config file's values as defaults: `Err` for a file that
/// cannot be read, is not TOML or names an option that does not exist; clap's own errors
/// (and `--help`) exit as usual.
pub(crate) fn parse_args(
    cmd: Command,
    args: Vec<OsString>,
) -> anyhow::Result<(ArgMatches, Command, Loaded)> {
    let path = config_path();
    let text = match &path {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
        },
        None => None,
    };
    let mut loaded = Loaded {
        found: text.is_some(),
        path: path.clone(),
        ..Loaded::default()
    };
    let Some(text) = text else {
        let matches = cmd.clone().get_matches_from(args);
        return Ok((matches, cmd, loaded));
    };
    let file = path.unwrap_or_default();
    loaded.settings = read(&cmd, &file, &text)?;
    // A file value stands back for a flag or variable that conflicts with its option, as it
    // would for the option itself: the command line is parsed once without the file to see
    // what was given (clap does not hold a default against a conflicting option).
    let given = cmd.clone().try_get_matches_from(args.clone()).ok();
    let mut with_file = cmd;
    for (setting, values) in &loaded.settings {
        if let Some(given) = &given
            && conflicts_given(&with_file, given, setting)
        {
            continue;
        }
        with_file = apply(with_file, &setting.path, &setting.id, values);
        loaded.applied.insert(setting.clone());
    }
    let matches = with_file.clone().get_matches_from(args);
    Ok((matches, with_file, loaded))
}

/// Reads and checks the file against the options of `cmd`.
fn read(cmd: &Command, file: &Path, text: &str) -> anyhow::Result<Vec<(FileSetting, Vec<String>)>> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        anyhow!("{}: {}", file.display(), e.to_string().trim_end())
    })?;
    let mut out = Vec::new();
    walk(cmd, &mut Vec::new(), &table, file, text, &mut out)?;
    Ok(out)
}

fn walk(
    cmd: &Command,
    path: &mut Vec<String>,
    table: &toml::Table,
    file: &Path,
    text: &str,
    out: &mut Vec<(FileSetting, Vec<String>)>,
) -> anyhow::Result<()> {
    for (key, value) in table {
        let at = || key_location(file, text, path, key);
        if let Some(sub) = cmd.find_subcommand(key) {
            let toml::Value::Table(inner) = value else {
                bail!(
                    "{}: `{key}` is a subcommand: its options go in a table, `[{}]`",
                    at(),
                    dotted(path, key)
                );
            };
            path.push(key.clone());
            walk(sub, path, inner, file, text, out)?;
            path.pop();
            continue;
        }
        let Some(arg) = settable(cmd).find(|a| a.get_long() == Some(key.as_str())) else {
            let scope = if path.is_empty() {
                "claude-host".to_owned()
            } else {
                format!("`claude-host {}`", path.join(" "))
            };
            let known: Vec<&str> = settable(cmd).filter_map(Arg::get_long).collect();
            bail!(
                "{}: unknown key `{key}`: {scope} has no option --{key} (its options: {})",
                at(),
                known.join(", ")
            );
        };
        let values = values_of(arg, value).map_err(|why| anyhow!("{}: `{key}` {why}", at()))?;
        check(arg, &values).map_err(|why| anyhow!("{}: `{key}`: {why}", at()))?;
        out.push((
            FileSetting {
                path: path.clone(),
                id: arg.get_id().to_string(),
            },
            values,
        ));
    }
    Ok(())
}

/// The options a file may set: those with a long flag, other than help and version and those
/// the command line must give.
fn settable(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| {
        a.get_long().is_some()
            && !a.is_required_set()
            && !matches!(
                a.get_action(),
                ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
            )
    })
}

fn dotted(path: &[String], key: &str) -> String {
    let mut parts = path.to_vec();
    parts.push(key.to_owned());
    parts.join(".")
}

/// `FILE, line L, column C` of a key, found with the parser's spans (only for errors).
fn key_location(file: &Path, text: &str, path: &[String], key: &str) -> String {
    let span = toml::de::DeTable::parse(text).ok().and_then(|root| {
        let mut table = root.into_inner();
        for part in path {
            let next = table
                .into_iter()
                .find(|(k, _)| k.get_ref().as_ref() == part.as_str())?
                .1
                .into_inner();
            let toml::de::DeValue::Table(t) = next else {
                return None;
            };
            table = t;
        }
        table
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(k, _)| k.span())
    });
    match span {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("{}, line {line}, column {column}", file.display())
        }
        None => file.display().to_string(),
    }
}

/// The text values an option gets from a TOML value.
fn values_of(arg: &Arg, value: &toml::Value) -> Result<Vec<String>, String> {
    let flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
    let scalar = |v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            toml::Value::Datetime(d) => Ok(d.to_string()),
            toml::Value::Array(_) | toml::Value::Table(_) => {
                Err("takes a single value, not an array or a table".to_owned())
            }
        }
    };
    if flag {
        return match value {
            toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
            _ => Err("is a switch: write true or false".to_owned()),
        };
    }
    match value {
        toml::Value::Array(items) => {
            let many = arg.get_value_delimiter().is_some()
                || matches!(arg.get_action(), ArgAction::Append)
                || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
            if !many {
                return Err("takes a single value, not an array".to_owned());
            }
            items.iter().map(scalar).collect()
        }
        v => scalar(v).map(|s| vec![s]),
    }
}

/// Runs the values through the option's own parser (types, ranges, possible values), on a copy
/// of the option alone so that nothing else on the command line or in the environment counts.
fn check(arg: &Arg, values: &[String]) -> Result<(), String> {
    let long = arg.get_long().unwrap_or_default();
    let probe = arg
        .clone()
        .global(false)
        .required(false)
        .env(Resettable::Reset)
        .default_value(Resettable::Reset)
        .conflicts_with(Resettable::Reset)
        .requires(Resettable::Reset)
        .overrides_with(Resettable::Reset)
        .group(Resettable::Reset);
    let argv: Vec<String> = match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => {
            if values.iter().any(|v| v == "true") {
                vec![format!("--{long}")]
            } else {
                Vec::new()
            }
        }
        _ => values.iter().map(|v| format!("--{long}={v}")).collect(),
    };
    Command::new("claude-host")
        .no_binary_name(true)
        .disable_help_flag(true)
        .arg(probe)
        .try_get_matches_from(argv)
        .map(|_| ())
        .map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            first.strip_prefix("error: ").unwrap_or(first).to_owned()
        })
}

/// Whether an option conflicting with the file's was given by flag or environment.
fn conflicts_given(cmd: &Command, given: &ArgMatches, setting: &FileSetting) -> bool {
    let (Some(sub), Some(matches)) = (
        find_path(cmd, &setting.path),
        matches_at(given, &setting.path),
    ) else {
        return false;
    };
    let Some(arg) = sub
        .get_arguments()
        .find(|a| a.get_id() == setting.id.as_str())
    else {
        return false;
    };
    let explicit = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    // Both ways: clap records a conflict on the side that declared it.
    let conflicting: Vec<&Arg> = sub
        .get_arguments()
        .filter(|other| {
            sub.get_arg_conflicts_with(arg)
                .iter()
                .any(|c| c.get_id() == other.get_id())
                || sub
                    .get_arg_conflicts_with(other)
                    .iter()
                    .any(|c| c.get_id() == arg.get_id())
        })
        .collect();
    conflicting.iter().any(|c| explicit(c.get_id().as_str()))
}

fn find_path<'a>(cmd: &'a Command, path: &[String]) -> Option<&'a Command> {
    let mut at = cmd;
    for part in path {
        at = at.find_subcommand(part)?;
    }
    Some(at)
}

/// The matches of the subcommand at `path`, when that is the one being run.
pub(crate) fn matches_at<'a>(matches: &'a ArgMatches, path: &[String]) -> Option<&'a ArgMatches> {
    let mut at = matches;
    for part in path {
        match at.subcommand() {
            Some((name, sub)) if name == part => at = sub,
            _ => return None,
        }
    }
    Some(at)
}

fn apply(cmd: Command, path: &[String], id: &str, values: &[String]) -> Command {
    match path.split_first() {
        None => {
            let values: Vec<String> = values.to_vec();
            cmd.mut_arg(id, |a| a.default_values(values))
        }
        Some((first, rest)) => cmd.mut_subcommand(first, |sub| apply(sub, rest, id, values)),
    }
}

/// Where an option's value came from, for `config show`.
pub(crate) fn source_of(
    matches: &ArgMatches,
    arg: &Arg,
    path: &[String],
    loaded: &Loaded,
) -> String {
    let id = arg.get_id().as_str();
    match matches.value_source(id) {
        Some(ValueSource::CommandLine) => "command line".to_owned(),
        Some(ValueSource::EnvVariable) => format!(
            "environment ({})",
            arg.get_env()
                .map(|e| e.to_string_lossy())
                .unwrap_or_default()
        ),
        Some(ValueSource::DefaultValue)
            if loaded.applied.contains(&FileSetting {
                path: path.to_vec(),
                id: id.to_owned(),
            }) =>
        {
            "config file".to_owned()
        }
        Some(ValueSource::DefaultValue) => "default".to_owned(),
        _ => "not set".to_owned(),
    }
}

/// An option's raw values as TOML (numbers and booleans as themselves), or `None` when unset.
pub(crate) fn toml_value(matches: &ArgMatches, arg: &Arg) -> Option<toml::Value> {
    let raw: Vec<String> = matches
        .get_raw(arg.get_id().as_str())?
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    as_toml(&raw, arg)
}

/// Text values as TOML: one value as itself, those of a list option as an array.
fn as_toml(raw: &[String], arg: &Arg) -> Option<toml::Value> {
    let one = |s: &String| -> toml::Value {
        if let Ok(i) = s.parse::<i64>() {
            toml::Value::Integer(i)
        } else if let Ok(b) = s.parse::<bool>() {
            toml::Value::Boolean(b)
        } else if s.contains('.')
            && s.chars().all(|c| c.is_ascii_digit() || c == '.')
            && let Ok(f) = s.parse::<f64>()
        {
            toml::Value::Float(f)
        } else {
            toml::Value::String(s.clone())
        }
    };
    let list = arg.get_value_delimiter().is_some() || matches!(arg.get_action(), ArgAction::Append);
    match raw {
        [] => None,
        [v] if !list => Some(one(v)),
        vs => Some(toml::Value::Array(vs.iter().map(one).collect())),
    }
}

/// `config show`: every option of claude-host (and those the file sets for subcommands) as
/// TOML, each with where its value came from; secrets masked.
pub(crate) fn show(cmd: &Command, matches: &ArgMatches, loaded: &Loaded, home: &Path) -> String {
    let mut out = String::new();
    match &loaded.path {
        Some(p) => out.push_str(&format!(
            "# config file: {}{}\n",
            p.display(),
            if loaded.found { "" } else { " (not found)" }
        )),
        None => out.push_str("# config file: none (no home directory)\n"),
    }
    out.push_str("# precedence: command line > environment > config file > default\n");
    out.push_str(&format!("# data directory: {}\n", home.display()));
    section(&mut out, cmd, matches, &[], loaded, true);
    let mut paths: Vec<&Vec<String>> = loaded
        .settings
        .iter()
        .map(|(s, _)| &s.path)
        .filter(|p| !p.is_empty())
        .collect();
    paths.dedup();
    for path in paths {
        let (Some(sub), Some(sub_matches)) = (find_path(cmd, path), matches_at(matches, path))
        else {
            // A subcommand not being run: what the file says, as it says it.
            out.push_str(&format!("\n[{}]\n", path.join(".")));
            for (setting, values) in loaded.settings.iter().filter(|(s, _)| &s.path == path) {
                let arg = find_path(cmd, path).and_then(|c| {
                    c.get_arguments()
                        .find(|a| a.get_id() == setting.id.as_str())
                });
                let key = arg.and_then(Arg::get_long).unwrap_or(&setting.id);
                let secret = arg.is_some_and(Arg::is_hide_env_values_set);
                let value = match arg.and_then(|a| as_toml(values, a)) {
                    _ if secret => "\"********\"".to_owned(),
                    Some(v) => v.to_string(),
                    None => "[]".to_owned(),
                };
                out.push_str(&format!("{key} = {value}  # config file\n"));
            }
            continue;
        };
        out.push_str(&format!("\n[{}]\n", path.join(".")));
        section(&mut out, sub, sub_matches, path, loaded, false);
    }
    out
}

fn section(
    out: &mut String,
    cmd: &Command,
    matches: &ArgMatches,
    path: &[String],
    loaded: &Loaded,
    globals: bool,
) {
    for arg in settable(cmd).filter(|a| !globals || a.is_global_set()) {
        let Some(key) = arg.get_long() else { continue };
        let source = source_of(matches, arg, path, loaded);
        match toml_value(matches, arg) {
            Some(_) if arg.is_hide_env_values_set() => {
                out.push_str(&format!("{key} = \"********\"  # {source}\n"));
            }
            Some(v) => out.push_str(&format!("{key} = {v}  # {source}\n")),
            None => out.push_str(&format!("# {key}: not set\n")),
        }
    }
}
