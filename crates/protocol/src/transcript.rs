//! Transcript paths: the project-directory slug Claude Code derives from a working directory.

/// Longest slug kept verbatim; longer ones are cut and suffixed with a hash.
pub const MAX_SLUG_LEN: usize = 200;

/// The slug of an (already resolved) absolute path: every character outside `[A-Za-z0-9]`
/// becomes `-`; past 200 characters the slug is cut to 200 and `-<base36 hash>` is appended,
/// the hash being Java's `String.hashCode` over UTF-16 code units, absolute value.
pub fn project_slug(path: &str) -> String {
    let slug: String = path
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if slug.chars().count() <= MAX_SLUG_LEN {
        return slug;
    }
    let mut h: i32 = 0;
    for unit in path.encode_utf16() {
        h = h
            .wrapping_shl(5)
            .wrapping_sub(h)
            .wrapping_add(i32::from(unit));
    }
    let head: String = slug.chars().take(MAX_SLUG_LEN).collect();
    format!("{head}-{}", base36(u64::from(h.unsigned_abs())))
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors() {
        assert_eq!(project_slug("/home/user/project"), "-home-user-project");
        assert_eq!(
            project_slug("/tmp/slugtest/My Project.v2_x"),
            "-tmp-slugtest-My-Project-v2-x"
        );
        assert_eq!(project_slug("/a/ünï-cödé"), "-a--n--c-d-");
    }

    #[test]
    fn long_paths_are_cut_and_hashed() {
        let long = format!("/tmp/{}", "a".repeat(258));
        assert_eq!(long.len(), 263);
        let slug = project_slug(&long);
        assert_eq!(slug.len(), 207, "{slug}");
        assert!(slug.starts_with("-tmp-aaaa"));
        assert_eq!(&slug[200..201], "-");
        // Java: "ab".hashCode() == 3105 -> base36 "2e9"
        assert_eq!(base36(3105), "2e9");
    }
}
