//! Replays every seed and every saved crash of every fuzz target (`fuzz/seeds/<target>/`,
//! `fuzz/regressions/<target>/`) through the target, as a plain test on stable Rust.

use std::path::Path;

#[test]
fn every_seed_and_regression_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, target) in claude_host_fuzz::TARGETS {
        let mut seeds = 0;
        for dir in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                continue;
            };
            let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
            files.sort();
            for file in files {
                if file
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                {
                    continue;
                }
                let Ok(data) = std::fs::read(&file) else {
                    failures.push(format!("{}: unreadable", file.display()));
                    continue;
                };
                if dir == "seeds" {
                    seeds += 1;
                }
                ran += 1;
                if std::panic::catch_unwind(|| target(&data)).is_err() {
                    failures.push(file.display().to_string());
                }
            }
        }
        if seeds == 0 {
            failures.push(format!("target {name} has no seeds"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
