//! The AFL++ harness: `fuzz-target <target>` runs one target on each input AFL++ hands it.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = claude_host_fuzz::target(&name) else {
        eprintln!(
            "usage: fuzz-target <{}>",
            claude_host_fuzz::TARGETS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join("|")
        );
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        target(data);
    });
}
