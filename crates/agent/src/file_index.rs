//! The files and folders under a session's folders, for `@` completions: one [`FileIndex`]
//! per folder (a walk that respects `.gitignore`, `.ignore` and git's excludes, never follows
//! a symlink, and skips `.git`, `node_modules`, `target` and the like even without a
//! `.gitignore`), kept in [`FileIndexes`], a cache every session shares.
//!
//! A query answers from the index the cache has; when that index is a few seconds old it
//! starts one rebuild in the background (stale-while-revalidate), so a file created since
//! shows up a keystroke or two later. Only the first query on a folder nobody warmed waits
//! for a walk.
//!
//! Paths are kept in two arenas, not one allocation each: every relative path lowercased and
//! NUL-terminated (searched in one pass with `memmem`, so a query allocates nothing per
//! entry), and the original bytes only of the paths whose lowercase differs.

use crate::completions::FileMatch;
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use memchr::memmem;
use std::collections::{BinaryHeap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Folders never indexed, `.gitignore` or not: version control, dependencies, build output
/// and caches.
const SKIPPED: [&str; 15] = [
    ".git",
    ".hg",
    ".svn",
    ".jj",
    "node_modules",
    "target",
    ".venv",
    "__pycache__",
    "dist",
    ".cache",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    ".next",
    ".gradle",
];

/// Marks an entry whose original path is its lowercased one.
const SAME: u32 = u32::MAX;

/// How the cache builds and refreshes its indexes.
#[derive(Debug, Clone)]
pub struct IndexSettings {
    /// An index younger than this answers without a rebuild.
    pub fresh_for: Duration,
    /// … nor one younger than this many times the walk that built it took (a huge tree is
    /// not walked again every few seconds).
    pub rebuild_factor: u32,
    /// Entries an index holds at most; the walk stops there (and says so in the log).
    pub cap: usize,
    /// An index nobody asked for in this long is dropped.
    pub idle_for: Duration,
}

impl Default for IndexSettings {
    fn default() -> IndexSettings {
        IndexSettings {
            fresh_for: Duration::from_secs(5),
            rebuild_factor: 10,
            cap: 1_000_000,
            idle_for: Duration::from_secs(15 * 60),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Where its lowercased path starts in `lower`.
    lower: u32,
    /// Where its original path starts in `original`, or [`SAME`].
    original: u32,
    is_dir: bool,
}

/// Every file and folder under one root, by path relative to it.
#[derive(Debug)]
pub struct FileIndex {
    root: PathBuf,
    /// The lowercased relative paths, each followed by a NUL.
    lower: Vec<u8>,
    /// The original bytes of the paths whose lowercase differs, each followed by a NUL.
    original: Vec<u8>,
    entries: Vec<Entry>,
    capped: bool,
    built: Instant,
    took: Duration,
}

/// Entries as one walker thread finds them, merged into a [`FileIndex`] at the end.
#[derive(Debug, Default)]
struct Parts {
    lower: Vec<u8>,
    original: Vec<u8>,
    entries: Vec<Entry>,
}

impl Parts {
    /// Adds `relative`; false when the arenas are full (4 GiB of paths).
    fn push(&mut self, relative: &[u8], is_dir: bool) -> bool {
        let (Ok(lower), Ok(original)) = (
            u32::try_from(self.lower.len()),
            u32::try_from(self.original.len()),
        ) else {
            return false;
        };
        match std::str::from_utf8(relative) {
            Ok(text) if text.is_ascii() => self
                .lower
                .extend(relative.iter().map(u8::to_ascii_lowercase)),
            Ok(text) => self.lower.extend_from_slice(text.to_lowercase().as_bytes()),
            Err(_) => self
                .lower
                .extend_from_slice(String::from_utf8_lossy(relative).to_lowercase().as_bytes()),
        }
        let original = if self.lower[lower as usize..] == *relative {
            SAME
        } else {
            self.original.extend_from_slice(relative);
            self.original.push(0);
            original
        };
        self.lower.push(0);
        self.entries.push(Entry {
            lower,
            original,
            is_dir,
        });
        true
    }

    fn append(&mut self, other: Parts) -> bool {
        let (Ok(lower), Ok(original)) = (
            u32::try_from(self.lower.len()),
            u32::try_from(self.original.len()),
        ) else {
            return false;
        };
        if u32::try_from(self.lower.len() + other.lower.len()).is_err()
            || u32::try_from(self.original.len() + other.original.len()).is_err()
        {
            return false;
        }
        self.entries
            .extend(other.entries.into_iter().map(|e| Entry {
                lower: e.lower + lower,
                original: if e.original == SAME {
                    SAME
                } else {
                    e.original + original
                },
                is_dir: e.is_dir,
            }));
        self.lower.extend_from_slice(&other.lower);
        self.original.extend_from_slice(&other.original);
        true
    }
}

/// One walker thread's visitor: collects into its own [`Parts`], handed over when the walk
/// drops it.
struct Collector<'a> {
    root: &'a Path,
    parts: Parts,
    done: &'a Mutex<Vec<Parts>>,
    count: &'a AtomicUsize,
    capped: &'a AtomicBool,
    cap: usize,
}

impl ParallelVisitor for Collector<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(root = %self.root.display(), error = %e, "an entry the file index cannot read");
                return WalkState::Continue;
            }
        };
        if entry.depth() == 0 {
            return WalkState::Continue;
        }
        let Ok(relative) = entry.path().strip_prefix(self.root) else {
            return WalkState::Continue;
        };
        // The entry's own type: a symlink is listed, never followed.
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if self.count.fetch_add(1, Ordering::Relaxed) >= self.cap
            || !self.parts.push(relative.as_os_str().as_bytes(), is_dir)
        {
            self.capped.store(true, Ordering::Relaxed);
            return WalkState::Quit;
        }
        WalkState::Continue
    }
}

impl Drop for Collector<'_> {
    fn drop(&mut self) {
        let parts = std::mem::take(&mut self.parts);
        self.done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(parts);
    }
}

struct Collectors<'a> {
    root: &'a Path,
    done: &'a Mutex<Vec<Parts>>,
    count: &'a AtomicUsize,
    capped: &'a AtomicBool,
    cap: usize,
}

impl<'s> ParallelVisitorBuilder<'s> for Collectors<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Collector {
            root: self.root,
            parts: Parts::default(),
            done: self.done,
            count: self.count,
            capped: self.capped,
            cap: self.cap,
        })
    }
}

impl FileIndex {
    /// Walks `root` (blocking: run it off the async workers), keeping at most `cap` entries.
    pub fn build(root: &Path, cap: usize) -> FileIndex {
        Self::build_with(root, cap, global_excludes_file(|k| std::env::var_os(k)))
    }

    /// [`FileIndex::build`] with the user's global git excludes file given.
    fn build_with(root: &Path, cap: usize, global_excludes: Option<PathBuf>) -> FileIndex {
        let started = Instant::now();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let done = Mutex::new(Vec::new());
        let count = AtomicUsize::new(0);
        let capped = AtomicBool::new(false);
        let mut walk = WalkBuilder::new(root);
        walk
            // Hidden files are offered (`.github/…`, `.env`); the folders in SKIPPED are not.
            .hidden(false)
            .follow_links(false)
            .threads(threads)
            // Found by `global_excludes_file` instead (see there), and added below.
            .git_global(false)
            .filter_entry(|e| {
                !(e.depth() > 0
                    && e.file_type().is_some_and(|t| t.is_dir())
                    && e.file_name().to_str().is_some_and(|n| SKIPPED.contains(&n)))
            });
        if let Some(excludes) = global_excludes
            && let Some(e) = walk.add_ignore(&excludes)
        {
            tracing::debug!(file = %excludes.display(), error = %e, "a line of the global git excludes file is not used");
        }
        walk.build_parallel().visit(&mut Collectors {
            root,
            done: &done,
            count: &count,
            capped: &capped,
            cap,
        });
        let mut parts = done
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .into_iter();
        let mut all = parts.next().unwrap_or_default();
        let mut capped = capped.into_inner();
        for p in parts {
            capped |= !all.append(p);
        }
        all.lower.shrink_to_fit();
        all.original.shrink_to_fit();
        all.entries.shrink_to_fit();
        let took = started.elapsed();
        if capped {
            tracing::warn!(root = %root.display(), entries = all.entries.len(), "the file index is capped: files beyond it are not offered for @");
        } else {
            tracing::debug!(root = %root.display(), entries = all.entries.len(), took_ms = took.as_millis(), "indexed files");
        }
        FileIndex {
            root: root.to_owned(),
            lower: all.lower,
            original: all.original,
            entries: all.entries,
            capped,
            built: Instant::now(),
            took,
        }
    }

    /// An index of nothing (for a walk that failed).
    fn empty(root: &Path) -> FileIndex {
        FileIndex {
            root: root.to_owned(),
            lower: Vec::new(),
            original: Vec::new(),
            entries: Vec::new(),
            capped: false,
            built: Instant::now(),
            took: Duration::ZERO,
        }
    }

    /// The folder it indexes.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How many files and folders it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the walk stopped at the cap.
    pub fn is_capped(&self) -> bool {
        self.capped
    }

    /// How long the walk took.
    pub fn build_time(&self) -> Duration {
        self.took
    }

    /// The heap memory it holds, in bytes.
    pub fn heap_bytes(&self) -> usize {
        self.lower.capacity()
            + self.original.capacity()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// Entry `i`'s lowercased path.
    fn lower_of(&self, i: usize) -> &[u8] {
        let start = self.entries[i].lower as usize;
        let end = self
            .entries
            .get(i + 1)
            .map_or(self.lower.len(), |e| e.lower as usize)
            - 1;
        &self.lower[start..end]
    }

    /// Entry `i`'s path as found.
    fn original_of(&self, i: usize) -> &[u8] {
        match self.entries[i].original {
            SAME => self.lower_of(i),
            start => {
                let rest = &self.original[start as usize..];
                &rest[..memchr::memchr(0, rest).unwrap_or(rest.len())]
            }
        }
    }

    /// Calls `found` with each entry whose lowercased path contains `finder`'s needle (no
    /// NUL in it: a match never spans two entries).
    fn each_match(&self, finder: &memmem::Finder<'_>, mut found: impl FnMut(usize)) {
        if finder.needle().is_empty() {
            (0..self.entries.len()).for_each(found);
            return;
        }
        let (mut i, mut from) = (0, 0);
        while let Some(at) = finder.find(&self.lower[from..]) {
            let at = from + at;
            // Matches come in order: step forward to the entry holding this one (one pass
            // over the entries in all).
            while self
                .entries
                .get(i + 1)
                .is_some_and(|e| e.lower as usize <= at)
            {
                i += 1;
            }
            found(i);
            i += 1;
            from = self
                .entries
                .get(i)
                .map_or(self.lower.len(), |e| e.lower as usize);
        }
    }
}

/// A match kept while ranking: ordered best first.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ranked<'a> {
    name_differs: bool,
    len: usize,
    relative: &'a [u8],
    index: usize,
    entry: usize,
}

/// The files and folders of `indexes` whose relative path contains `query` (any case): those
/// whose name starts with it first, then shorter paths, then in order; at most `limit`.
pub fn search(indexes: &[Arc<FileIndex>], query: &str, limit: usize) -> Vec<FileMatch> {
    let query = query.to_lowercase();
    if limit == 0 || query.contains('\0') {
        return Vec::new();
    }
    let finder = memmem::Finder::new(query.as_bytes());
    // The best `limit` so far, the worst on top.
    let mut best: BinaryHeap<Ranked<'_>> = BinaryHeap::with_capacity(limit + 1);
    for (n, index) in indexes.iter().enumerate() {
        index.each_match(&finder, |i| {
            let lower = index.lower_of(i);
            let name = memchr::memrchr(b'/', lower).map_or(lower, |slash| &lower[slash + 1..]);
            let relative = index.original_of(i);
            let ranked = Ranked {
                name_differs: !name.starts_with(query.as_bytes()),
                len: relative.len(),
                relative,
                index: n,
                entry: i,
            };
            if best.len() < limit {
                best.push(ranked);
            } else if best.peek().is_some_and(|worst| ranked < *worst) {
                best.pop();
                best.push(ranked);
            }
        });
    }
    best.into_sorted_vec()
        .into_iter()
        .map(|r| {
            let index = &indexes[r.index];
            FileMatch {
                path: index.root.join(OsStr::from_bytes(r.relative)),
                relative: String::from_utf8_lossy(r.relative).into_owned(),
                is_dir: index.entries[r.entry].is_dir,
            }
        })
        .collect()
}

#[derive(Debug, Clone, Default)]
struct SlotState {
    index: Option<Arc<FileIndex>>,
    building: bool,
}

#[derive(Debug)]
struct Slot {
    state: watch::Sender<SlotState>,
    used: Mutex<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The user's global git excludes file, if there is one: `core.excludesFile` of git's
/// config (`$GIT_CONFIG_GLOBAL`, `~/.gitconfig`, `$XDG_CONFIG_HOME/git/config`, then
/// `$GIT_CONFIG_SYSTEM` or `/etc/gitconfig`, the first that names one), else
/// `$XDG_CONFIG_HOME/git/ignore`. `var` reads the environment.
///
/// The `ignore` crate finds the same file itself (`git_global`), reading the config line
/// with a regex it compiles on a process's first walk: the regex engine's code was a third
/// of what a host paged in on its first session open, about 450 KiB kept resident for good,
/// to read one line (docs/BENCHMARKS.md, *What a first open faults in*). Given as an
/// ignore file instead, its patterns apply in every folder, where `git_global` applies them
/// only inside a git repository: an `.DS_Store` or `*.swp` the user excludes is no more
/// wanted for `@` outside one.
fn global_excludes_file(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = set("HOME");
    let xdg = set("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    let configs = [
        set("GIT_CONFIG_GLOBAL"),
        home.as_ref().map(|h| h.join(".gitconfig")),
        xdg.as_ref().map(|x| x.join("git/config")),
        Some(set("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig"))),
    ];
    configs
        .into_iter()
        .flatten()
        .find_map(|c| excludes_file_in(&std::fs::read(c).ok()?, home.as_deref()))
        .or_else(|| xdg.map(|x| x.join("git/ignore")))
        .filter(|f| f.is_file())
}

/// The `excludesFile` a git config names, read as `ignore` reads it: the first line
/// `excludesfile = <path>` (any case, in any section, the path optionally quoted and without
/// spaces), a leading `~/` the home directory.
fn excludes_file_in(config: &[u8], home: Option<&Path>) -> Option<PathBuf> {
    config.split(|&b| b == b'\n').find_map(|line| {
        let (key, rest) = line.trim_ascii().split_at_checked(b"excludesfile".len())?;
        if !key.eq_ignore_ascii_case(b"excludesfile") {
            return None;
        }
        let value = rest.trim_ascii_start().strip_prefix(b"=")?.trim_ascii();
        let value = value
            .strip_prefix(b"\"")
            .unwrap_or(value)
            .trim_ascii_start();
        let value = value.strip_suffix(b"\"").unwrap_or(value).trim_ascii_end();
        if value.is_empty() || value.iter().any(u8::is_ascii_whitespace) {
            return None;
        }
        let value = std::str::from_utf8(value).ok()?;
        Some(match (value.strip_prefix('~'), home) {
            (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
                home.join(rest.trim_start_matches('/'))
            }
            _ => PathBuf::from(value),
        })
    })
}

/// The file indexes of every folder sessions work in, shared by all of them.
#[derive(Debug, Default)]
pub struct FileIndexes {
    slots: Mutex<HashMap<PathBuf, Arc<Slot>>>,
    settings: IndexSettings,
}

impl FileIndexes {
    /// An empty cache.
    pub fn new(settings: IndexSettings) -> FileIndexes {
        FileIndexes {
            slots: Mutex::default(),
            settings,
        }
    }

    /// Starts indexing `roots` that have no fresh index (without waiting), so the first `@`
    /// is answered at once. Needs a Tokio runtime.
    pub fn warm(&self, roots: &[PathBuf]) {
        for root in roots {
            self.current(root);
        }
    }

    /// [`search`] over the indexes of `roots`: the ones it has (starting a rebuild of those
    /// gone stale), else built now.
    pub async fn find(&self, roots: Vec<PathBuf>, query: String, limit: usize) -> Vec<FileMatch> {
        let slots: Vec<_> = roots.iter().map(|r| (self.current(r), r)).collect();
        let mut indexes = Vec::with_capacity(slots.len());
        for ((slot, index), root) in slots {
            match index {
                Some(index) => indexes.push(index),
                None => {
                    let mut rx = slot.state.subscribe();
                    match rx.wait_for(|s| s.index.is_some()).await {
                        Ok(s) => indexes.extend(s.index.clone()),
                        Err(_) => tracing::warn!(root = %root.display(), "no file index"),
                    }
                }
            }
        }
        match tokio::task::spawn_blocking(move || search(&indexes, &query, limit)).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "the file search failed");
                Vec::new()
            }
        }
    }

    /// Waits until no walk of `root` is running (for tests and benchmarks: a rebuild that a
    /// query started has landed).
    pub async fn rebuilt(&self, root: &Path) {
        let slot = lock(&self.slots).get(root).cloned();
        if let Some(slot) = slot {
            let _ = slot.state.subscribe().wait_for(|s| !s.building).await;
        }
    }

    /// `root`'s slot and the index it has now, starting a walk if it has none or a stale one
    /// (and none is running).
    fn current(&self, root: &Path) -> (Arc<Slot>, Option<Arc<FileIndex>>) {
        let now = Instant::now();
        let slot = {
            let mut slots = lock(&self.slots);
            let idle_for = self.settings.idle_for;
            slots.retain(|r, s| {
                r == root
                    || s.state.borrow().building
                    || now.duration_since(*lock(&s.used)) < idle_for
            });
            slots
                .entry(root.to_owned())
                .or_insert_with(|| {
                    Arc::new(Slot {
                        state: watch::Sender::new(SlotState::default()),
                        used: Mutex::new(now),
                    })
                })
                .clone()
        };
        *lock(&slot.used) = now;
        let mut start = false;
        let mut current = None;
        slot.state.send_if_modified(|s| {
            current.clone_from(&s.index);
            let stale = s.index.as_ref().is_none_or(|i| {
                let fresh_for = self
                    .settings
                    .fresh_for
                    .max(i.took * self.settings.rebuild_factor);
                now.duration_since(i.built) >= fresh_for
            });
            start = stale && !s.building;
            s.building |= start;
            start
        });
        if start {
            self.walk(root, &slot);
        }
        (slot, current)
    }

    /// Builds `root`'s index beside the async workers and puts it in `slot`.
    fn walk(&self, root: &Path, slot: &Arc<Slot>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(root = %root.display(), "no runtime to index files on");
            slot.state.send_modify(|s| s.building = false);
            return;
        };
        let (root, slot, cap) = (root.to_owned(), slot.clone(), self.settings.cap);
        runtime.spawn(async move {
            let walked = root.clone();
            let index =
                match tokio::task::spawn_blocking(move || FileIndex::build(&walked, cap)).await {
                    Ok(index) => index,
                    Err(e) => {
                        tracing::warn!(root = %root.display(), error = %e, "indexing files failed");
                        FileIndex::empty(&root)
                    }
                };
            slot.state.send_modify(|s| {
                s.index = Some(Arc::new(index));
                s.building = false;
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn names(found: &[FileMatch]) -> Vec<(&str, bool)> {
        found
            .iter()
            .map(|m| (m.relative.as_str(), m.is_dir))
            .collect()
    }

    #[test]
    fn the_excludes_file_is_read_from_a_git_config_as_ignore_reads_it() {
        let home = Some(Path::new("/home/u"));
        let read = |c: &str| excludes_file_in(c.as_bytes(), home);
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(read("[core]\nexcludesFile = /foo/bar"), p("/foo/bar"));
        assert_eq!(
            read("[core]\n\texcludesfile=~/foo/bar\r\n"),
            p("/home/u/foo/bar")
        );
        assert_eq!(read("[core]\nEXCLUDESFILE = \"~/q\""), p("/home/u/q"));
        assert_eq!(read("[core]\nexcludeFile = /foo/bar"), None);
        assert_eq!(read("[core]\nexcludesFilex = /foo/bar"), None);
        assert_eq!(read("[core]\nexcludesFile = \" \"~/foo/bar \" \""), None);
        assert_eq!(read("[core]\nexcludesFile = a b"), None);
        // Only a leading `~` alone or before a slash is the home directory.
        assert_eq!(read("excludesFile = C:/RUNNER~1/x"), p("C:/RUNNER~1/x"));
        assert_eq!(read("excludesFile = ~other/x"), p("~other/x"));
        // The first line that reads as one wins.
        assert_eq!(
            read("excludesfile = a b\n[x]\nexcludesfile = /one\nexcludesfile = /two"),
            p("/one")
        );
    }

    #[test]
    fn the_global_excludes_file_is_looked_up_where_git_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let xdg = home.join(".config");
        std::fs::create_dir_all(xdg.join("git")).unwrap();
        let file = |name: &str| {
            let f = dir.path().join(name);
            std::fs::write(&f, "*.swp\n").unwrap();
            f
        };
        let env = |vars: Vec<(&'static str, PathBuf)>| {
            let home = home.clone();
            move |k: &str| {
                if k == "HOME" {
                    return Some(home.clone().into_os_string());
                }
                vars.iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| v.clone().into_os_string())
            }
        };
        let none = PathBuf::from("/nonexistent/gitconfig");
        let no_system = || vec![("GIT_CONFIG_SYSTEM", none.clone())];
        // Nothing configured and no default file.
        assert_eq!(global_excludes_file(env(no_system())), None);
        // The default, `$XDG_CONFIG_HOME/git/ignore` (here `~/.config`).
        std::fs::write(xdg.join("git/ignore"), "*.tmp\n").unwrap();
        assert_eq!(
            global_excludes_file(env(no_system())),
            Some(xdg.join("git/ignore"))
        );
        // `~/.config/git/config` names one, then `~/.gitconfig` does, which comes first.
        let from_xdg = file("from-xdg");
        std::fs::write(
            xdg.join("git/config"),
            format!("[core]\n\texcludesFile = {}\n", from_xdg.display()),
        )
        .unwrap();
        assert_eq!(global_excludes_file(env(no_system())), Some(from_xdg));
        file("from-home");
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\tname = U\n[core]\n\texcludesfile = \"~/../from-home\"\n",
        )
        .unwrap();
        assert_eq!(
            global_excludes_file(env(no_system())),
            Some(home.join("../from-home"))
        );
        // `$GIT_CONFIG_GLOBAL` first of all; a named file that does not exist is none.
        let global = dir.path().join("global-config");
        std::fs::write(&global, "[core]\nexcludesFile = /nonexistent/ignore\n").unwrap();
        let mut vars = no_system();
        vars.push(("GIT_CONFIG_GLOBAL", global));
        assert_eq!(global_excludes_file(env(vars)), None);
    }

    #[test]
    fn the_global_excludes_file_hides_files_in_any_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("work");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "").unwrap();
        std::fs::write(root.join("src/.a.rs.swp"), "").unwrap();
        std::fs::write(root.join("keep.swp"), "").unwrap();
        std::fs::write(root.join(".gitignore"), "!keep.swp\n").unwrap();
        let excludes = dir.path().join("ignore");
        std::fs::write(&excludes, "*.swp\n").unwrap();
        let found = |excludes: Option<PathBuf>| {
            let index = Arc::new(FileIndex::build_with(&root, 100, excludes));
            let mut n: Vec<String> = search(&[index], "", 100)
                .into_iter()
                .map(|m| m.relative)
                .collect();
            n.sort();
            n
        };
        assert_eq!(
            found(None),
            [".gitignore", "keep.swp", "src", "src/.a.rs.swp", "src/a.rs"]
        );
        // Not a git repository, and applied all the same (and `.gitignore` is not).
        assert_eq!(
            found(Some(excludes.clone())),
            [".gitignore", "src", "src/a.rs"]
        );
        // In a repository its `.gitignore` comes first, as with git.
        std::fs::create_dir(root.join(".git")).unwrap();
        assert_eq!(
            found(Some(excludes)),
            [".gitignore", "keep.swp", "src", "src/a.rs"]
        );
    }

    fn always_stale() -> FileIndexes {
        FileIndexes::new(IndexSettings {
            fresh_for: Duration::ZERO,
            rebuild_factor: 0,
            ..IndexSettings::default()
        })
    }

    #[tokio::test]
    async fn files_match_by_path_names_first_and_skip_build_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/main_dir")).unwrap();
        std::fs::create_dir_all(root.join("node_modules/main")).unwrap();
        std::fs::create_dir_all(root.join(".git/main")).unwrap();
        std::fs::write(root.join("src/main.rs"), "").unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("domain.txt"), "").unwrap();
        let indexes = FileIndexes::default();
        let found = indexes
            .find(vec![root.to_path_buf()], "MAIN".into(), 10)
            .await;
        assert_eq!(
            names(&found),
            [
                ("src/main.rs", false),
                ("src/main_dir", true),
                ("domain.txt", false)
            ],
            "nothing from node_modules or .git"
        );
        assert_eq!(found[0].path, root.join("src/main.rs"));
        let two = indexes
            .find(vec![root.to_path_buf()], String::new(), 2)
            .await;
        assert_eq!(names(&two), [("src", true), ("domain.txt", false)]);
    }

    #[test]
    fn files_beyond_twenty_thousand_entries_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in 0..25 {
            let folder = root.join(format!("d{d:02}"));
            std::fs::create_dir(&folder).unwrap();
            for f in 0..1_000 {
                std::fs::File::create(folder.join(format!("f{f:04}.txt"))).unwrap();
            }
        }
        std::fs::write(root.join("d24/needle.rs"), "").unwrap();
        std::fs::write(root.join("d00/NEEDLE.md"), "").unwrap();
        let index = Arc::new(FileIndex::build(root, 1_000_000));
        assert_eq!((index.len(), index.is_capped()), (25_027, false));
        assert_eq!(
            names(&search(std::slice::from_ref(&index), "needle", 10)),
            [("d00/NEEDLE.md", false), ("d24/needle.rs", false)]
        );
        assert_eq!(
            search(std::slice::from_ref(&index), "d13/f0999", 10).len(),
            1
        );
        let capped = FileIndex::build(root, 100);
        assert_eq!((capped.len(), capped.is_capped()), (100, true));
    }

    #[test]
    fn ignored_files_are_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/info")).unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n*.log\n").unwrap();
        std::fs::write(root.join(".git/info/exclude"), "secret.txt\n").unwrap();
        std::fs::create_dir_all(root.join("build/gen")).unwrap();
        std::fs::create_dir_all(root.join("src/vendor")).unwrap();
        std::fs::write(root.join("src/vendor/.ignore"), "*.c\n").unwrap();
        for f in [
            "build/gen/out.rs",
            "app.log",
            "secret.txt",
            "src/app.rs",
            "src/vendor/x.c",
            ".env",
        ] {
            std::fs::write(root.join(f), "").unwrap();
        }
        let index = Arc::new(FileIndex::build(root, 1_000_000));
        let mut all = names(&search(std::slice::from_ref(&index), "", 100))
            .into_iter()
            .map(|(n, _)| n.to_owned())
            .collect::<Vec<_>>();
        all.sort();
        assert_eq!(
            all,
            [
                ".env",
                ".gitignore",
                "src",
                "src/app.rs",
                "src/vendor",
                "src/vendor/.ignore"
            ]
        );
    }

    #[tokio::test]
    async fn a_file_created_after_the_index_shows_up_after_the_rebuild_its_query_started() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("old.rs"), "").unwrap();
        let indexes = always_stale();
        let find = |q: &str| indexes.find(vec![root.clone()], q.into(), 10);
        assert_eq!(names(&find(".rs").await), [("old.rs", false)]);
        indexes.rebuilt(&root).await;
        std::fs::write(root.join("new.rs"), "").unwrap();
        // Answered from the index it has; the stale index starts one rebuild.
        assert_eq!(names(&find(".rs").await), [("old.rs", false)]);
        indexes.rebuilt(&root).await;
        assert_eq!(
            names(&find(".rs").await),
            [("new.rs", false), ("old.rs", false)]
        );
    }

    #[tokio::test]
    async fn a_fresh_index_is_not_rebuilt_and_a_warmed_root_needs_no_walk_to_answer() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("a.rs"), "").unwrap();
        let indexes = FileIndexes::default();
        indexes.warm(std::slice::from_ref(&root));
        indexes.rebuilt(&root).await;
        std::fs::write(root.join("b.rs"), "").unwrap();
        let found = indexes.find(vec![root.clone()], ".rs".into(), 10).await;
        assert_eq!(names(&found), [("a.rs", false)]);
        let (slot, _) = indexes.current(&root);
        assert!(!slot.state.borrow().building, "no rebuild within 5 s");
    }

    #[test]
    fn a_symlink_out_of_the_root_is_listed_but_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join("inner")).unwrap();
        std::fs::write(outside.path().join("inner/private.txt"), "").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("inner/private.txt"), root.join("file"))
            .unwrap();
        let index = Arc::new(FileIndex::build(root, 1_000_000));
        let found = search(std::slice::from_ref(&index), "", 10);
        assert_eq!(names(&found), [("file", false), ("link", false)]);
        assert_eq!(found[1].path, root.join("link"));
        assert!(search(&[index], "private", 10).is_empty());
        // A folder that is itself a symlink is the user's folder: it is walked.
        let through = Arc::new(FileIndex::build(&root.join("link"), 1_000_000));
        assert_eq!(
            names(&search(&[through], "", 10)),
            [("inner", true), ("inner/private.txt", false)]
        );
    }

    #[test]
    fn names_keep_their_case_and_queries_match_any_case() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("Docs")).unwrap();
        std::fs::write(root.join("Docs/ÉTÉ.md"), "").unwrap();
        std::fs::write(root.join("readme.md"), "").unwrap();
        let b = Arc::new(FileIndex::build(root, 1_000_000));
        let found = search(std::slice::from_ref(&b), "été", 10);
        assert_eq!(names(&found), [("Docs/ÉTÉ.md", false)]);
        assert_eq!(found[0].path, root.join("Docs/ÉTÉ.md"));
        assert_eq!(
            names(&search(std::slice::from_ref(&b), "DOCS/", 10)),
            [("Docs/ÉTÉ.md", false)]
        );
        // Each entry once, however often it holds the query.
        assert_eq!(
            names(&search(&[b], "d", 10)),
            [("Docs", true), ("readme.md", false), ("Docs/ÉTÉ.md", false)]
        );
    }

    #[test]
    fn several_roots_rank_together() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("x_main.rs"), "").unwrap();
        std::fs::write(b.path().join("main.rs"), "").unwrap();
        let indexes = [
            Arc::new(FileIndex::build(a.path(), 10)),
            Arc::new(FileIndex::build(b.path(), 10)),
        ];
        let found = search(&indexes, "main", 10);
        assert_eq!(names(&found), [("main.rs", false), ("x_main.rs", false)]);
        assert_eq!(found[0].path, b.path().join("main.rs"));
    }
}
