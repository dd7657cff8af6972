//! The `anthropic-beta` allowlist filter.
//!
//! Copilot rejects betas it does not know, so only dated members of known families pass:
//! `b` survives when it starts with `<family>-` — a date suffix is required, so a bare
//! family name is dropped. The filter never adds betas.

/// The families Copilot's `/v1/messages` accepts (VS Code's agent host list).
pub const DEFAULT_BETA_FAMILIES: &[&str] = &[
    "interleaved-thinking",
    "context-management",
    "advanced-tool-use",
    "per-turn-control",
];

/// Filters a comma-separated `anthropic-beta` value. Returns `None` when nothing is left, in
/// which case the header must be omitted.
pub fn filter_betas<S: AsRef<str>>(header: &str, families: &[S]) -> Option<String> {
    let kept: Vec<&str> = header
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .filter(|b| {
            families.iter().any(|f| {
                let f = f.as_ref();
                b.len() > f.len() + 1 && b.starts_with(f) && b.as_bytes()[f.len()] == b'-'
            })
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLI_2_1_330: &str = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24,thinking-display-updates-2026-08-18";

    #[test]
    fn cli_list_keeps_the_four_dated_families() {
        assert_eq!(
            filter_betas(CLI_2_1_330, DEFAULT_BETA_FAMILIES).as_deref(),
            Some(
                "interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,advanced-tool-use-2025-11-20"
            )
        );
    }

    #[test]
    fn bare_family_dropped_and_whitespace_trimmed() {
        assert_eq!(
            filter_betas(
                " interleaved-thinking , context-management-2025-06-27 ",
                DEFAULT_BETA_FAMILIES
            )
            .as_deref(),
            Some("context-management-2025-06-27")
        );
        assert_eq!(
            filter_betas("interleaved-thinking-", DEFAULT_BETA_FAMILIES),
            None
        );
    }

    #[test]
    fn none_left_means_no_header() {
        assert_eq!(
            filter_betas(
                "claude-code-20250219,effort-2025-11-24",
                DEFAULT_BETA_FAMILIES
            ),
            None
        );
        assert_eq!(filter_betas("", DEFAULT_BETA_FAMILIES), None);
    }

    #[test]
    fn configurable_families() {
        assert_eq!(
            filter_betas("effort-2025-11-24,claude-code-20250219", &["effort"]).as_deref(),
            Some("effort-2025-11-24")
        );
    }
}
